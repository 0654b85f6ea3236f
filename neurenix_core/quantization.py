"""Quantization math, once for every backend: calibration, parameters, TFLite integer arithmetic.

* Calibration runs the float reference interpreter over a data iterable and records each
  value's range (``minmax``, or ``percentile`` to clip outliers), with a progress bar.
* Weights: symmetric per-channel int8 in [-127, 127] along axis 0 (output channels).
* Activations: affine per-tensor int8 in [-128, 127] (zero point may be non-zero), or symmetric
  int16 (zero point 0) as TFLite's 16x8 mode, whose weights stay int8.
* Bias: int32 (int64 in 16x8 mode) with scale ``input_scale * weight_scale[c]``.
* Requantization: TFLite's ``QuantizeMultiplier`` and ``MultiplyByQuantizedMultiplier``
  (SaturatingRoundingDoublingHighMul, then RoundingDivideByPOT), so a backend that emits TFLite
  int8 kernels is bit-exact against :func:`neurenix_core.reference.run_quantized`.
* Scales are float32, as a TFLite flatbuffer stores them; multipliers are computed in float64
  from those float32 values, as TFLite's kernels do.

Backends lower a :class:`~neurenix_core.graph.QuantizationPlan`; they never recompute it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from neurenix_core.errors import QuantizationError
from neurenix_core.graph import Graph, Node, QuantizationPlan, QuantParams

__all__ = [
    "calibrate", "dynamic_plan", "fold_batch_norm", "weight_params", "activation_params", "round_half_away",
    "quantize", "dequantize", "fake_quantize", "quantize_weight", "quantize_bias", "quantize_multiplier",
    "saturating_rounding_doubling_high_mul", "rounding_divide_by_pot", "multiply_by_quantized_multiplier",
    "multiply_by_quantized_multiplier_int64", "requantize", "PASS_THROUGH", "INTEGER_OPS",
]

#: Ops whose output keeps the input's parameters (TFLite requires it for pooling and reshapes).
PASS_THROUGH = frozenset({"max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "flatten", "dropout"})
#: Ops the integer reference runs in integer arithmetic; the others run dequantize -> float -> quantize.
INTEGER_OPS = frozenset({"linear", "conv2d", "relu"}) | PASS_THROUGH
_INT32 = np.iinfo(np.int32)


# ----------------------------------------------------------------------------- parameters
def round_half_away(x: np.ndarray) -> np.ndarray:
    """``std::round`` (half away from zero), which TFLite uses; ``np.round`` rounds half to even."""
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def _range(bits: int) -> tuple[int, int]:
    if bits == 8:
        return -128, 127
    if bits == 16:
        return -32768, 32767
    raise QuantizationError(f"bits must be 8 or 16, got {bits}")


def activation_params(lo: float, hi: float, bits: int = 8) -> QuantParams:
    """Per-tensor parameters covering [lo, hi] (widened to include 0, so 0 is exact).

    int8: affine, zero point in [-128, 127]; int16: symmetric, zero point 0.
    """
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise QuantizationError(f"activation range [{lo}, {hi}] is not finite")
    qmin, qmax = _range(bits)
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    if bits == 16:
        bound = max(-lo, hi)
        scale = np.float32(bound / qmax if bound > 0 else 1.0)
        return QuantParams(np.array([scale], np.float32), np.zeros(1, np.int64), 16, None, qmin, qmax)
    scale = np.float32((hi - lo) / (qmax - qmin) if hi > lo else 1.0)
    zp = int(np.clip(round_half_away(np.array(qmin - lo / np.float64(scale))), qmin, qmax))
    return QuantParams(np.array([scale], np.float32), np.array([zp], np.int64), 8, None, qmin, qmax)


def weight_params(weight: np.ndarray) -> QuantParams:
    """Symmetric per-output-channel int8 parameters (axis 0, range [-127, 127])."""
    w = np.asarray(weight, np.float64).reshape(weight.shape[0], -1)
    bound = np.abs(w).max(axis=1)
    scale = np.where(bound > 0, bound / 127.0, 1.0).astype(np.float32)
    return QuantParams(scale, np.zeros(scale.shape, np.int64), 8, 0, -127, 127)


def _channel_shape(qp: QuantParams, ndim: int) -> tuple[int, ...]:
    shape = [1] * ndim
    if qp.axis is not None:
        shape[qp.axis] = -1
    return tuple(shape)


def quantize(x: np.ndarray, qp: QuantParams) -> np.ndarray:
    """Float -> integer with ``qp`` (round half away from zero, then clip)."""
    shape = _channel_shape(qp, np.ndim(x))
    scale = np.asarray(qp.scale, np.float32).astype(np.float64).reshape(shape)
    zp = np.asarray(qp.zero_point, np.int64).reshape(shape)
    q = round_half_away(np.asarray(x, np.float64) / scale) + zp
    return np.clip(q, qp.qmin, qp.qmax).astype(qp.dtype)


def dequantize(q: np.ndarray, qp: QuantParams) -> np.ndarray:
    shape = _channel_shape(qp, np.ndim(q))
    scale = np.asarray(qp.scale, np.float32).astype(np.float64).reshape(shape)
    return (q.astype(np.int64) - np.asarray(qp.zero_point, np.int64).reshape(shape)) * scale


def fake_quantize(x: np.ndarray, qp: QuantParams) -> np.ndarray:
    """``dequantize(quantize(x))``: the values an integer model can represent."""
    return dequantize(quantize(x, qp), qp)


def quantize_weight(weight: np.ndarray, qp: QuantParams) -> np.ndarray:
    return quantize(weight, qp)


def quantize_bias(bias: np.ndarray | None, input_qp: QuantParams, weight_qp: QuantParams, channels: int) -> np.ndarray:
    """Bias with scale ``input_scale * weight_scale[c]``, zero point 0: int32 (int64 for 16-bit inputs)."""
    b = np.zeros(channels, np.float64) if bias is None else np.asarray(bias, np.float64)
    scale = (np.float64(np.asarray(input_qp.scale, np.float32)[0]) * np.asarray(weight_qp.scale, np.float32).astype(np.float64)).astype(np.float32)
    q = round_half_away(b / scale.astype(np.float64))
    if input_qp.bits == 8:
        return np.clip(q, _INT32.min, _INT32.max).astype(np.int32)
    return q.astype(np.int64)


# ----------------------------------------------------------------------------- TFLite arithmetic
def quantize_multiplier(m: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
    """TFLite ``QuantizeMultiplier``: ``m = mantissa * 2**(shift - 31)``, mantissa an int32 in [2^30, 2^31)."""
    m = np.atleast_1d(np.asarray(m, np.float64))
    q, shift = np.frexp(m)
    fixed = round_half_away(q * float(1 << 31)).astype(np.int64)
    carry = fixed == (1 << 31)
    fixed = np.where(carry, fixed // 2, fixed)
    shift = np.where(carry, shift + 1, shift).astype(np.int64)
    tiny = shift < -31
    fixed = np.where(tiny | (m == 0), 0, fixed)
    shift = np.where(tiny | (m == 0), 0, shift)
    return fixed.astype(np.int64), shift


def saturating_rounding_doubling_high_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """gemmlowp's SaturatingRoundingDoublingHighMul on int32 values (held in int64 arrays)."""
    a = np.asarray(a, np.int64)
    b = np.asarray(b, np.int64)
    overflow = (a == b) & (a == _INT32.min)
    ab = a * b
    nudge = np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    total = ab + nudge
    # C++ integer division truncates toward zero; NumPy's // floors.
    high = np.sign(total) * (np.abs(total) // (1 << 31))
    return np.where(overflow, _INT32.max, high)


def rounding_divide_by_pot(x: np.ndarray, exponent: np.ndarray) -> np.ndarray:
    """gemmlowp's RoundingDivideByPOT: divide by 2**exponent, rounding half away from zero."""
    x = np.asarray(x, np.int64)
    exponent = np.asarray(exponent, np.int64)
    mask = (np.int64(1) << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> exponent) + (remainder > threshold)


def multiply_by_quantized_multiplier(x: np.ndarray, multiplier: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """TFLite ``MultiplyByQuantizedMultiplier`` for int32 accumulators (double rounding)."""
    shift = np.asarray(shift, np.int64)
    left = np.maximum(shift, 0)
    right = np.maximum(-shift, 0)
    x = np.asarray(x, np.int64) * (np.int64(1) << left)
    return rounding_divide_by_pot(saturating_rounding_doubling_high_mul(x, multiplier), right)


def multiply_by_quantized_multiplier_int64(x: np.ndarray, multiplier: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """TFLite's int64-accumulator overload (16x8 kernels): a 16-bit reduced multiplier, one rounding."""
    multiplier = np.asarray(multiplier, np.int64)
    reduced = np.where(multiplier < 0x7FFF0000, (multiplier + (1 << 15)) >> 16, 0x7FFF)
    total_shift = 15 - np.asarray(shift, np.int64)
    rounding = np.int64(1) << (total_shift - 1)
    return (np.asarray(x, np.int64) * reduced + rounding) >> total_shift


def requantize(acc: np.ndarray, real_multiplier: np.ndarray, out_qp: QuantParams, channel_axis: int | None, wide: bool) -> np.ndarray:
    """Scale an integer accumulator to the output's integer domain: multiplier, zero point, clamp."""
    mult, shift = quantize_multiplier(real_multiplier)
    if channel_axis is not None and mult.size > 1:
        shape = [1] * acc.ndim
        shape[channel_axis] = -1
        mult, shift = mult.reshape(shape), shift.reshape(shape)
    fn = multiply_by_quantized_multiplier_int64 if wide else multiply_by_quantized_multiplier
    out = fn(acc, mult, shift) + int(np.asarray(out_qp.zero_point)[0])
    return np.clip(out, out_qp.qmin, out_qp.qmax).astype(out_qp.dtype)


# ----------------------------------------------------------------------------- graph transforms
def fold_batch_norm(graph: Graph) -> Graph:
    """Fold each ``batch_norm2d`` that directly follows a ``conv2d`` (its only consumer) into the
    convolution's weights and bias, as integer runtimes expect. The folded conv keeps its name
    and takes over the batch norm's output value, so later nodes are unchanged."""
    consumers: dict[str, int] = defaultdict(int)
    for n in graph.nodes:
        for i in n.inputs:
            consumers[i] += 1
    producer = {n.output: n for n in graph.nodes}
    folded: dict[str, Node] = {}
    dropped: set[str] = set()
    for bn in graph.nodes:
        conv = producer.get(bn.inputs[0]) if bn.op == "batch_norm2d" else None
        if conv is None or conv.op != "conv2d" or consumers[conv.output] != 1 or conv.output in graph.outputs:
            continue
        p = bn.params
        scale = np.asarray(p["weight"], np.float64) / np.sqrt(np.asarray(p["running_var"], np.float64) + bn.attrs["eps"])
        w = np.asarray(conv.params["weight"], np.float64) * scale[:, None, None, None]
        b0 = np.asarray(conv.params.get("bias", np.zeros(scale.shape)), np.float64)
        b = (b0 - np.asarray(p["running_mean"], np.float64)) * scale + np.asarray(p["bias"], np.float64)
        folded[conv.name] = replace(conv, output=bn.output, params={"weight": w.astype(np.float32), "bias": b.astype(np.float32)})
        dropped.add(bn.name)
    nodes = tuple(folded.get(n.name, n) for n in graph.nodes if n.name not in dropped)
    return replace(graph, nodes=nodes)


# ----------------------------------------------------------------------------- calibration
class _Observer:
    """Running min/max per value, plus a bounded sample of values for percentiles."""

    def __init__(self, method: str, sample_per_batch: int = 65536, seed: int = 0) -> None:
        self.method = method
        self.lo: dict[str, float] = {}
        self.hi: dict[str, float] = {}
        self.samples: dict[str, list[np.ndarray]] = defaultdict(list)
        self.k = sample_per_batch
        self.rng = np.random.default_rng(seed)

    def observe(self, name: str, value: np.ndarray, where: str) -> None:
        flat = np.asarray(value, np.float64).ravel()
        if not np.all(np.isfinite(flat)):
            raise QuantizationError(f"calibration: {where} produced NaN or inf in value {name!r}; the model or its data overflow")
        self.lo[name] = min(self.lo.get(name, np.inf), float(flat.min()))
        self.hi[name] = max(self.hi.get(name, -np.inf), float(flat.max()))
        if self.method == "percentile":
            self.samples[name].append(flat if flat.size <= self.k else self.rng.choice(flat, self.k, replace=False))

    def range(self, name: str, percentile: float) -> tuple[float, float]:
        if self.method == "minmax":
            return self.lo[name], self.hi[name]
        data = np.concatenate(self.samples[name])
        return float(np.percentile(data, 100.0 - percentile)), float(np.percentile(data, percentile))


def _as_inputs(batch: Any, n_inputs: int, index: int) -> tuple[np.ndarray, ...]:
    items = tuple(batch) if isinstance(batch, (tuple, list)) and n_inputs > 1 else (batch,)
    if len(items) != n_inputs:
        raise QuantizationError(f"calibration batch {index} has {len(items)} input(s), the model takes {n_inputs}")
    out = []
    for x in items:
        arr = np.asarray(x.numpy() if hasattr(x, "numpy") and not isinstance(x, np.ndarray) else x, np.float64)
        if not np.all(np.isfinite(arr)):
            raise QuantizationError(
                f"calibration batch {index} contains NaN or inf; clean the data (np.nan_to_num) or drop that batch. Nothing was quantized"
            )
        out.append(arr)
    return tuple(out)


def _progress(data: Iterable[Any], enabled: bool) -> Iterable[Any]:
    if not enabled:
        return data
    from rich.progress import track  # rich is a core dependency; imported only while calibrating

    total = len(data) if hasattr(data, "__len__") else None  # type: ignore[arg-type]
    return track(data, description="calibrating", total=total, transient=True)


def _graph_of(model: Any) -> Graph:
    if isinstance(model, Graph):
        return model
    to_graph = getattr(model, "to_graph", None)
    if to_graph is None:
        raise QuantizationError(f"calibrate expects a neurenix_core.nn Module or a Graph, got {type(model).__name__}")
    return to_graph()


def calibrate(
    model: Any,
    data: Iterable[Any],
    *,
    bits: int = 8,
    method: str = "minmax",
    percentile: float = 99.99,
    progress: bool = True,
) -> QuantizationPlan:
    """Static quantization parameters for ``model`` (a Module or Graph) from ``data``.

    ``data`` yields batches: an array/Tensor per batch, or a tuple of them for a multi-input
    model. Returns a :class:`QuantizationPlan` keyed by the value and node names of ``model``'s
    graph (fold batch norms first with :func:`fold_batch_norm` if the backend will).
    """
    if method not in ("minmax", "percentile"):
        raise QuantizationError(f"calibration method must be 'minmax' or 'percentile', got {method!r}")
    if not 50.0 < percentile <= 100.0:
        raise QuantizationError(f"percentile must be in (50, 100], got {percentile}")
    _range(bits)
    from neurenix_core.reference import run_graph

    graph = _graph_of(model)
    obs = _Observer(method)
    batches = 0
    for i, batch in enumerate(_progress(data, progress)):
        inputs = _as_inputs(batch, len(graph.inputs), i)
        values = run_graph(graph, *inputs, return_values=True)
        for name, value in values.items():
            obs.observe(name, value, f"batch {i}")
        batches += 1
    if batches == 0:
        raise QuantizationError("calibration data is empty: pass at least one representative input batch")
    acts = {name: activation_params(*obs.range(name, percentile), bits=bits) for name in obs.lo}
    _tie_parameters(graph, acts)
    weights = {n.name: weight_params(np.asarray(n.params["weight"])) for n in graph.nodes if n.op in ("linear", "conv2d")}
    return QuantizationPlan(bits=bits, activations=acts, weights=weights, method=method, dynamic=False)


def _tie_parameters(graph: Graph, acts: dict[str, QuantParams]) -> None:
    """Make the plan what integer kernels need: a linear/conv followed only by ReLU takes the
    ReLU's output parameters (the fused ReLU is the clamp at the zero point), and pass-through
    ops (pooling, flatten, dropout) keep their input's parameters."""
    consumers: dict[str, list[Node]] = defaultdict(list)
    for n in graph.nodes:
        for i in n.inputs:
            consumers[i].append(n)
    producer = {n.output: n for n in graph.nodes}
    for n in graph.nodes:
        if n.op == "relu":
            src = producer.get(n.inputs[0])
            if src is not None and src.op in ("linear", "conv2d") and len(consumers[src.output]) == 1 and src.output not in graph.outputs:
                acts[src.output] = acts[n.output]
    for n in graph.nodes:
        if n.op in PASS_THROUGH:
            acts[n.output] = acts[n.inputs[0]]
        elif n.op == "softmax":
            acts[n.output] = softmax_output_params(acts[n.output].bits)


def softmax_output_params(bits: int) -> QuantParams:
    """TFLite's fixed softmax output parameters: the range is [0, 1] by definition, so int8 uses
    scale 1/256 with zero point -128 and int16 scale 1/32768 with zero point 0. Calibrated ranges
    would make the core's integer reference disagree with every TFLite-based backend."""
    qmin, qmax = _range(bits)
    if bits == 16:
        return QuantParams(np.array([1.0 / 32768.0], np.float32), np.zeros(1, np.int64), 16, None, qmin, qmax)
    return QuantParams(np.array([1.0 / 256.0], np.float32), np.array([-128], np.int64), 8, None, qmin, qmax)


def dynamic_plan(model: Any) -> QuantizationPlan:
    """Dynamic quantization: int8 per-channel Linear weights; activations quantized at run time."""
    graph = _graph_of(model)
    weights = {n.name: weight_params(np.asarray(n.params["weight"])) for n in graph.nodes if n.op == "linear"}
    if not weights:
        raise QuantizationError("dynamic quantization quantizes Linear weights, and this model has no Linear layer")
    return QuantizationPlan(bits=8, activations={}, weights=weights, method="dynamic", dynamic=True)


def plan_summary(plan: QuantizationPlan) -> str:
    kind = "dynamic" if plan.dynamic else f"static {plan.method}"
    return f"int{plan.bits} {kind}: {len(plan.weights)} weight tensors, {len(plan.activations)} activation ranges"


def check_plan(graph: Graph, plan: QuantizationPlan) -> None:
    """Every value and quantized layer of ``graph`` has its parameters (a plan from another model fails here)."""
    names: Sequence[str] = [s.name for s in graph.inputs] + [n.output for n in graph.nodes]
    if not plan.dynamic:
        missing = [v for v in names if v not in plan.activations]
        if missing:
            raise QuantizationError(f"the quantization plan has no parameters for value(s) {missing[:5]}; calibrate this model again")
    layers = [n.name for n in graph.nodes if n.op == "linear" or (n.op == "conv2d" and not plan.dynamic)]
    missing = [n for n in layers if n not in plan.weights]
    if missing:
        raise QuantizationError(f"the quantization plan has no weight parameters for layer(s) {missing[:5]}; calibrate this model again")


def describe(qp: QuantParams) -> Mapping[str, Any]:
    return {"scale": np.asarray(qp.scale).tolist(), "zero_point": np.asarray(qp.zero_point).tolist(), "bits": qp.bits, "axis": qp.axis}
