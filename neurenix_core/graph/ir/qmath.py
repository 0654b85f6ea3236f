"""Quantization arithmetic, once for every backend: parameters, (de)quantization, TFLite integer math.

* Weights: symmetric per-channel int8 in [-127, 127] along axis 0 (output channels).
* Activations: affine per-tensor int8 in [-128, 127] (zero point may be non-zero), or symmetric
  int16 (zero point 0) as TFLite's 16x8 mode, whose weights stay int8.
* Bias: int32 (int64 in 16x8 mode) with scale ``input_scale * weight_scale[c]``.
* matmul/gemm with a constant right-hand side: per-channel weights along its output axis as
  stored (``constant_weight_axis``); a matmul of two activations is per tensor.
* A spatial mean (global average pool) requantizes to its own parameters, as TFLite's MEAN
  (``integer_mean``); pooling and reshapes otherwise keep their input's (``passes_through``).
* Requantization: TFLite's ``QuantizeMultiplier`` and ``MultiplyByQuantizedMultiplier``
  (SaturatingRoundingDoublingHighMul, then RoundingDivideByPOT), so a backend that emits TFLite
  int8 kernels is bit-exact against :func:`neurenix_core.graph.reference.run.run_quantized`.
* Scales are float32, as a TFLite flatbuffer stores them; multipliers are computed in float64
  from those float32 values, as TFLite's kernels do.

Pure functions of arrays and plans: the reference interpreter builds on this module, and
calibration (which runs that interpreter) builds on both.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from neurenix_core.errors import QuantizationError
from neurenix_core.graph.ir import Graph, Node, QuantizationPlan, QuantParams

__all__ = [
    "FLOAT_OUTPUT_OPS",
    "INTEGER_OPS",
    "PASS_THROUGH",
    "activation_params",
    "check_plan",
    "constant_weight_axis",
    "dequantize",
    "dequantize_accumulator",
    "describe",
    "fake_quantize",
    "fixed_output_params",
    "fold_batch_norm",
    "int_range",
    "integer_mean",
    "is_spatial_mean",
    "multiply_by_quantized_multiplier",
    "multiply_by_quantized_multiplier_int64",
    "passes_through",
    "quantize",
    "quantize_bias",
    "quantize_multiplier",
    "quantize_weight",
    "requantize",
    "restrict_plan",
    "round_half_away",
    "rounding_divide_by_pot",
    "saturating_rounding_doubling_high_mul",
    "softmax_output_params",
    "weight_params",
]

#: Ops whose output keeps the input's parameters (TFLite requires it for pooling and reshapes).
#: A global average pool is the exception (:func:`passes_through`): it is TFLite's MEAN, which
#: requantizes to its output's own parameters.
PASS_THROUGH = frozenset({"max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "flatten", "dropout"})
#: Ops the integer reference runs in integer arithmetic; the others run dequantize -> float -> quantize.
INTEGER_OPS = frozenset({"linear", "conv2d", "relu"}) | PASS_THROUGH
#: Integer kernels whose output a (mixed-precision) plan may leave in float: int8 inputs and
#: weights, the int32 accumulator dequantized with ``s_in * s_w[c]`` and the bias added in float,
#: no output rounding (:func:`dequantize_accumulator`). PyTorch's X86 PTQ keeps the linear layers
#: that feed a softmax, layer norm or residual add so; OpenVINO runs it as FakeQuantize'd input
#: and weights with no FakeQuantize on the output. Their inputs still need parameters.
FLOAT_OUTPUT_OPS = frozenset({"linear", "conv2d"})
_INT32 = np.iinfo(np.int32)
# The integer reference's fast kernels (graph/reference/run.py) use the helpers below that are
# not in __all__: exactness bounds of float GEMMs on integers, and the output stage prepared once
# per layer (OutputStage). They are not re-exported by neurenix_core.graph.quantization.
#: Output parameters for arithmetic that never reads them (``_mbqm_inplace``'s stage).
_ANY = QuantParams(np.ones(1, np.float32), np.zeros(1, np.int64), 16, None, -(2**15), 2**15 - 1)
#: Every integer of magnitude below 2**53 is a float64, and so is every sum or product of such
#: integers that stays below it: a float64 GEMM (BLAS) of small integers is an exact integer GEMM
#: whenever ``depth * max|a| * max|b| < FLOAT64_EXACT`` (each partial sum, in whatever order or
#: FMA grouping BLAS adds, is bounded by that sum of magnitudes, so no step ever rounds).
FLOAT64_EXACT = 2**53
#: The same for float32 (a 24-bit significand): a float32 GEMM (sgemm, twice dgemm's speed) of
#: int8 values is exact while ``sum |a * b| <= FLOAT32_EXACT`` over the terms of each output.
FLOAT32_EXACT = 2**24


# ----------------------------------------------------------------------------- parameters
def round_half_away(x: np.ndarray) -> np.ndarray:
    """``std::round`` (half away from zero), which TFLite uses; ``np.round`` rounds half to even."""
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def int_range(bits: int) -> tuple[int, int]:
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
    qmin, qmax = int_range(bits)
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    tiny = np.finfo(np.float32).tiny  # an empty or vanishing range (a dead ReLU, a constant 0) gets scale 1: 0 stays exact
    if bits == 16:
        bound = max(-lo, hi)
        scale = np.float32(bound / qmax) if np.float32(bound / qmax) >= tiny else np.float32(1.0)
        return QuantParams(np.array([scale], np.float32), np.zeros(1, np.int64), 16, None, qmin, qmax)
    scale = np.float32((hi - lo) / (qmax - qmin)) if np.float32((hi - lo) / (qmax - qmin)) >= tiny else np.float32(1.0)
    zp = int(np.clip(round_half_away(np.array(qmin - lo / np.float64(scale))), qmin, qmax))
    return QuantParams(np.array([scale], np.float32), np.array([zp], np.int64), 8, None, qmin, qmax)


def weight_params(weight: np.ndarray, axis: int = 0) -> QuantParams:
    """Symmetric per-output-channel int8 parameters along ``axis`` (range [-127, 127]): axis 0 for
    linear/conv weights, the output (last) axis of a matmul's constant right-hand side."""
    w = np.asarray(weight, np.float64)
    axis = axis % w.ndim
    w = np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)
    bound = np.abs(w).max(axis=1)
    # A channel whose step would not be a normal float32 (all zeros, or weights below ~1e-36:
    # a step that underflows to 0 or a denormal whose reciprocal is inf) quantizes to zeros with
    # scale 1: its contribution is below any int8 step of the output anyway.
    step = (bound / 127.0).astype(np.float32)
    scale = np.where(step >= np.finfo(np.float32).tiny, step, np.float32(1.0)).astype(np.float32)
    return QuantParams(scale, np.zeros(scale.shape, np.int64), 8, axis, -127, 127)


def constant_weight_axis(node: Node, producers: Mapping[str, Node]) -> int | None:
    """For a ``matmul``/``gemm`` whose right-hand side ``b`` (input 1) is a 2-D float ``constant``,
    the output-channel axis of ``b`` as stored (1, or 0 for a gemm with ``trans_b``); else None.

    Such a node is a fully connected layer: the plan holds per-channel int8 parameters for ``b``
    under the node's name (``plan.weights[node.name]``, axis as returned). A gemm qualifies only
    with ``alpha == beta == 1`` and ``c`` absent or a constant with one value per output channel
    (the int32 bias); other gemms and batched constants run the float path."""
    if node.op not in ("matmul", "gemm") or len(node.inputs) < 2:
        return None
    b = producers.get(node.inputs[1])
    if b is None or b.op != "constant":
        return None
    value = np.asarray(b.params["value"])
    if value.ndim != 2 or value.dtype.kind != "f":
        return None
    if node.op == "matmul":
        return 1
    a = node.attrs
    if float(a.get("alpha", 1.0)) != 1.0 or float(a.get("beta", 1.0)) != 1.0:
        return None
    axis = 0 if a.get("trans_b") else 1
    if len(node.inputs) > 2:
        c = producers.get(node.inputs[2])
        if c is None or c.op != "constant" or np.asarray(c.params["value"]).size not in (1, value.shape[axis]):
            return None
    return axis


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


def dequantize_accumulator(acc: np.ndarray, in_qp: QuantParams, weight_qp: QuantParams, channel_axis: int,
                           bias: np.ndarray | None) -> np.ndarray:
    """A float-output layer's result (:data:`FLOAT_OUTPUT_OPS`): the integer accumulator
    ``sum (q - zp_in) * w_q`` (no bias) times ``s_in * s_w[c]`` along ``channel_axis``, plus the
    float ``bias``, in float64: no rounding to an output grid (the plan has none for it)."""
    shape = [1] * np.ndim(acc)
    shape[channel_axis] = -1
    scale = np.float64(np.asarray(in_qp.scale, np.float32).ravel()[0]) * np.asarray(weight_qp.scale, np.float32).astype(np.float64)
    out = np.asarray(acc, np.float64) * scale.reshape(shape)
    return out if bias is None else out + np.asarray(bias, np.float64).reshape(shape)


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
    return requantize_fixed(acc, mult, shift, out_qp, channel_axis, wide)


def requantize_fixed(acc: np.ndarray, mult: np.ndarray, shift: np.ndarray, out_qp: QuantParams, channel_axis: int | None,
                     wide: bool, *, overwrite: bool = False, acc_bound: int | None = None) -> np.ndarray:
    """:func:`requantize` with the multipliers already through :func:`quantize_multiplier` (a
    layer computes them once). ``overwrite``: ``acc`` is a fresh int64 array the caller gives up,
    computed in place; ``acc_bound``: a bound on ``|acc|`` the caller knows (else measured)."""
    shape = [1] * np.ndim(acc)
    if channel_axis is not None and np.size(mult) > 1:
        shape[channel_axis] = -1
    elif np.size(mult) != 1 or not shape:  # NumPy's broadcasting decides the shape (a 0-d accumulator's result is (1,))
        fn = multiply_by_quantized_multiplier_int64 if wide else multiply_by_quantized_multiplier
        out = fn(acc, mult, shift) + int(np.asarray(out_qp.zero_point)[0])
        return np.clip(out, out_qp.qmin, out_qp.qmax).astype(out_qp.dtype)
    stage = output_stage(mult, shift, out_qp, wide, tuple(shape), acc_bound)
    x = acc if overwrite and isinstance(acc, np.ndarray) and acc.dtype == np.int64 and acc.flags.writeable else np.array(acc, np.int64)
    out = np.empty(x.shape, out_qp.dtype)
    apply_output_stage(stage, x, out)
    return out


@dataclass(frozen=True, slots=True)
class OutputStage:
    """TFLite's output stage (:func:`requantize_fixed`: multiplier, zero point, clamp) prepared
    once for a layer whose blocks hold their channels where ``mult`` broadcasts (``(C, 1)``
    for channels on the first of two axes, ``(C,)`` for channels last). ``fast``: every
    accumulator is known to be within ``_mbqm_inplace``'s conditions (no measuring per block)."""

    mult: np.ndarray
    shift: np.ndarray
    zero_point: int
    qmin: int
    qmax: int
    wide: bool
    fast: bool
    left: np.ndarray | None  # None: no channel shifts left (multipliers below 1, the usual case)
    right: np.ndarray
    half: np.ndarray
    offset: np.ndarray  # half + (zero_point << right): the zero point added inside the last rounding
    rounds: np.ndarray | None  # right > 0 where some channel has exponent 0; None where all round
    narrow: bool = False  # after the high multiply every value, plus the offset, fits int32: the rest runs in int32
    offset32: np.ndarray | None = None  # offset and right in int32, where narrow
    right32: np.ndarray | None = None


def output_stage(mult: np.ndarray, shift: np.ndarray, out_qp: QuantParams, wide: bool, shape: tuple[int, ...],
                 bound: int | None) -> OutputStage:
    """The :class:`OutputStage` of QuantizeMultiplier's ``(mult, shift)`` laid out as ``shape``,
    for accumulators with ``|acc| <= bound`` (None: unknown, measured on each block)."""
    m = np.asarray(mult, np.int64).reshape(shape)
    s = np.asarray(shift, np.int64).reshape(shape)
    left, right = np.maximum(s, 0), np.maximum(-s, 0)
    widest = int(left.max()) if left.size else 0
    fast = (not wide and bound is not None and m.size > 0 and int(m.min()) >= 0 and int(m.max()) < 1 << 31
            and (int(bound) << widest) < (1 << 32) - 1)
    rounds = None if not right.size or int(right.min()) > 0 else right > 0
    zp = int(np.asarray(out_qp.zero_point).ravel()[0])
    half = (np.int64(1) << right) >> 1
    offset = half + (np.int64(zp) << right)
    narrow = False
    if fast and bound is not None and m.size:
        high = (((int(bound) << widest) * int(m.max()) + (1 << 30)) >> 31) + 1  # |SaturatingRoundingDoublingHighMul| at most
        narrow = high + int(np.abs(offset).max()) + 1 < 1 << 31
    return OutputStage(m, s, zp, int(out_qp.qmin), int(out_qp.qmax), wide, fast, left if widest else None, right, half,
                       offset, rounds, narrow, offset.astype(np.int32) if narrow else None, right.astype(np.int32) if narrow else None)


def fold_bias(stage: OutputStage, bias: np.ndarray, product_bound: int) -> np.ndarray | None:
    """For a fast stage without left shifts, the per-channel ``bias * mult + 2**30`` that
    :func:`apply_output_stage` adds after multiplying a bias-less accumulator ``p``: then
    ``p * m + (bias * m + 2**30) == (p + bias) * m + 2**30``, one pass instead of two, exact in
    int64 while ``|p|`` (at most ``product_bound``) and ``|bias|`` stay below 2**31. None otherwise."""
    b = np.asarray(bias, np.int64).reshape(stage.mult.shape)
    if not stage.fast or stage.left is not None or product_bound >= 1 << 31 or (b.size and int(np.abs(b).max()) >= 1 << 31):
        return None
    folded: np.ndarray = b * stage.mult + (1 << 30)
    return folded


def apply_output_stage(stage: OutputStage, acc: np.ndarray, out: np.ndarray, folded: np.ndarray | None = None) -> None:
    """Requantize the int64 accumulators ``acc`` (overwritten) into ``out`` (the output's
    integers: an array or a view of one, of ``acc``'s shape). ``folded``: :func:`fold_bias`'s
    vector, when ``acc`` does not hold the bias yet."""
    x = acc
    if stage.fast and stage.narrow:
        _output_int32(x, stage, 1 << 30 if folded is None else folded, out)
        return
    if stage.fast:
        _mbqm_fast(x, stage, 1 << 30 if folded is None else folded)  # the zero point added in its last rounding
    else:
        if stage.wide:
            _mbqm_int64_inplace(x, stage.mult, stage.shift)
        elif not _mbqm_inplace(x, stage.mult, stage.shift, None):
            x = multiply_by_quantized_multiplier(x, stage.mult, stage.shift)
        x += stage.zero_point
    np.clip(x, stage.qmin, stage.qmax, out=x)
    np.copyto(out, x, casting="unsafe")  # clamped to the output type's range: exact


def _output_int32(x: np.ndarray, stage: OutputStage, nudge: np.ndarray | int, out: np.ndarray) -> None:
    """``_mbqm_fast`` and the clamp, the steps after the high multiply in int32 (``stage.narrow``:
    every value fits; int32 ufuncs run about twice as fast as int64 ones)."""
    if stage.left is not None:
        x <<= stage.left
    x *= stage.mult
    x += nudge
    h = np.empty(x.shape, np.int32)
    np.right_shift(x, 31, out=h, casting="unsafe")  # SaturatingRoundingDoublingHighMul, narrowed: exact (stage.narrow)
    neg = h >> 31  # -1 where h < 0
    if stage.rounds is not None:
        neg *= stage.rounds
    h += neg
    assert stage.offset32 is not None and stage.right32 is not None
    h += stage.offset32
    h >>= stage.right32  # RoundingDivideByPOT, plus the zero point
    np.clip(h, stage.qmin, stage.qmax, out=h)
    np.copyto(out, h, casting="unsafe")


def _mbqm_int64_inplace(x: np.ndarray, multiplier: np.ndarray, shift: np.ndarray) -> None:
    """:func:`multiply_by_quantized_multiplier_int64` in place (the same operations, in order)."""
    multiplier = np.asarray(multiplier, np.int64)
    reduced = np.where(multiplier < 0x7FFF0000, (multiplier + (1 << 15)) >> 16, 0x7FFF)
    total_shift = 15 - np.asarray(shift, np.int64)
    x *= reduced
    x += np.int64(1) << (total_shift - 1)
    x >>= total_shift


def _mbqm_fast(x: np.ndarray, stage: OutputStage, nudge: np.ndarray | int, zero_point: bool = True) -> None:
    """``_mbqm_inplace``'s arithmetic with its conditions checked once (``stage.fast``), plus the
    output zero point with ``zero_point`` (``(t + half + zp * 2**e) >> e == ((t + half) >> e) + zp``)."""
    if stage.left is not None:
        x <<= stage.left
    x *= stage.mult
    x += nudge
    x >>= 31  # SaturatingRoundingDoublingHighMul
    neg = x >> 63  # -1 where x < 0
    if stage.rounds is not None:
        neg *= stage.rounds  # a zero exponent divides by 1: no rounding
    x += neg
    x += stage.offset if zero_point else stage.half
    x >>= stage.right  # RoundingDivideByPOT


def _mbqm_inplace(x: np.ndarray, multiplier: np.ndarray, shift: np.ndarray, bound: int | None) -> bool:
    """:func:`multiply_by_quantized_multiplier` in place with fewer passes, where it is provably the
    same function; False (``x`` untouched) where it is not, and the caller runs the original.

    With ``0 <= m < 2**31`` (every QuantizeMultiplier mantissa) and ``|a| < 2**32 - 1`` (``a``
    the left-shifted accumulator), ``a * m`` is exact in int64 and SaturatingRoundingDoublingHighMul's
    saturating case (``a == m == INT32_MIN``) cannot occur; its nudge-and-truncate
    ``trunc((a*m + (2**30 if a*m >= 0 else 1 - 2**30)) / 2**31)`` equals ``(a*m + 2**30) >> 31``
    for both signs (for a negative ``t``, ``trunc(t / 2**31) == (t + 2**31 - 1) >> 31``).
    RoundingDivideByPOT's ``(x >> e) + ((x & mask) > (mask >> 1) + (x < 0))`` equals
    ``(x + (2**e >> 1) - (x < 0 and e > 0)) >> e`` (the remainder test moved into the floor)."""
    if bound is None:
        bound = max(-int(x.min()), int(x.max())) if x.size else 0
    stage = output_stage(multiplier, shift, _ANY, False, np.shape(multiplier), bound)
    if not stage.fast:
        return False
    _mbqm_fast(x, stage, 1 << 30, zero_point=False)
    return True


def exact_in_float64(depth: int, a_max: int, b_max: int) -> bool:
    """Whether every dot product of ``depth`` terms with ``|a| <= a_max`` and ``|b| <= b_max``
    is exact in float64 (see :data:`FLOAT64_EXACT`). Python integers: no overflow in the test."""
    return depth * int(a_max) * int(b_max) < FLOAT64_EXACT


def centered_bound(dtype: Any, zero_point: int) -> int:
    """The largest ``|q - zero_point|`` over every value of the integer ``dtype`` (a bound that
    needs no pass over the data: int8 with any int8 zero point gives at most 255)."""
    info = np.iinfo(dtype)
    return max(int(info.max) - int(zero_point), int(zero_point) - int(info.min))


def is_spatial_mean(node: Node, ndim: int | None = None) -> bool:
    """The node is a mean over H and W of a 4-D image, kept as 1x1: ``global_avg_pool``,
    ``adaptive_avg_pool2d`` to (1, 1), or ``reduce_mean`` over axes (2, 3) with keepdims.

    These are TFLite's MEAN over NHWC axes (1, 2) with keep_dims, whose int8/int16 kernel
    requantizes to the output's parameters; a mean keeps far less range than its input, so the
    output's own (calibrated) scale is worth about 1% top-1 on a ResNet block."""
    if node.op == "global_avg_pool":
        return ndim in (None, 4)
    if node.op == "adaptive_avg_pool2d":
        return tuple(node.attrs["output_size"]) == (1, 1)
    if node.op == "reduce_mean" and bool(node.attrs.get("keepdims", True)) and ndim in (None, 4):
        axes = node.attrs.get("axes")
        return axes is not None and sorted(int(a) % 4 for a in axes) == [2, 3]
    return False


def passes_through(node: Node, in_shape: Sequence[int] | None) -> bool:
    """The node's output takes its input's parameters: pooling and reshapes, except a spatial
    mean over more than one element (a 1x1 input makes the mean an identity, which a backend
    may alias to its input)."""
    if node.op not in PASS_THROUGH:
        return False
    if is_spatial_mean(node):
        return in_shape is not None and len(in_shape) == 4 and tuple(in_shape[2:]) == (1, 1)
    return True


def integer_mean(xq: np.ndarray, in_qp: QuantParams, out_qp: QuantParams) -> np.ndarray:
    """TFLite's integer MEAN over H and W (LiteRT's reference kernel), NCHW in and 1x1 out.

    ``acc = sum(x - zp_in)`` in int32. ``(M, e) = QuantizeMultiplier(s_in / s_out)``; the count
    ``n`` is folded into the multiplier: ``k = min(floor(log2 n), 32, 31 + e)``,
    ``M' = (M << k) // n``; then ``MultiplyByQuantizedMultiplier(acc, M', e - k) + zp_out``,
    clamped. int16 takes the same int32 path. (Checked element for element against LiteRT's
    reference MEAN; dividing after the multiply instead differs by one step now and then.)"""
    n = int(xq.shape[2] * xq.shape[3])
    acc = (xq.astype(np.int64) - int(np.asarray(in_qp.zero_point).ravel()[0])).sum(axis=(2, 3), keepdims=True)
    real = np.float64(np.asarray(in_qp.scale, np.float32).ravel()[0]) / np.float64(np.asarray(out_qp.scale, np.float32).ravel()[0])
    mult, shift = quantize_multiplier(real)
    m, e = int(mult[0]), int(shift[0])
    k = min(n.bit_length() - 1, 32, 31 + e)
    out = multiply_by_quantized_multiplier(acc, np.int64((m << k) // n), np.int64(e - k)) + int(np.asarray(out_qp.zero_point).ravel()[0])
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
def softmax_output_params(bits: int) -> QuantParams:
    """TFLite's fixed softmax output parameters: the range is [0, 1] by definition, so int8 uses
    scale 1/256 with zero point -128 and int16 scale 1/32768 with zero point 0. Calibrated ranges
    would make the core's integer reference disagree with every TFLite-based backend."""
    qmin, qmax = int_range(bits)
    if bits == 16:
        return QuantParams(np.array([1.0 / 32768.0], np.float32), np.zeros(1, np.int64), 16, None, qmin, qmax)
    return QuantParams(np.array([1.0 / 256.0], np.float32), np.array([-128], np.int64), 8, None, qmin, qmax)


def fixed_output_params(op: str, bits: int) -> QuantParams | None:
    """TFLite's fixed output parameters for ops with a known output range, or None.

    softmax and sigmoid (LOGISTIC) map to [0, 1]: int8 scale 1/256, zero point -128; tanh to
    [-1, 1]: int8 scale 1/128, zero point 0; int16 uses 1/32768 with zero point 0 for all three.
    TFLite's kernels require these, so calibration writes them instead of observed ranges and a
    TFLite-based backend lowers the plan as it is."""
    if op not in ("softmax", "sigmoid", "tanh"):
        return None
    if op == "softmax" or op == "sigmoid":
        return softmax_output_params(bits)
    qmin, qmax = int_range(bits)
    scale = 1.0 / 32768.0 if bits == 16 else 1.0 / 128.0
    return QuantParams(np.array([scale], np.float32), np.zeros(1, np.int64), bits, None, qmin, qmax)


def check_plan(graph: Graph, plan: QuantizationPlan, *, float_inputs: bool = False) -> None:
    """Every value and quantized layer of ``graph`` has its parameters (a plan from another model fails here).

    ``float_inputs``: ``graph`` is a segment of a model, whose float inputs the plan may leave in
    float (a mixed-precision plan's residual stream entering a cpu:0 segment between two device
    segments): only those an integer kernel reads need parameters. A whole model's float inputs
    always do (the device's first layer reads integers)."""
    # Values the integer kernels read or write need parameters; other values (constants,
    # integer ids, bool masks, outputs of float-only ops) may run unquantized in between. A
    # linear / conv2d output may stay in float (FLOAT_OUTPUT_OPS); its input may not.
    integer = [n for n in graph.nodes if n.op in INTEGER_OPS]
    model_inputs = [] if float_inputs else [s.name for s in graph.inputs if s.dtype.startswith("float")]
    names: Sequence[str] = model_inputs + [v for n in integer for v in n.inputs] + [
        n.output for n in integer if n.op not in FLOAT_OUTPUT_OPS]
    if not plan.dynamic:
        missing = [v for v in names if v not in plan.activations]
        if missing:
            raise QuantizationError(f"the quantization plan has no parameters for value(s) {missing[:5]}; calibrate this model again")
    producers = {n.output: n for n in graph.nodes}
    layers = [n.name for n in graph.nodes if n.op == "linear" or (not plan.dynamic and (
        n.op == "conv2d" or constant_weight_axis(n, producers) is not None))]
    missing = [n for n in layers if n not in plan.weights]
    if missing:
        raise QuantizationError(f"the quantization plan has no weight parameters for layer(s) {missing[:5]}; calibrate this model again")


def restrict_plan(plan: QuantizationPlan, sub: Graph) -> QuantizationPlan:
    """The plan of a subgraph (a partition segment): the parameters of the values it reads or
    writes and the weights of its nodes, unchanged, so each segment quantizes its inputs exactly
    as the whole model's integer reference holds them."""
    values = {s.name for s in sub.inputs} | {n.output for n in sub.nodes}
    names = {n.name for n in sub.nodes}
    return replace(plan, activations={k: v for k, v in plan.activations.items() if k in values},
                   weights={k: v for k, v in plan.weights.items() if k in names})


def describe(qp: QuantParams) -> Mapping[str, Any]:
    return {"scale": np.asarray(qp.scale).tolist(), "zero_point": np.asarray(qp.zero_point).tolist(), "bits": qp.bits, "axis": qp.axis}
