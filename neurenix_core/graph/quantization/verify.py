"""Verification of a quantized compile: the device against the core's integer reference.

A static int8/int16 compile lowers the core's :class:`~neurenix_core.graph.ir.QuantizationPlan`;
every backend should then compute what :func:`~neurenix_core.graph.reference.run.run_quantized`
computes, up to rounding. ``nx.compile`` runs a few calibration batches through the compiled
model, the integer reference and the float64 reference, and checks two things:

* **the device follows the plan**: ``||device - integer||`` is at most twice the int8 rounding
  of the whole model (``2 * ||integer - float||``, the triangle inequality for a device whose own
  rounding is as good as the reference's) plus two output quantization steps per element. A
  runtime that computes something else (a fused kernel that drops a bias, a scale applied
  twice) is far outside that bound;
* **the plan describes the model**: the integer reference is within :data:`PLAN_TOLERANCE`
  (relative L2) of float. A wrong scale (saturation, or steps coarser than the values) is not.

Outside either bound, :class:`~neurenix_core.errors.CompilationError` names the first layer where
the two diverge: for the plan, from the references' per-value errors (:func:`layer_errors`, the
float-vs-integer debugger); for the device, by compiling the model once more with every
quantized activation as an output and comparing them in topological order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from neurenix_core.errors import CompilationError
from neurenix_core.graph.ir import Graph, QuantizationPlan

__all__ = ["PLAN_TOLERANCE", "VERIFY_BATCHES", "LayerError", "Verification", "agreement", "layer_errors", "references", "verify_outputs"]

#: The largest relative L2 error of the integer reference against float that int8 rounding of a
#: calibrated model explains (measured here: MLPs and CNNs 1-5%, tiny BERT 6%, a ResNet-18-like
#: CNN about 10%); a scale off by 10x gives 50% or more.
PLAN_TOLERANCE = 0.3
#: Calibration batches a compile runs for verification (the first ones).
VERIFY_BATCHES = 2
#: Output quantization steps per element the device may differ by beyond the rounding bound.
_STEPS = 2.0
#: For an output the plan leaves in float (a cpu:0 segment's, in a mixed plan): the share of its
#: norm float32 arithmetic may add, where a quantized output has its steps (fp32's tolerance).
_FLOAT_SLACK = 1e-4


@dataclass(frozen=True)
class LayerError:
    """How far one quantized value is from the float reference (or the device from the integer one)."""

    node: str
    op: str
    value: str
    relative: float  # ||a - b|| / ||b||
    steps: float  # max |a - b| in the value's quantization steps

    def line(self) -> str:
        return f"{self.node} ({self.op}): relative error {self.relative:.2%}, max {self.steps:.1f} steps"


@dataclass(frozen=True)
class Verification:
    """The agreement measured on ``batches`` calibration batches."""

    batches: int
    device_relative: float  # ||device - integer|| / ||integer||
    device_steps: float  # max |device - integer| in output steps
    device_bound: float  # the largest ||device - integer|| / ||integer|| rounding explains
    plan_relative: float  # ||integer - float|| / ||float||

    @property
    def within_bound(self) -> bool:
        """Whether the device follows the plan: its distance from the integer reference is finite
        and within what int8/int16 rounding explains."""
        return bool(np.isfinite(self.device_relative)) and self.device_relative <= self.device_bound

    def line(self) -> str:
        return (
            f"verified on {self.batches} calibration batch{'es' if self.batches != 1 else ''}: device vs integer reference "
            f"{self.device_relative:.2%} relative (max {self.device_steps:.1f} output steps; bound {self.device_bound:.2%}), "
            f"integer vs float {self.plan_relative:.2%}"
        )


def _relative(a: np.ndarray, b: np.ndarray) -> float:
    diff = float(np.linalg.norm((a - b).ravel()))
    base = float(np.linalg.norm(b.ravel()))
    return diff / base if base > 0 else (0.0 if diff == 0 else float("inf"))


def _steps(a: np.ndarray, b: np.ndarray, scale: float) -> float:
    return float(np.max(np.abs(a - b))) / scale if a.size else 0.0


def _real(value: Any, plan: QuantizationPlan, name: str) -> np.ndarray:
    """An integer reference value as real numbers: dequantized when it is held as integers."""
    from neurenix_core.graph.ir import qmath as Q

    arr = np.asarray(value)
    return Q.dequantize(arr, plan.activations[name]) if arr.dtype.kind in "iu" else arr.astype(np.float64)


def _scale(plan: QuantizationPlan, name: str) -> float:
    return float(np.asarray(plan.activations[name].scale).reshape(-1)[0])


def layer_errors(graph: Graph, plan: QuantizationPlan, *inputs: Any) -> list[LayerError]:
    """Per quantized value, in topological order: the integer reference (dequantized) against the
    float64 reference on ``inputs``. The first rows that jump show where the plan loses the model."""
    from neurenix_core.graph.reference.run import run_graph, run_quantized, specialized

    exact = run_graph(graph, *inputs, return_values=True)
    ints = run_quantized(graph, plan, *inputs, return_values=True)
    rows = []
    for node in specialized(graph, inputs).nodes:
        name = node.output
        if name not in plan.activations or name not in ints or np.asarray(exact[name]).dtype.kind != "f":
            continue
        got = _real(ints[name], plan, name)
        want = np.asarray(exact[name], np.float64)
        rows.append(LayerError(node.name, node.op, name, _relative(got, want), _steps(got, want, _scale(plan, name))))
    return rows


def _first_over(rows: Sequence[LayerError], tolerance: float) -> LayerError | None:
    return next((r for r in rows if r.relative > tolerance), None)


def _check_plan(graph: Graph, plan: QuantizationPlan, batch: tuple[Any, ...], relative: float, device: str) -> None:
    if relative <= PLAN_TOLERANCE:
        return
    rows = layer_errors(graph, plan, *batch)
    first = _first_over(rows, PLAN_TOLERANCE)
    where = (
        f"first layer over {PLAN_TOLERANCE:.0%}: {first.line()}"
        if first
        else "no single layer is over the bound; the error accumulates"
    )
    scale = f" (scale {_scale(plan, first.value):.4g})" if first else ""
    raise CompilationError(
        f"{device}: the int{plan.bits} plan does not describe the model: the integer reference is {relative:.1%} away from float "
        f"on the calibration data, more than int{plan.bits} rounding explains ({PLAN_TOLERANCE:.0%}); {where}{scale}. "
        "Recalibrate with representative data (or another calibration method: 'histogram', 'percentile'), check a hand-made plan's scales, "
        "or pass verify=False to nx.compile to accept it; neurenix_core.graph.quantization.verify.layer_errors shows every layer"
    )


def verify_outputs(
    graph: Graph,
    plan: QuantizationPlan,
    batches: Sequence[tuple[Any, ...]],
    run: Callable[..., Sequence[np.ndarray]],
    *,
    device: str,
    locate: Callable[[Graph], Callable[..., Sequence[np.ndarray]]] | None = None,
) -> Verification:
    """Check ``run`` (the compiled model: inputs -> host arrays of ``graph.outputs``) against the
    integer and float references on ``batches``; raise CompilationError outside the bounds.
    ``locate`` compiles a graph on the same device (used to find the first diverging layer)."""
    result = agreement(graph, plan, [(batch, list(run(*batch))) for batch in batches])
    if not result.within_bound:
        raise CompilationError(_device_message(graph, plan, batches[0], result, device, locate))
    _check_plan(graph, plan, batches[0], result.plan_relative, device)
    return result


#: The float64 and the integer reference's outputs for one batch.
References = tuple[tuple[Any, ...], tuple[Any, ...]]


def references(graph: Graph, plan: QuantizationPlan, batch: tuple[Any, ...], *, float_inputs: bool = False) -> References:
    """The float64 reference's and the integer reference's outputs of ``graph`` on ``batch``
    (``float_inputs``: ``graph`` is a segment whose float inputs the plan may leave in float,
    ``run_quantized``'s)."""
    from neurenix_core.graph.reference.run import run_graph, run_quantized

    return _as_tuple(run_graph(graph, *batch)), _as_tuple(run_quantized(graph, plan, *batch, float_inputs=float_inputs))


def agreement(
    graph: Graph,
    plan: QuantizationPlan,
    runs: Sequence[tuple[tuple[Any, ...], Sequence[Any]]],
    *,
    refs: Sequence[References] | None = None,
) -> Verification:
    """How far a device's outputs are from the integer reference, and the bound rounding explains:
    ``runs`` pairs each batch with the device's outputs on it; ``refs`` (one per run) saves
    computing the references again. Raises nothing: :func:`verify_outputs` and the cpu:0 runtime
    choice (compile.host_select) decide what to do with a result outside the bound."""
    dev_diff = int_base = plan_diff = flt_base = bound = 0.0
    steps = 0.0
    for k_run, (batch, got) in enumerate(runs):
        exact, ints = refs[k_run] if refs is not None else references(graph, plan, batch)
        for k, name in enumerate(graph.outputs):
            if np.asarray(exact[k]).dtype.kind != "f":
                continue  # integer or bool outputs (ids, masks) are not quantized
            want_i, want_f = np.asarray(ints[k], np.float64), np.asarray(exact[k], np.float64)
            have = np.asarray(got[k], np.float64).reshape(want_i.shape)
            dev_diff += float(np.sum((have - want_i) ** 2))
            int_base += float(np.sum(want_i**2))
            plan_diff += float(np.sum((want_i - want_f) ** 2))
            flt_base += float(np.sum(want_f**2))
            if name in plan.activations:
                scale = _scale(plan, name)
                slack = _STEPS * scale * np.sqrt(want_i.size)
                steps = max(steps, _steps(have, want_i, scale))
            else:  # left in float by the plan (a segment of a mixed plan): float32's rounding, no output steps
                slack = _FLOAT_SLACK * float(np.linalg.norm(want_i.ravel()))
            bound += (2.0 * float(np.linalg.norm((want_i - want_f).ravel())) + slack) ** 2
    norm = np.sqrt(int_base) or 1.0
    return Verification(
        len(runs),
        float(np.sqrt(dev_diff) / norm),
        steps,
        float(np.sqrt(bound) / norm),
        float(np.sqrt(plan_diff) / (np.sqrt(flt_base) or 1.0)),
    )


def _as_tuple(x: Any) -> tuple[Any, ...]:
    return x if isinstance(x, tuple) else (x,)


def _device_message(
    graph: Graph,
    plan: QuantizationPlan,
    batch: tuple[Any, ...],
    result: Verification,
    device: str,
    locate: Callable[[Graph], Callable[..., Sequence[np.ndarray]]] | None,
) -> str:
    where = _locate(graph, plan, batch, locate) if locate is not None else "the layer could not be located"
    return (
        f"{device}: the compiled int{plan.bits} model does not compute what its quantization plan says: on the calibration data it is "
        f"{result.device_relative:.3g} (relative L2, max {result.device_steps:.4g} output steps) away from the core's integer reference, "
        f"where int{plan.bits} rounding explains at most {result.device_bound:.2%}; {where}. This is a fault of the device's "
        "runtime or of the plugin's lowering, not of the model: report it to the plugin, and run the model on device='cpu' "
        "(the integer reference) or in float (no quantize=) meanwhile"
    )


def _locate(
    graph: Graph, plan: QuantizationPlan, batch: tuple[Any, ...], locate: Callable[[Graph], Callable[..., Sequence[np.ndarray]]]
) -> str:
    """The first quantized value (topological order) where the device leaves the integer reference.

    Bisection over prefixes of the graph, each compiled alone with that value as its one output:
    a prefix keeps the fusions the runtime makes in the whole model (a graph with every value as
    an output would not), and a divergence, once there, carries to every later value."""
    from neurenix_core.graph.reference.run import run_graph, run_quantized, specialized

    spec = specialized(graph, batch)
    exact = run_graph(graph, *batch, return_values=True)
    ints = run_quantized(graph, plan, *batch, return_values=True)
    order = [
        k for k, n in enumerate(spec.nodes) if n.output in plan.activations and np.asarray(exact[n.output]).dtype.kind == "f"
    ]

    def differs(k: int) -> float:
        node = spec.nodes[k]
        want = _real(ints[node.output], plan, node.output)
        have = np.asarray(locate(_prefix(spec, k))(*batch)[0], np.float64)
        return _steps(have.reshape(want.shape), want, _scale(plan, node.output))

    lo, hi, found = 0, len(order) - 1, None
    try:
        while lo <= hi:
            mid = (lo + hi) // 2
            steps = differs(order[mid])
            if steps > _STEPS + 0.5:
                found, hi = (order[mid], steps), mid - 1
            else:
                lo = mid + 1
    except Exception as exc:  # noqa: BLE001 - the diagnosis is best effort; the verification error stands and says why
        return f"the first diverging layer could not be located ({type(exc).__name__}: {exc})"
    if found is None:
        return "every prefix of the model agrees with the reference (the divergence needs the whole model)"
    node = spec.nodes[found[0]]
    return f"the first layer that differs is node {node.name!r} (op {node.op}, value {node.output!r}): max {found[1]:.4g} quantization steps"


def _prefix(graph: Graph, k: int) -> Graph:
    """``graph`` up to node ``k`` (the nodes it depends on), with that node's value as the output."""
    needed = {graph.nodes[k].output}
    keep = []
    for node in reversed(graph.nodes[: k + 1]):
        if node.output in needed:
            keep.append(node)
            needed.update(node.inputs)
    return replace(graph, nodes=tuple(reversed(keep)), outputs=(graph.nodes[k].output,))
