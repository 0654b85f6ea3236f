"""Mixed precision: where a calibrated int8/int16 plan loses the model, the values whose rounding
does it stay in float, chosen from the per-layer error table, instead of a refusal.

``nx.compile(model, device, quantize="int8", calibration=batches)`` verifies that the core's
integer reference is within :data:`~neurenix_core.graph.quantization.verify.PLAN_TOLERANCE` (30%)
of float on the verification batches (``verify.VERIFY_BATCHES``). A transformer whose residual
stream holds a few huge channels (the "massive activations" of trained ViTs, BERT's outlier
dimensions) fails it: per-tensor int8 of a layer norm's input gives the other channels a step as
large as their values, and the norm scales that noise up (timm's ViT-Tiny: 48.5% from float).
Here the plan loses those values instead, as OpenVINO's accuracy-aware quantization and NNCF's
ignored scopes do.

What can stay in float is what a :class:`~neurenix_core.graph.ir.QuantizationPlan` can leave out:
a value without parameters is computed in float by its producer and read in float by its
consumers (the integer reference dequantizes their other inputs; the npu plugin puts no
FakeQuantize there; a full-integer writer refuses those nodes and the core places them on cpu:0).
The values an integer kernel reads (the inputs of ``linear``, ``conv2d``, ``relu``, pooling) or
writes as integers (the outputs of ``relu`` and pooling: ``qmath.check_plan``), the float model
inputs and the model outputs (which verification compares) stay quantized: residual adds,
attention, softmax, GELU and layer norms can go to float, and so can a linear or conv layer's
output (``qmath.FLOAT_OUTPUT_OPS``: int8 inputs and weights, the int32 accumulator dequantized and
the bias added in float, as PyTorch's X86 PTQ does for the linear layers feeding a layer norm or
a residual add); the layer itself computes in int8. ``float_outputs=False`` keeps those outputs
int8 (on edgetpu a float output takes the whole layer to cpu:0).

The choice (a "run" is the integer reference over the verification batches; the float reference
runs once; :func:`verify.layer_errors`'s table, extended to the values already in float):

1. Every node's *jump* is its output's error minus its inputs' largest: what the node adds. It is
   credited to the node's output where the plan may drop it and that value's own rounding explains
   half the jump, else to its droppable inputs (a layer norm multiplies the rounding of its input,
   the residual add). Selections (slice, gather) have no jump: a part of a value (a ViT's class
   token) is not comparable to the whole.
2. Values joined by a node that keeps their parameters (reshape, transpose) form one group:
   dropping one alone would leave the others rounding on the same grid.
3. A round drops every group credited with at least half of the largest jump, then measures; the
   next round halves that share and re-ranks on the new table (an error first credited to a
   node's output moves to its inputs when dropping the output did not remove it). Where no node
   jumps, groups are ranked by their own rounding: an error spread over a deep residual stream.
4. Within :data:`MIXED_TARGET` (or, where no mix reaches it, within 10% of the least error found),
   pruning puts back the groups whose rounds removed the least error, as many as the bound allows
   (a binary search: a few runs): the fewest float layers this order finds.

Why this and not a sensitivity pass (one run per candidate, alone in float or alone quantized):
that costs a run per candidate, 80 or more for a 12-block ViT, and ranks an error spread over
many values poorly (no value alone moves it); these rounds took 2 to 10 runs on the models of
tests/test_int8_mixed_precision.py and up to the cap on benchmarks/int8_mixed.py's 12-block ViT. Every round and the pruning stop
at :data:`MAX_RUNS`, with a rich progress bar (``progress=False`` hides it, as for calibration).

When to mix (:func:`mix_for_device`, what ``nx.compile`` calls): on a device that computes float
layers in place (cpu, npu, tpu, cuda) a plan is mixed from :data:`MIXED_TRIGGER` (5%) on, toward
:data:`MIXED_TARGET`: 10-30% on the logits leaves top-1 agreement far below PyTorch's PTQ for a
transformer, 5% reaches it, and a CNN's mix costs no speed on OpenVINO's kernels
(benchmarks/int8_mixed.py; docs/quantization.md has the tables). Devices whose float layers run
on the host (edgetpu, where each is a hop to cpu:0 and back) are mixed only over the
verification's 30% (:data:`CONSERVATIVE_TRIGGER`, also :func:`mix`'s default). A plan over 30%
that no mix brings within 30% is refused with :class:`CompilationError`, naming the layers tried
and where the error is left.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Final

import numpy as np

from neurenix_core.errors import CompilationError
from neurenix_core.graph.ir import Graph, Node, QuantizationPlan, QuantParams
from neurenix_core.graph.ir import qmath as Q
from neurenix_core.graph.quantization import verify as V

__all__ = ["CONSERVATIVE_TRIGGER", "MAX_RUNS", "MIXED_TARGET", "MIXED_TRIGGER", "FloatLayer", "MixedPrecision", "fixed_values",
           "float_layers_on_host", "mix", "mix_for_device", "plan_error"]

#: The integer reference's relative L2 error against float that a mix aims for. Measured
#: (benchmarks/int8_mixed.py, top-1 agreement with fp32): a 12-block ViT at 9% agrees on 0.83, at
#: 4.3-4.5% on 0.94-0.95 where PyTorch's X86 PTQ reaches 0.975; BERT-tiny at 3-6% on 0.94-0.98.
MIXED_TARGET: Final = 0.05
#: A plan whose integer reference is within this of float is not mixed (every layer int8), on
#: the devices that compute a float layer in place (cpu, npu, tpu, cuda). Measured
#: (benchmarks/int8_mixed.py, benchmarks/int8_calibration.py; top-1 agreement with fp32): a
#: transformer's error sits in its norms' inputs and the linear outputs feeding them, where a mix
#: closes it at a few float values (a ViT-Tiny-sized ViT at 12.9% agrees with fp32 on 0.83-0.86,
#: mixed to 5% on 0.95-0.96, PyTorch's X86 PTQ 0.97; BERT-tiny with FFN outliers 20% -> 3%:
#: 0.88 -> 0.98-0.99, X86 0.99); a CNN's mix keeps a few activations in float at no cost in speed
#: on OpenVINO's kernels (EfficientNet-B0 at 22.7%: 38 of 190 values float, 18.5%, top-1 0.669 ->
#: 0.713, 3.75 against 4.00 ms all-int8; MobileNetV3-Small at 12.1%: 13 of 122, 10.4%, 0.738 ->
#: 0.734, 0.72 against 0.81 ms; 1 thread, one interleaved run on a loaded 2-vCPU AMD EPYC).
MIXED_TRIGGER: Final = MIXED_TARGET
#: On a device whose float layers run on the host (edgetpu:
#: ``Capabilities.extra["float_layers"] == "host"``) each is a hop to cpu:0 and back: only a plan
#: the verification would refuse is mixed there.
CONSERVATIVE_TRIGGER: Final = V.PLAN_TOLERANCE
#: The most integer-reference runs one mix may take (each runs the verification batches).
MAX_RUNS: Final = 16
#: The first round drops every group credited with at least this share of the largest jump; each
#: later round halves it (an error spread over many layers is found in a few rounds).
_SHARE: Final = 0.5
#: Where no mix reaches the target, the chosen one may be this much (relative) over the least error found.
_SLACK: Final = 0.1
#: Ops whose output is a part of their input: its error is not comparable to the whole input's (a
#: ViT's class token is farther from float than the average token), so they show no jump of their own.
_SELECTIONS: Final = frozenset({"slice", "gather", "gather_elements", "gather_nd", "split"})
#: A jump smaller than this (relative L2) is rounding noise, not a reason to keep a layer in float.
_NOISE: Final = 1e-3


@dataclass(frozen=True)
class FloatLayer:
    """One layer kept in float: ``node`` (op ``op``) and the values it took out of the plan, and
    why: ``culprit``'s error went from ``before`` (its inputs') to ``after`` with them quantized,
    or (``spread``: no node's error jumped) ``after`` is their own rounding."""

    node: str
    op: str
    values: tuple[str, ...]
    culprit: str
    culprit_op: str
    before: float
    after: float
    spread: bool = False

    @property
    def jump(self) -> float:
        return self.after - self.before

    def line(self) -> str:
        more = f" with {', '.join(self.values[1:])}" if len(self.values) > 1 else ""
        if self.spread:
            return f"{self.node} ({self.op}{more}): its own rounding, {self.after:.1%} (the error is spread over many values)"
        whose = "its output" if self.culprit == self.node else f"{self.culprit} ({self.culprit_op})"
        return f"{self.node} ({self.op}{more}): quantized, {whose} went from {self.before:.1%} to {self.after:.1%} error"


@dataclass(frozen=True)
class MixedPrecision:
    """A mixed plan and what it kept in float (``Compiled.float_layers``, ``.summary``)."""

    plan: QuantizationPlan
    float_layers: tuple[FloatLayer, ...]
    layers: int  # the layers (nodes) whose outputs the calibrated plan quantized
    error_before: float  # the calibrated plan's integer reference vs float
    error: float  # this plan's (relative L2 over the model's float outputs)
    runs: int  # integer-reference runs the choice took
    target: float

    @property
    def kept(self) -> int:
        """How many of :attr:`layers` compute in float (every value of every float layer)."""
        return sum(len(f.values) for f in self.float_layers)

    def line(self) -> str:
        shown = "; ".join(f.line() for f in sorted(self.float_layers, key=lambda f: -f.jump)[:8])  # the largest jumps first
        rest = f"; and {len(self.float_layers) - 8} more (compiled.float_layers)" if len(self.float_layers) > 8 else ""
        return (f"int{self.plan.bits}, {self.kept} of {self.layers} layers kept in float (mixed precision: integer vs float "
                f"{self.error_before:.1%} -> {self.error:.1%}, target {self.target:.0%}, {self.runs} reference runs): {shown}{rest}")


def fixed_values(graph: Graph, float_outputs: bool = True) -> frozenset[str]:
    """The values a plan must quantize (``qmath.check_plan``: the inputs of every node with an
    integer kernel and the outputs of those that write integers, the float model inputs), and the
    model outputs, which verification compares. With ``float_outputs=False`` a linear / conv2d
    output is fixed too (``qmath.FLOAT_OUTPUT_OPS`` not used: every linear writes int8)."""
    integer = [n for n in graph.nodes if n.op in Q.INTEGER_OPS]
    outputs = (n.output for n in integer if not (float_outputs and n.op in Q.FLOAT_OUTPUT_OPS))
    return frozenset([*(v for n in integer for v in n.inputs), *outputs, *(s.name for s in graph.inputs), *graph.outputs])


def _same(a: QuantParams, b: QuantParams) -> bool:
    return (a.bits == b.bits and np.array_equal(np.asarray(a.scale), np.asarray(b.scale))
            and np.array_equal(np.asarray(a.zero_point), np.asarray(b.zero_point)))


def _groups(graph: Graph, plan: QuantizationPlan, droppable: frozenset[str]) -> dict[str, frozenset[str]]:
    """Each droppable value's group: the droppable values joined to it by a node that keeps its
    parameters (a reshape's output has its input's range, so the same parameters); dropping one
    alone would leave the others rounding on the same grid."""
    parent = {v: v for v in droppable}

    def root(v: str) -> str:
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    acts = plan.activations
    for node in graph.nodes:
        if node.output not in droppable:
            continue
        for i in node.inputs:
            if i in droppable and _same(acts[i], acts[node.output]):
                parent[root(i)] = root(node.output)
    members: dict[str, set[str]] = {}
    for v in droppable:
        members.setdefault(root(v), set()).add(v)
    return {v: frozenset(members[root(v)]) for v in droppable}


def _real(value: Any, plan: QuantizationPlan, name: str) -> np.ndarray:
    """An integer reference value as real numbers: dequantized where it is held as integers."""
    arr = np.asarray(value)
    return Q.dequantize(arr, plan.activations[name]) if arr.dtype.kind in "iu" and name in plan.activations else arr.astype(np.float64)


class _Tables:
    """The float reference of the verification batches (run once) and the integer reference of a
    plan against it: the output error as verification measures it, and every value's error."""

    def __init__(self, graph: Graph, spec: Graph, batches: Sequence[tuple[Any, ...]]) -> None:
        from neurenix_core.graph.reference.run import run_graph

        self.graph = graph
        self.batches = batches
        self.spec = spec  # the graph at the batches' shapes: the values' names and order
        self.runs = 0
        computed = {n.output for n in spec.nodes if n.op != "constant"} | {s.name for s in spec.inputs}
        self.exact: list[dict[str, np.ndarray]] = []
        self.outputs: list[tuple[Any, ...]] = []
        for batch in batches:
            values = run_graph(graph, *batch, return_values=True)
            self.outputs.append(tuple(values[o] for o in graph.outputs))
            # float32 copies: an error of a few percent needs no float64, and a ViT's values at
            # batch 8 are a gigabyte in float64.
            self.exact.append({k: np.asarray(v, np.float32) for k, v in values.items() if k in computed and np.asarray(v).dtype.kind == "f"})

    def rounding(self, plan: QuantizationPlan) -> dict[str, float]:
        """Each planned value's own rounding: its float value quantized with its parameters,
        against itself (what that value adds, whatever its inputs bring)."""
        diff: dict[str, float] = {}
        base: dict[str, float] = {}
        for exact in self.exact:
            for name, want in exact.items():
                if name in plan.activations:
                    d = Q.fake_quantize(want.astype(np.float64), plan.activations[name]) - want
                    diff[name] = diff.get(name, 0.0) + float(np.vdot(d, d))
                    base[name] = base.get(name, 0.0) + float(np.vdot(want, want).real)
        return {k: float(np.sqrt(diff[k] / base[k])) if base[k] > 0 else 0.0 for k in diff}

    def measure(self, plan: QuantizationPlan) -> tuple[float, dict[str, float]]:
        """``plan``'s output error (``verify.agreement``'s ``plan_relative``) and each value's error."""
        from neurenix_core.graph.reference.run import run_quantized

        self.runs += 1
        diff: dict[str, float] = {}
        base: dict[str, float] = {}
        refs = []
        for batch, exact, outputs in zip(self.batches, self.exact, self.outputs):
            got = run_quantized(self.graph, plan, *batch, return_values=True)
            for name, want in exact.items():
                if name in got:
                    d = _real(got[name], plan, name) - want
                    diff[name] = diff.get(name, 0.0) + float(np.vdot(d, d))
                    base[name] = base.get(name, 0.0) + float(np.vdot(want, want).real)
            refs.append((outputs, tuple(_real(got[o], plan, o) for o in self.graph.outputs)))
        error = V.agreement(self.graph, plan, [(b, r[1]) for b, r in zip(self.batches, refs)], refs=refs).plan_relative
        return error, {k: float(np.sqrt(diff[k] / base[k])) if base[k] > 0 else 0.0 for k in diff}


@dataclass(frozen=True)
class _Credit:
    jump: float
    culprit: Node
    before: float
    after: float
    spread: bool = False  # credited with its own rounding: no node's error jumped


def _credits(graph: Graph, errors: Mapping[str, float], rounding: Mapping[str, float], droppable: frozenset[str],
             groups: Mapping[str, frozenset[str]]) -> tuple[dict[frozenset[str], _Credit], list[_Credit]]:
    """Each group's largest jump (a node's output error minus its inputs' largest), and the jumps
    no droppable value explains (at values that must stay quantized). A jump goes to the node's
    output where its own rounding explains half of it or the inputs cannot go to float, else to
    the droppable inputs: a layer norm multiplies the rounding of its input, not its own."""
    credit: dict[frozenset[str], _Credit] = {}
    stuck: list[_Credit] = []
    for node in graph.nodes:
        if node.op == "constant" or node.op in _SELECTIONS or node.output not in errors:
            continue
        before = max((errors[i] for i in node.inputs if i in errors), default=0.0)
        after = errors[node.output]
        if after - before <= _NOISE:
            continue
        c = _Credit(after - before, node, before, after)
        inputs = [i for i in node.inputs if i in droppable]
        own = node.output in droppable and (not inputs or rounding.get(node.output, 0.0) >= c.jump / 2)
        targets = [node.output] if own else inputs
        if not targets:
            stuck.append(c)
        for t in targets:
            if groups[t] not in credit or c.jump > credit[groups[t]].jump:
                credit[groups[t]] = c
    return credit, stuck


def _own_rounding(graph: Graph, rounding: Mapping[str, float], droppable: frozenset[str],
                  groups: Mapping[str, frozenset[str]]) -> dict[frozenset[str], _Credit]:
    """Each group credited with its values' own rounding: where no node's error jumps, the error
    is spread over many small roundings (a deep model's residual stream), found one share at a time."""
    credit: dict[frozenset[str], _Credit] = {}
    for node in graph.nodes:
        own = rounding.get(node.output, 0.0)
        if node.output in droppable and own > _NOISE:
            group = groups[node.output]
            if group not in credit or own > credit[group].jump:
                credit[group] = _Credit(own, node, 0.0, own, spread=True)
    return credit


def _without(plan: QuantizationPlan, dropped: Sequence[frozenset[str]]) -> QuantizationPlan:
    gone = frozenset().union(*dropped)
    return replace(plan, activations={k: v for k, v in plan.activations.items() if k not in gone})


#: Reports one reference run to the progress bar (its text).
_Update = Callable[[str], None]


@contextmanager
def _progress(enabled: bool, total: int) -> Iterator[_Update]:
    """A transient rich bar over the reference runs (``update(text)`` after each), on stderr and on
    a terminal only (neurenix_core/_log.py); a no-op when off."""
    from neurenix_core._log import progress

    bar = progress("quantization") if enabled else None
    if bar is None:
        yield lambda text: None
        return
    with bar:
        task = bar.add_task("mixed precision", total=total)
        yield lambda text: bar.update(task, advance=1, description=f"mixed precision: {text}")


def _verification_batches(graph: Graph, calibration: Sequence[Any]) -> list[tuple[Any, ...]]:
    """The batches ``nx.compile`` verifies on: the first ``verify.VERIFY_BATCHES``, as host arrays."""
    from neurenix_core.graph.quantization.calibration import batch_arrays

    return [batch_arrays(b, len(graph.inputs), i) for i, b in enumerate(list(calibration)[: V.VERIFY_BATCHES])]


def float_layers_on_host(record: Any) -> bool:
    """Whether the device's plugin runs each float layer of a mixed plan on the host (declared as
    ``Capabilities.extra["float_layers"] == "host"``: the Edge TPU computes int8 only)."""
    caps = getattr(getattr(record, "manifest", None), "capabilities", None)
    return bool(caps is not None and caps.extra.get("float_layers") == "host")


def mix_for_device(graph: Graph, plan: QuantizationPlan, calibration: Sequence[Any], *, device: str, host: bool,
                   progress: bool = True) -> MixedPrecision | None:
    """``nx.compile``'s mix: :data:`MIXED_TRIGGER` on a device that computes float layers in
    place, else :data:`CONSERVATIVE_TRIGGER`. Where float layers run on
    the host (``host``), linear / conv2d outputs stay int8 (a float output would take the whole
    layer's FLOPs to cpu:0) unless no mix without them is within ``verify.PLAN_TOLERANCE``."""
    trigger = CONSERVATIVE_TRIGGER if host else MIXED_TRIGGER
    if not host:
        return mix(graph, plan, calibration, device=device, trigger=trigger, progress=progress)
    try:
        return mix(graph, plan, calibration, device=device, trigger=trigger, float_outputs=False, progress=progress)
    except CompilationError:
        return mix(graph, plan, calibration, device=device, trigger=trigger, progress=progress)


def plan_error(graph: Graph, plan: QuantizationPlan, calibration: Sequence[Any]) -> float:
    """The integer reference's relative L2 error against float on the verification batches of
    ``calibration``: the number ``nx.compile``'s plan check holds to ``verify.PLAN_TOLERANCE``."""
    batches = _verification_batches(graph, calibration)
    refs = [V.references(graph, plan, b) for b in batches]
    return V.agreement(graph, plan, [(b, r[1]) for b, r in zip(batches, refs)], refs=refs).plan_relative


def mix(graph: Graph, plan: QuantizationPlan, calibration: Sequence[Any], *, device: str,
        target: float = MIXED_TARGET, trigger: float = CONSERVATIVE_TRIGGER, float_outputs: bool = True,
        max_runs: int = MAX_RUNS, progress: bool = True) -> MixedPrecision | None:
    """A mixed plan for a calibrated static ``plan`` of ``graph`` whose integer reference is more
    than ``trigger`` from float on the first ``verify.VERIFY_BATCHES`` of ``calibration`` (the
    batches ``nx.compile`` verifies on), toward ``target``; None where the plan is within
    ``trigger``, has nothing to keep in float, or no mix does better. ``float_outputs``: linear
    and conv2d outputs may stay in float (``qmath.FLOAT_OUTPUT_OPS``). Raises CompilationError
    where the plan is over ``verify.PLAN_TOLERANCE`` and no mix found within ``max_runs``
    integer-reference runs is within it. ``device`` names the device in that error."""
    from neurenix_core.graph.reference.run import specialized

    batches = _verification_batches(graph, calibration)
    spec = specialized(graph, batches[0])
    produced = {n.output for n in spec.nodes if n.op != "constant"}
    fixed = fixed_values(spec, float_outputs)
    droppable = frozenset(v for v in plan.activations if v in produced and v not in fixed)
    if not droppable:
        return None  # nothing the plan may keep in float (a CNN of conv, relu, pooling): verification decides
    tables = _Tables(graph, spec, batches)
    first, errors = tables.measure(plan)
    if first <= trigger:
        # By default only a plan the verification would refuse is mixed (then toward ``target``):
        # one that passes keeps every layer in integers, as every device's lowering takes it (on
        # edgetpu, which computes int8 only, each float layer is a hop to cpu:0 and back).
        return None
    groups = _groups(spec, plan, droppable)
    with _progress(progress, max_runs) as update:
        update(f"integer vs float {first:.1%}")
        found = _rounds(tables, plan, errors, first, droppable, groups, target, max_runs, update)
        if found.best is None or found.best[0] > V.PLAN_TOLERANCE:
            if first <= V.PLAN_TOLERANCE:
                return None  # the calibrated plan passes and no mix does better within the bound
            raise CompilationError(_refusal(device, plan, first, found, tables.runs, max_runs))
        bound = _bound(found.best[0], target)
        if first <= bound:
            return None  # mixing gains nothing that counts: every layer stays int8
        best = _prune(tables, plan, found, bound, max_runs, update)
    order = {n.output: k for k, n in enumerate(spec.nodes)}
    floats = sorted((_float_layer(spec, group, c, order) for group, c in best[1].items()), key=lambda f: order[f.values[0]])
    layers = sum(1 for n in spec.nodes if n.output in plan.activations)
    return MixedPrecision(_without(plan, list(best[1])), tuple(floats), layers, first, best[0], tables.runs, target)


def _bound(best: float, target: float) -> float:
    """What a mix is pruned to: ``target``, or where no mix reaches it, within :data:`_SLACK` of the
    least error found (the float layers that buy the last tenth of it are not worth their speed)."""
    return min(max(target, best * (1.0 + _SLACK)), V.PLAN_TOLERANCE)


#: Groups kept in float and the jump that chose each.
_Chosen = dict[frozenset[str], _Credit]


@dataclass
class _Search:
    """Where the rounds got: the groups dropped (and the jump that chose each), each group's share
    of the error its round removed, the mix with the least error, the last error, and the jumps no
    droppable value explains."""

    chosen: _Chosen = field(default_factory=dict)
    gains: dict[frozenset[str], float] = field(default_factory=dict)
    best: tuple[float, _Chosen] | None = None
    error: float = 0.0
    stuck: list[_Credit] = field(default_factory=list)


def _rounds(tables: _Tables, plan: QuantizationPlan, errors: dict[str, float], error: float, droppable: frozenset[str],
            groups: Mapping[str, frozenset[str]], target: float, max_runs: int, update: _Update) -> _Search:
    """Drop the most credited groups and measure, again, until within ``target``, out of runs or
    out of credited groups."""
    found = _Search(error=error)
    rounding = tables.rounding(plan)
    share = _SHARE
    while found.error > target and tables.runs < max_runs:
        left = frozenset(v for v in droppable if not any(v in g for g in found.chosen))
        credit, found.stuck = _credits(tables.spec, errors, rounding, left, groups)
        picked = _pick(credit, share) or _pick(_own_rounding(tables.spec, rounding, left, groups), share)
        share /= 2
        if not picked:
            break  # what is left of the error is in values the plan must quantize
        found.chosen.update(picked)
        before = found.error
        found.error, errors = tables.measure(_without(plan, list(found.chosen)))
        found.gains.update(dict.fromkeys(picked, (before - found.error) / len(picked)))
        update(f"{sum(len(g) for g in found.chosen)} layers in float, integer vs float {found.error:.1%}")
        if found.best is None or found.error < found.best[0]:
            found.best = (found.error, dict(found.chosen))
    return found


def _pick(credit: Mapping[frozenset[str], _Credit], share: float) -> _Chosen:
    """The groups credited with at least ``share`` of the largest jump."""
    if not credit:
        return {}
    top = max(c.jump for c in credit.values())
    return {g: c for g, c in credit.items() if c.jump >= share * top}


def _prune(tables: _Tables, plan: QuantizationPlan, found: _Search, bound: float, max_runs: int,
           update: _Update) -> tuple[float, _Chosen]:
    """Put back the dropped groups whose rounds removed the least error while the mix stays within
    ``bound`` (a round drops every group near the largest jump: some may not be needed). A binary
    search for how many can go back, least first: a few runs, not one per group."""
    assert found.best is not None
    error, chosen = found.best
    ranked = sorted(chosen, key=lambda g: found.gains.get(g, 0.0))
    lo, hi = 0, len(ranked) - 1  # lo groups can go back (measured); never all of them
    while lo < hi and tables.runs < max_runs:
        k = (lo + hi + 1) // 2
        trial, _ = tables.measure(_without(plan, ranked[k:]))
        update(f"pruning: {sum(len(g) for g in ranked[k:])} layers in float, integer vs float {trial:.1%}")
        if trial <= bound:
            lo, error = k, trial
        else:
            hi = k - 1
    return error, {g: chosen[g] for g in ranked[lo:]}


def _float_layer(graph: Graph, group: frozenset[str], c: _Credit, order: Mapping[str, int]) -> FloatLayer:
    values = tuple(sorted(group, key=order.__getitem__))
    node = graph.nodes[order[values[0]]]
    return FloatLayer(node.name, node.op, values, c.culprit.name, c.culprit.op, c.before, c.after, c.spread)


def _refusal(device: str, plan: QuantizationPlan, first: float, found: _Search, runs: int, max_runs: int) -> str:
    tried = ", ".join(sorted(v for g in found.chosen for v in g)[:12]) or "none (no layer the plan may keep in float adds error)"
    error = found.error
    worst = sorted(found.stuck, key=lambda c: -c.jump)[:3]
    fixed = "; ".join(f"{c.culprit.name} ({c.culprit.op}) {c.before:.1%} -> {c.after:.1%}" for c in worst)
    where = (f". What is left shows at values the plan must quantize (what the integer kernels of linear, conv2d, relu and "
             f"pooling read, and relu and pooling write) or at nodes that amplify their rounding (a layer norm): {fixed}" if fixed else "")
    budget = f" (stopped after {runs} of {max_runs} reference runs)" if runs >= max_runs else ""
    return (f"{device}: the int{plan.bits} plan does not describe the model: the integer reference is {first:.1%} away from "
            f"float on the calibration data, more than int{plan.bits} rounding explains ({V.PLAN_TOLERANCE:.0%}), and no mix of "
            f"int{plan.bits} and float layers meets that bound: with {tried} in float it is still {error:.1%}{budget}{where}. "
            "Recalibrate with representative data (or another calibration_method: 'histogram', 'percentile'), quantize in float16 instead "
            "(precision='fp16'), or pass verify=False to nx.compile to accept the int8 plan as it is; "
            "neurenix_core.graph.quantization.verify.layer_errors shows every layer")
