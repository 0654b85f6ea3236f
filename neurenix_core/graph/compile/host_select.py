"""Which runtime runs a ``cpu:0`` graph: the host runtimes plugins offer, or the NumPy interpreter.

A plugin declaring ``Capabilities.host_runtime`` offers its runtime for ``cpu:0``
(``neurenix_core.graph.ir.host``). For a graph at its input shapes, :func:`choose`:

1. ``runtime="numpy"`` or ``runtime="<name>"`` (``nx.compile(..., runtime=...)``, or the
   ``NEURENIX_CPU_RUNTIME`` environment variable) names one: that one, or a typed error saying
   why it cannot (never a silent substitute);
2. a graph below :data:`FLOP_FLOOR` estimated FLOPs runs on the interpreter without measuring,
   unless it is a small float32 model (:func:`small_model`: a linear, matmul, convolution or
   attention layer, float32 throughout). Measuring compiles every runtime (tens of ms each) to
   save a few µs per call, which pays for a model called many times, not for the single ops and
   integer arithmetic that make up most tiny graphs (ONNX's node tests, fallback segments). A
   small float32 model is measured: LiteRT runs a 1x16 two-layer MLP in about 1 µs a call where
   the interpreter takes 18 µs (benchmarks/cpu.py, mlp_small);
3. otherwise each installed runtime that lowers every op of the graph is compiled and timed (and
   its result compared with the interpreter's: a runtime that is wrong is skipped, with the
   difference as the reason; with ``threads=`` given, so is a runtime that cannot apply it per
   model), the interpreter too, and the fastest wins. The candidates are timed in interleaved
   rounds (each one's fastest round counts), and runtimes within 10% of the fastest are a tie
   that goes the same way every time (the interpreter, else alphabetically), so that a busy
   machine does not change the choice from one run to the next. The choice and the
   times are cached in the state folder (``host_runtimes.json``), keyed by the graph's structure
   and weight shapes (not the weights' values: a model with fresh weights is the same work),
   shapes, threads, CPU model and the installed host-runtime plugins with the versions of the
   packages each depends on (read from package metadata, so the key needs no framework started).
   A later process starts and compiles only the winner: the other frameworks are not imported.
   A cached winner that no longer starts, covers or compiles the graph is measured again with
   every runtime, its failure kept as the reason.

A static int8/int16 model (``plan``) is offered only to the runtimes listing its precision in
``HostRuntime.quantized_precisions``; the interpreter is then the core's integer reference, and a
runtime's results must be within ``Compiled.verify``'s bound of it (int8 runtimes round
differently, so fp32's 1e-4 would refuse them all). The plan's structure (bits, which values
and layers it quantizes) is part of the key.

A runtime that is missing, fails to start or refuses the graph is skipped with its reason; the
result says which runtime runs the graph and why (``HostChoice.line``), and ``compiled.summary``
and the placement report carry that line.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from neurenix_core.config import cpu_runtime
from neurenix_core.errors import BackendUnavailableError, ConfigurationError, NeurenixError
from neurenix_core.graph.ir import Graph, QuantizationPlan
from neurenix_core.graph.ir.host import HostModel, HostOptions, HostRuntime
from neurenix_core.graph.quantization.weights import scheme_of

if TYPE_CHECKING:
    from neurenix_core.plugins.registry import PluginRecord

__all__ = ["FLOP_FLOOR", "INTERPRETER", "MODEL_OPS", "HostChoice", "choose", "host_runtimes", "runtime_identity", "small_model", "weight_runtimes"]

#: Graphs estimated below this many FLOPs stay on the interpreter without measuring (except
#: :func:`small_model` graphs).
FLOP_FLOOR: Final = 1_000_000
#: Ops that make a graph below FLOP_FLOOR a model worth measuring: GEMM-shaped work, where a host
#: runtime's kernels and call path beat NumPy's per-step overhead.
MODEL_OPS: Final = frozenset({"linear", "matmul", "gemm", "conv", "conv1d", "conv2d", "conv_transpose", "conv_transpose2d",
                              "attention", "scaled_dot_product_attention", "multihead_attention"})
#: A host runtime whose plugin declares a start of this many seconds or more
#: (``Capabilities.host_runtime_start_s``: JAX's, PyTorch's import) is started to time a graph
#: only from HEAVY_FLOOR estimated FLOPs: below that, a call takes a few milliseconds at most, so
#: the start (paid again by every process that runs the model on that runtime) cannot be repaid,
#: and the first compile of a small model would wait on imports that change nothing. Deterministic
#: (the graph's FLOPs, not a clock), so a model gets the same candidates on every run.
HEAVY_START_S: Final = 0.5
HEAVY_FLOOR: Final = 100_000_000
#: The name of the last resort, always available.
INTERPRETER: Final = "numpy"
#: Entries kept in the choice cache (the oldest are dropped).
_CACHE_ENTRIES: Final = 512
_CACHE_FILE: Final = "host_runtimes.json"
#: Timing per candidate and round: calls after the warm-up, and the time budget that may end
#: them sooner. Each candidate is timed in _ROUNDS rounds, in a rotated order, and its time is
#: its fastest round: a machine busy for part of the measurement slows every candidate's round
#: then, not one candidate's whole measurement (which flipped the choice between runs).
_CALLS: Final = 3
_BUDGET_S: Final = 0.08
#: A turn of short calls goes on until it has lasted this long: a 60 µs call is timed a few
#: hundred times, and one preemption on a busy machine cannot move the median of so many (three
#: calls of 60 µs chose OpenVINO over a LiteRT twice as fast on a machine at load 6).
_TURN_S: Final = 0.02
_ROUNDS: Final = 3
#: A candidate this many times slower than the fastest after a round is not timed again: it
#: cannot win, and a slow interpreter would otherwise spend seconds per round.
_HOPELESS: Final = 3.0
#: Candidates within this fraction of the fastest are tied, and the tie goes the same way every
#: time (:func:`_settle`): noise between near-equal runtimes does not change the choice.
_TIE: Final = 0.10
#: Graphs whose weights are at most this many bytes have every candidate's compiled model alive
#: at once, for interleaved rounds; heavier ones (a language model) are timed one runtime after
#: another, keeping only the fastest model so far, as each runtime holds its own weights.
_INTERLEAVE_BYTES: Final = 256 << 20
#: Idle seconds before a candidate's timed calls: the previous runtime's worker threads (OpenBLAS,
#: ONNX Runtime) spin for ~20 ms after their last call and would take a core from the next one.
_SETTLE_S: Final = 0.03
#: A runtime whose result is further than this (relative to the largest |value|) from the
#: interpreter's is wrong for this graph, and skipped.
_AGREEMENT: Final = 1e-4

_lock = threading.Lock()
_runtimes: dict[str, HostRuntime | str] | None = None  # name -> runtime, or why it is unavailable
_started: dict[str, HostRuntime | str] = {}  # runtimes started alone (host_runtime_named); "" where none is offered


@dataclass(frozen=True)
class HostChoice:
    """The runtime that runs a cpu:0 graph (``model`` None: the NumPy interpreter) and why."""

    runtime: str
    reason: str
    model: HostModel | None = None
    times_ms: Mapping[str, float] = field(default_factory=dict)
    skipped: Mapping[str, str] = field(default_factory=dict)

    def line(self) -> str:
        times = ", ".join(f"{k} {v:.3g} ms" for k, v in sorted(self.times_ms.items(), key=lambda kv: kv[1]))
        skipped = "; not used: " + "; ".join(f"{k}: {v}" for k, v in self.skipped.items()) if self.skipped else ""
        return f"runtime {self.runtime} ({self.reason}{f'; measured {times}' if times else ''}){skipped}"


def host_runtimes() -> dict[str, HostRuntime | str]:
    """Every host runtime the installed plugins offer, started once per process: name -> the
    runtime, or the reason it is unavailable (missing framework, failed start)."""
    global _runtimes
    with _lock:
        if _runtimes is None:
            _runtimes = _discover()
        return dict(_runtimes)


def host_runtime_named(name: str) -> dict[str, HostRuntime | str]:
    """Only the runtime ``name`` (or why it is unavailable), started without the others: an
    explicit ``runtime=`` or a loaded artifact's cpu:0 part imports no other framework (a
    deployed npu model does not start torch). Empty when no plugin offers ``name``."""
    with _lock:
        if _runtimes is not None:
            return {k: v for k, v in _runtimes.items() if k == name}
        if name not in _started:
            _started.update(_discover(only=name) or {name: ""})
        found = _started[name]
        return {name: found} if found != "" else {}


def light_host_runtimes(flops: int) -> dict[str, HostRuntime | str]:
    """The host runtimes worth starting for a graph of ``flops``: every one from HEAVY_FLOOR,
    else those whose declared start is light, plus any already started; a heavy one not started
    is reported with why (its name maps to the reason)."""
    if flops >= HEAVY_FLOOR:
        return host_runtimes()
    with _lock:
        started = dict(_runtimes) if _runtimes is not None else {k: v for k, v in _started.items() if v != ""}
    found: dict[str, HostRuntime | str] = {}
    for rec, name in _offering():
        if name in found:
            continue
        assert rec.manifest is not None  # _offering yields loaded plugins only
        start = rec.manifest.capabilities.host_runtime_start_s or 0.0
        if name in started or start < HEAVY_START_S:
            found.update(host_runtime_named(name))
        else:
            found[name] = (f"not started for a graph of {flops:,} estimated FLOPs: starting it takes ~{start:.1f} s (its "
                           f"framework's import), more than the graph's calls could repay (measured from {HEAVY_FLOOR:,} "
                           f"FLOPs, or pass runtime={name!r})")
    return found


def _offering() -> Iterator[tuple[PluginRecord, str]]:
    """Each loaded plugin that offers a host runtime (``Capabilities.host_runtime``), with the
    runtime's name: not failed, not denied."""
    from neurenix_core.plugins.state import registry

    for rec in registry().records:
        name = rec.manifest.capabilities.host_runtime if rec.manifest is not None else None
        if name is not None and rec.failure is None and rec.denied is None:
            yield rec, name


def _discover(only: str | None = None) -> dict[str, HostRuntime | str]:
    from neurenix_core.plugins.state import registry

    reg = registry()
    found: dict[str, HostRuntime | str] = {}
    if only is None and _started:  # runtimes started one by one are not started twice
        found.update({k: v for k, v in _started.items() if v != ""})
    for rec, name in _offering():
        if name in found or (only is not None and name != only):
            continue
        if not reg.implements(rec, "neurenix_host_runtime"):
            found[name] = f"plugin {rec.name} declares host_runtime={name!r} but does not implement neurenix_host_runtime"
            continue
        try:
            runtime = reg.call(rec, "neurenix_host_runtime")
        except NeurenixError as exc:
            found[name] = f"plugin {rec.name}: {exc}"
            continue
        except Exception as exc:  # noqa: BLE001 - a third-party runtime's start failure is recorded, and the next runtime used
            found[name] = f"plugin {rec.name} failed to start its runtime: {type(exc).__name__}: {exc}"
            continue
        if not isinstance(runtime, HostRuntime):
            found[name] = f"plugin {rec.name}'s neurenix_host_runtime returned {type(runtime).__name__}, not a HostRuntime"
            continue
        found[name] = runtime
    return found


def requested_runtime(extra: Mapping[str, Any]) -> str | None:
    """``runtime=`` of nx.compile, else NEURENIX_CPU_RUNTIME, else None (choose); "auto" is None."""
    value = extra["runtime"] if "runtime" in extra else cpu_runtime()  # config.py validates the variable's form
    if value is None or value == "auto":
        return None
    if not isinstance(value, str) or not value:
        raise ConfigurationError(f"cpu:0: runtime={value!r} must be a runtime name such as 'openvino', 'numpy' or 'auto'")
    return value


def choose(
    graph: Graph,
    *,
    threads: int | None,
    runtime: str | None,
    interpreter: Callable[..., Sequence[np.ndarray]],
    flops: int,
    state_dir: str | None,
    weights: QuantizationPlan | None = None,
    plan: QuantizationPlan | None = None,
) -> HostChoice:
    """The runtime for ``graph`` (static shapes) on cpu:0; ``interpreter`` runs it in NumPy.
    ``weights``: a weight-only quantization plan, offered only to the runtimes that list its
    scheme (``HostRuntime.weight_schemes``); ``interpreter`` computes the dequantized graph.
    ``plan``: a static int8/int16 plan, offered only to the runtimes that list its precision
    (``HostRuntime.quantized_precisions``); ``interpreter`` is the core's integer reference, and
    a runtime must agree with it within ``Compiled.verify``'s bound."""
    options = HostOptions(precision=quantized_precision(plan), threads=threads, weights=weights, plan=plan)
    if runtime == INTERPRETER:
        return HostChoice(INTERPRETER, "runtime='numpy' asked")
    if runtime is not None:
        named = host_runtime_named(runtime)
        return _named(graph, runtime, named if named else host_runtimes(), options)
    key = _cache_key(graph, threads, weights, plan)
    failed: dict[str, str] = {}  # the cached winner's failure to compile, kept as its reason
    measured = flops >= FLOP_FLOOR or small_model(graph)
    cached = _cache_read(state_dir).get(key) if measured else None
    if isinstance(cached, dict):
        hit = _from_cache(graph, cached, options, failed)
        if hit is not None:
            return hit
    available = light_host_runtimes(flops)
    skipped: dict[str, str] = {}
    candidates: dict[str, HostRuntime] = {}
    for name, rt in available.items():
        why = rt if isinstance(rt, str) else rt.covers(graph) or _refuses(rt, options)
        if name in failed:
            skipped[name] = failed[name]
        elif why is None and isinstance(rt, HostRuntime):
            candidates[name] = rt
        else:
            skipped[name] = str(why)
    if not candidates:
        return HostChoice(
            INTERPRETER,
            "no installed host runtime takes this graph" if available else "no host runtime installed",
            skipped=skipped,
        )
    if not measured:
        return HostChoice(
            INTERPRETER,
            f"{flops:,} estimated FLOPs, below {FLOP_FLOOR:,}, and not a float32 model (no linear, matmul, convolution "
            "or attention layer, or values other than float32): not worth compiling every runtime to time it",
            skipped=skipped,
        )
    return _measure(graph, candidates, options, interpreter, skipped, key, state_dir, frozenset(failed))


def weight_runtimes(scheme: str, extra: Mapping[str, Any]) -> list[str]:
    """The host runtimes (the one ``runtime=`` names, else every installed one) with
    integer-weight kernels for the weight-only ``scheme``."""
    runtime = requested_runtime(extra)
    if runtime == INTERPRETER:
        return []
    found = host_runtime_named(runtime) if runtime is not None else host_runtimes()
    return sorted(name for name, rt in found.items() if isinstance(rt, HostRuntime) and scheme in rt.weight_schemes)


def quantized_precision(plan: QuantizationPlan | None) -> str:
    """The host precision of a static quantization plan ("int8", "int16"), "fp32" without one."""
    return "fp32" if plan is None else f"int{plan.bits}"


def _refuses(rt: HostRuntime, options: HostOptions) -> str | None:
    """Why ``rt`` cannot take a model quantized as ``options`` says (None: it can, or float)."""
    if options.plan is not None and options.precision not in rt.quantized_precisions:
        return f"{rt.name} has no {options.precision} kernels for a static quantization plan"
    if options.weights is None:
        return None
    scheme = scheme_of(options.weights)
    return None if scheme in rt.weight_schemes else f"{rt.name} has no {scheme} kernels"


def small_model(graph: Graph) -> bool:
    """Whether a graph below FLOP_FLOOR is still measured: a layer in :data:`MODEL_OPS`, and
    float32 inputs and values only (what every host runtime takes as it is)."""
    from neurenix_core.graph.ir.shapes import infer_values

    if not any(n.op in MODEL_OPS for n in graph.nodes):
        return False
    return all(str(v.dtype) == "float32" for v in infer_values(graph).values())


def _named(graph: Graph, runtime: str, available: Mapping[str, HostRuntime | str], options: HostOptions) -> HostChoice:
    rt = available.get(runtime)
    if rt is None:
        from neurenix_core.plugins.state import registry

        names = ", ".join([INTERPRETER, *sorted(available)])
        plugin = registry().record_named(runtime)  # a plugin's name ('ort') is not its runtime's ('onnxruntime')
        offered = plugin.manifest.capabilities.host_runtime if plugin is not None and plugin.manifest is not None else None
        remedy = (f"{runtime!r} names plugin {plugin.name}, not a runtime: use {offered!r}, the runtime it offers" if plugin and offered
                  else "install the plugin that offers it, or pass runtime='auto'")
        raise BackendUnavailableError(f"cpu:0: no host runtime named {runtime!r} is installed (available: {names}); {remedy}")
    if isinstance(rt, str):
        raise BackendUnavailableError(f"cpu:0: host runtime {runtime!r} cannot start: {rt}")
    why = rt.covers(graph) or _refuses(rt, options)
    if why is not None:
        from neurenix_core.errors import UnsupportedOperationError

        raise UnsupportedOperationError(f"cpu:0: runtime={runtime!r} was asked, but {why}; pass runtime='auto' to choose another")
    return HostChoice(runtime, f"runtime={runtime!r} asked", rt.compile(graph, options))


def _inputs(graph: Graph) -> list[np.ndarray]:
    """Measurement inputs: seeded normal floats, zero integers (valid ids and indices), True
    boolean masks, and ones for integer inputs named like a mask (``attention_mask``): an
    all-zero attention mask masks every position, and softmax over it is NaN everywhere, which
    would leave nothing to compare the runtimes' results on (and warn the user at compile time)."""
    rng = np.random.default_rng(0)
    out = []
    for spec in graph.inputs:
        dtype = np.dtype(spec.dtype)
        shape = tuple(int(d) for d in spec.shape)
        if dtype.kind == "f":
            out.append(rng.standard_normal(shape).astype(dtype))
        elif dtype.kind == "b" or "mask" in spec.name.lower():
            out.append(np.ones(shape, dtype))
        else:
            out.append(np.zeros(shape, dtype))
    return out


def _turn(run: Callable[..., Any], inputs: Sequence[np.ndarray], budget_s: float = _BUDGET_S) -> float:
    """One timed turn, after a pause that lets the previous runtime's worker threads go idle: the
    median of at least 3 calls lasting _TURN_S together, within ``budget_s`` (a runtime whose
    calls vary is judged by its typical call, not by a lucky one: a fastest-call rule chose
    LiteRT for an int8 ResNet-18 that OpenVINO ran 1.3-1.6x faster over many calls)."""
    time.sleep(_SETTLE_S)
    times = []
    calls = _CALLS if budget_s <= _BUDGET_S else 4 * _CALLS
    start = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        run(*inputs)
        times.append(time.perf_counter() - t0)
        spent = time.perf_counter() - start
        if spent > budget_s or (len(times) >= calls and spent >= _TURN_S):
            break
    return float(np.median(times)) * 1e3


def _rounds(runs: Mapping[str, Callable[..., Any]], inputs: Sequence[np.ndarray], rounds: int = _ROUNDS,
            budget_s: float = _BUDGET_S) -> dict[str, float]:
    """Each run's time in ms: its fastest turn over ``rounds`` rounds (a busy moment slows a
    round, never speeds it up), the order rotated each round; a run _HOPELESS times slower than
    the fastest is not timed again."""
    names = list(runs)
    best: dict[str, float] = {}
    for r in range(rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            if best and name in best and best[name] > _HOPELESS * min(best.values()):
                continue
            ms = _turn(runs[name], inputs, budget_s)
            best[name] = min(ms, best.get(name, ms))
    return best


def _tied(times: Mapping[str, float]) -> list[str]:
    fastest = min(times.values())
    return sorted(name for name, ms in times.items() if ms <= fastest * (1.0 + _TIE))


def _untie(runs: Mapping[str, Callable[..., Any]], times: dict[str, float], inputs: Sequence[np.ndarray]) -> dict[str, float]:
    """Candidates within _TIE of each other after the first rounds are timed again, longer (up to
    0.25 s a turn, 5 rounds): a short measurement could not tell them apart, and a longer one
    often can. Bounded: only the tied few, once."""
    tied = _tied(times)
    if len(tied) < 2:
        return times
    again = _rounds({name: runs[name] for name in tied}, inputs, rounds=5, budget_s=3 * _BUDGET_S)
    return {**times, **again}


def _settle(times: Mapping[str, float]) -> str:
    """The winner: the fastest, except that runs within _TIE of it are tied and the tie goes to
    the interpreter (nothing to import or compile in a later process), else to the first name in
    alphabetical order, the same on every run of the same model on the same machine."""
    tied = _tied(times)
    return INTERPRETER if INTERPRETER in tied else tied[0]


def _announce(candidates: Mapping[str, HostRuntime]) -> None:
    """Say that runtimes are being measured (a second or more, once per model and machine): a
    first compile that goes quiet for seconds looks hung. An INFO record of neurenix.compile,
    shown on a terminal where logging is not configured (neurenix_core/_log.py); nothing when piped."""
    from neurenix_core._log import notice

    names = ", ".join([*candidates, INTERPRETER])
    notice("compile", f"cpu:0: measuring runtimes for this model ({names}); the choice is cached for next time")


def _disagreement(got: Sequence[Any], want: Sequence[Any]) -> str | None:
    for k, (a, b) in enumerate(zip(got, want)):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            return f"output {k} has shape {a.shape}, the reference {b.shape}"
        if b.dtype.kind in "fc":
            scale = float(np.max(np.abs(b))) if b.size else 0.0
            err = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) if b.size else 0.0
            if not np.isfinite(err) and np.array_equal(np.isnan(a), np.isnan(b)):
                continue
            if err > _AGREEMENT * max(scale, 1.0):
                return f"output {k} is {err:.3g} off the interpreter's (largest |value| {scale:.3g})"
        elif not np.array_equal(a, b):
            return f"output {k} differs from the interpreter's"
    return None


def _plan_agreement(graph: Graph, plan: QuantizationPlan, inputs: Sequence[np.ndarray]) -> Callable[[Sequence[Any]], str | None]:
    """For a quantized graph, a runtime's results against the integer reference with the bound
    ``Compiled.verify`` applies (graph.quantization.verify.agreement): int8 runtimes round
    differently from the reference (TFLite arithmetic), so the fp32 bound of 1e-4 would refuse
    every one, and a looser fixed one would pass a runtime that drops a bias."""
    from neurenix_core.graph.quantization.verify import agreement, references

    # A segment of a model (runners._host_fn) may take values the plan leaves in float: a whole
    # model's float inputs always have parameters (check_plan), so missing ones mark a segment.
    floats = any(s.dtype.startswith("float") and s.name not in plan.activations for s in graph.inputs)
    refs = references(graph, plan, tuple(inputs), float_inputs=floats)

    def check(got: Sequence[Any]) -> str | None:
        result = agreement(graph, plan, [(tuple(inputs), got)], refs=[refs])
        if result.within_bound:
            return None
        return (f"{result.device_relative:.3g} relative L2 (max {result.device_steps:.3g} output steps) from the core's "
                f"integer reference, where int{plan.bits} rounding explains {result.device_bound:.2%}")

    return check


def _checked(name: str, rt: HostRuntime, graph: Graph, options: HostOptions, inputs: Sequence[np.ndarray], reference: Any,
             agrees: Callable[[Sequence[Any]], str | None] | None, skipped: dict[str, str]) -> HostModel | None:
    """``rt``'s compiled model of ``graph`` after one call (its warm-up) agreed with the
    interpreter's ``reference``; None, with the reason in ``skipped``, where it did not."""
    try:
        model = rt.compile(graph, options)
        got = model(*inputs)
    except NeurenixError as exc:
        skipped[name] = str(exc)
        return None
    except Exception as exc:  # noqa: BLE001 - a runtime that crashes on this graph is skipped with the cause, the next one used
        skipped[name] = f"{type(exc).__name__}: {exc}"
        return None
    if options.threads is not None and model.threads != options.threads:
        # Compared at another thread count than asked, a runtime whose pool is process-wide
        # (XLA, PyTorch) would win or lose for the wrong reason.
        skipped[name] = f"cannot apply threads={options.threads} per model (uses {model.threads or 'its process-wide pool'})"
        return None
    reference = list(reference) if isinstance(reference, (tuple, list)) else [reference]
    wrong = _disagreement(got, reference) if agrees is None else agrees(got)
    if wrong is not None:
        skipped[name] = f"wrong result: {wrong}"
        return None
    return model


def _measure(
    graph: Graph,
    candidates: Mapping[str, HostRuntime],
    options: HostOptions,
    interpreter: Callable[..., Sequence[np.ndarray]],
    skipped: dict[str, str],
    key: str,
    state_dir: str | None,
    failed: frozenset[str] = frozenset(),
) -> HostChoice:
    inputs = _inputs(graph)
    _announce(candidates)
    reference = interpreter(*inputs)  # also the interpreter's warm-up
    agrees = _plan_agreement(graph, options.plan, inputs) if options.plan is not None else None
    together = graph.param_bytes <= _INTERLEAVE_BYTES
    runs: dict[str, Callable[..., Any]] = {INTERPRETER: interpreter}
    models: dict[str, HostModel] = {}  # the compiled candidates timed together
    times = {} if together else _rounds(runs, inputs)
    # Apart (a heavy graph), only the fastest compiled model so far is kept: each runtime holds its
    # own form of the weights, and a language model's would otherwise be held once per runtime.
    best, best_model = INTERPRETER, None
    for name, rt in candidates.items():
        model = _checked(name, rt, graph, options, inputs, reference, agrees, skipped)
        if model is None:
            continue
        if together:
            runs[name] = models[name] = model
            continue
        times[name] = _rounds({name: model}, inputs)[name]
        if times[name] < times[best]:
            best, best_model = name, model
        del model  # a slower runtime's model goes before the next one compiles
    reason = "fastest, measured at compile time"
    if together:
        times = _untie(runs, _rounds(runs, inputs), inputs)
        best = _settle(times)
        best_model = models.get(best)
        del runs, models
        if times[best] > min(times.values()):
            reason = (f"measured at compile time, within {_TIE:.0%} of the fastest: a tie, which goes to the interpreter, "
                      "else the first name alphabetically, so that noise does not change the choice")

    # What a later process needs to start the winner alone and report as this one does: the
    # winner's version (checked once it is started) and why the others were not used (not the
    # failure of an earlier cached choice: that was this process's reason to measure).
    entry = {"runtime": best, "times_ms": times, "skipped": {k: v for k, v in skipped.items() if k not in failed},
             "version": "" if best == INTERPRETER else candidates[best].version}
    _cache_write(state_dir, key, entry)
    from neurenix_core._log import logger

    logger("compile").debug("cpu:0: %s chosen (%s); ms per call: %s", best, reason, {k: round(v, 3) for k, v in times.items()})
    return HostChoice(best, reason, best_model, times, skipped)


def _from_cache(graph: Graph, cached: Mapping[str, Any], options: HostOptions, failed: dict[str, str]) -> HostChoice | None:
    """The cached winner, started alone (no other framework imported) and compiled; None when
    it cannot be used as it is: not installed or not starting, another version than measured,
    or no longer covering the graph (the caller measures again), or failing to compile (its
    reason goes into ``failed``, and the caller measures the others)."""
    best = str(cached.get("runtime"))
    times = {str(k): float(v) for k, v in dict(cached.get("times_ms", {})).items()}
    skipped = {str(k): str(v) for k, v in dict(cached.get("skipped", {})).items()}
    reason = "fastest, measured by an earlier compile (cached)"
    if best == INTERPRETER:
        return HostChoice(best, reason, None, times, skipped)
    rt = host_runtime_named(best).get(best)
    if (not isinstance(rt, HostRuntime) or cached.get("version", rt.version) != rt.version or rt.covers(graph) is not None
            or _refuses(rt, options) is not None):
        return None
    try:
        model = rt.compile(graph, options)
    except Exception as exc:  # noqa: BLE001 - the cached winner no longer compiles this graph: measured again, the reason kept
        failed[best] = f"the cached choice failed to compile ({type(exc).__name__}: {exc})"
        return None
    return HostChoice(best, reason, model, times, skipped)


# ------------------------------------------------------------------------------ the choice cache
def _cache_key(graph: Graph, threads: int | None, weights: QuantizationPlan | None = None,
               plan: QuantizationPlan | None = None) -> str:
    from neurenix_core.benchkit import cpu_model

    # The graph's structure and weight shapes, not the weights' values: the same work whatever
    # numbers a model holds (one with freshly drawn weights was measured again on every run).
    shapes = [(s.name, tuple(s.shape), s.dtype) for s in graph.inputs]
    parts: list[Any] = [graph.structure_fingerprint(), shapes, threads, cpu_model(), os.cpu_count(), _installed_runtimes()]
    if weights is not None:  # another computation: the runtimes with integer-weight kernels, timed on them
        parts.append(scheme_of(weights))
    if plan is not None:  # integer kernels: another computation than float (its scales' values are not)
        parts.append(["static", plan.bits, sorted(plan.activations), sorted((k, q.axis) for k, q in plan.weights.items())])
    text = json.dumps(parts, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


_installed: list[list[Any]] | None = None


def _installed_runtimes() -> list[list[Any]]:
    """Each host-runtime plugin (runtime name, plugin name and version, and its source digest:
    ``cache.plugin_code``) with the installed versions of the packages its distribution requires,
    from package metadata: an upgraded framework or an edited plugin changes the key without the
    framework being imported (read once per process). A choice loaded from this cache is not
    checked against the reference again, so a changed runtime plugin is measured again."""
    from neurenix_core.graph.compile.cache import plugin_code

    global _installed
    if _installed is None:
        _installed = sorted([name, rec.name, str(rec.version), _requirement_versions(rec.distribution), plugin_code(rec.name)]
                            for rec, name in _offering())
    return _installed


def runtime_identity(name: str) -> list[Any]:
    """The runtime ``name``'s row of ``_installed_runtimes`` (its plugin, versions and source
    digest: part of a key for what that runtime made); empty where no plugin offers it."""
    return next((row for row in _installed_runtimes() if row[0] == name), [])


def _requirement_versions(distribution: str | None) -> list[str]:
    """``name==version`` of each unconditional requirement of ``distribution`` (extras left out)."""
    import re
    from importlib import metadata

    try:
        requires = metadata.requires(distribution) if distribution else None
    except metadata.PackageNotFoundError:  # a plugin module without an installed distribution
        return []
    out = []
    for req in requires or []:
        if ";" in req:
            continue  # an extra or a marker: not what the plugin always runs on
        name = re.split(r"[\s<>=!~\[(]", req, maxsplit=1)[0]
        try:
            out.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            out.append(f"{name} missing")
    return sorted(out)


def _cache_path(state_dir: str | None) -> str | None:
    return None if not state_dir else os.path.join(state_dir, _CACHE_FILE)


def _cache_read(state_dir: str | None) -> dict[str, Any]:
    path = _cache_path(state_dir)
    if path is None or not os.path.isfile(path):
        return {}
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return {}  # unreadable or half-written by a crashed process: measured again and rewritten whole
    return data if isinstance(data, dict) else {}


def _cache_write(state_dir: str | None, key: str, entry: Mapping[str, Any]) -> None:
    """Add ``entry`` and rewrite the file atomically (a temporary file renamed over it), so a
    concurrent process reads the old or the new file, never half of one; the last writer wins."""
    path = _cache_path(state_dir)
    if path is None:
        return
    data = _cache_read(state_dir)
    data.pop(key, None)
    data[key] = dict(entry)
    while len(data) > _CACHE_ENTRIES:
        data.pop(next(iter(data)))
    tmp: str | None = None
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".host_runtimes.", dir=os.path.dirname(path))
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
        os.replace(tmp, path)
    except OSError:
        # A read-only or full state folder: the choice still holds for this process; the next
        # one measures again. Nothing else depends on the file.
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)

