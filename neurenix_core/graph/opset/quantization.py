"""Quantize, dequantize and integer-arithmetic ops (ONNX's quantization family).

These are plain ops with ONNX's semantics, computed on integers and floats by their NumPy
reference (cpu:0); they are unrelated to the quantization plans of ``nx.compile(quantize=...)``
(``graph/ir/qmath.py``). Scales and zero points are inputs, not params, because ONNX passes them as
tensors that a model may compute or feed. Rounding is ONNX's (half to even, ``np.rint``) and
every conversion to an integer type saturates to that type's range.

Besides the 8 and 16-bit integers, ONNX quantizes to the storage dtypes (``schema.STORAGE_DTYPES``):
int4 / uint4 / int2 / uint2 saturate like the other integers; float8 (e4m3fn, e4m3fnuz, e5m2,
e5m2fnuz) round to nearest even and, with ``saturate`` (the default), clip out-of-range values to
the type's largest finite value (Cast's rule, ``tensor.convert``); float4 e2m1 saturates on its
own. A float8 / float4 zero point must be zero: ONNX says the formula keeps it, while its reference
ignores it in some directions and rejects it in others, so a nonzero one is refused rather than
guessed. A scale may also be float8 e8m0 (a power of two, as microscaling formats store it);
it computes in float32.

Scale and zero point layouts (``_layout``): per tensor (a scalar or a one-element vector), per
axis (a vector as long as ``x.shape[axis]``) or blocked (``block_size`` > 0: the shape of ``x``
with ``ceil(x.shape[axis] / block_size)`` on ``axis``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from neurenix_core.graph.opset.math import _matmul_rule
from neurenix_core.graph.opset.schema import Arrays, Attrs, Params, Shape, _axis, _def, _is_float, _np_dtype, _numel
from neurenix_core.graph.opset.tensor import SATURATING_FLOAT8, convert

__all__ = ["QUANT_FLOATS", "QUANT_RANGES", "QUANT_TYPES", "SCALE_DTYPES", "conv_output_size"]

#: The integer types ONNX quantizes to, with their saturation bounds.
QUANT_RANGES: dict[str, tuple[int, int]] = {
    "int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767), "uint16": (0, 65535),
    "int4": (-8, 7), "uint4": (0, 15), "int2": (-2, 1), "uint2": (0, 3),
}
#: The float types ONNX quantizes to (storage dtypes: round to nearest even, no zero point).
QUANT_FLOATS: tuple[str, ...] = (*SATURATING_FLOAT8, "float4_e2m1fn")
#: Every type QuantizeLinear writes.
QUANT_TYPES: tuple[str, ...] = (*QUANT_RANGES, *QUANT_FLOATS)
#: What a scale may be: a float, or float8 e8m0 (a power of two).
SCALE_DTYPES: tuple[str, ...] = ("float32", "float16", "bfloat16", "float64", "float8_e8m0fnu")
#: What DequantizeLinear reads: the quantized types plus ONNX's int32 (accumulator) input.
_DEQUANT_INPUTS = frozenset(QUANT_TYPES) | {"int32"}
#: Where every "8-bit" op of the QLinear / *Integer family takes its operands from.
_INT8 = frozenset({"int8", "uint8"})


# ----------------------------------------------------------------------------- layouts
def _layout_check(what: str, p: Shape, x: Shape, axis: int, block: int) -> None:
    """Raises ValueError unless ``p`` (a scale's or zero point's shape) fits ``x`` as ONNX allows."""
    if block < 0:
        raise ValueError(f"block_size must be >= 0, got {block}")
    if _numel(p) == 1 and len(p) <= 1:
        return
    ax = _axis(axis, len(x))
    if not block:
        if len(p) != 1 or p[0] != x[ax]:
            raise ValueError(f"{what} of shape {p} is neither per tensor nor per axis {axis} of an input of shape {x}")
        return
    want = x[:ax] + (math.ceil(x[ax] / block),) + x[ax + 1:]
    if tuple(p) != want:
        raise ValueError(f"{what} of shape {p} does not block input {x} on axis {axis} by {block} (expected {want})")


def _layout(v: np.ndarray, x: Shape, axis: int, block: int) -> np.ndarray:
    """``v`` (scale or zero point) broadcastable against an ``x`` of shape ``x``."""
    if v.size == 1 and v.ndim <= 1:
        return v.reshape(())
    ax = _axis(axis, len(x))
    if not block:
        return v.reshape(tuple(v.size if i == ax else 1 for i in range(len(x))))
    return np.repeat(v, block, axis=ax).take(np.arange(x[ax]), axis=ax)


def _saturate(v: np.ndarray, dtype: str) -> np.ndarray:
    """Float values (already rounded) to ``dtype``, clipped to its range; NaN becomes 0."""
    lo, hi = QUANT_RANGES.get(dtype) or (np.iinfo(dtype).min, np.iinfo(dtype).max)
    return np.clip(np.nan_to_num(v, nan=0.0), lo, hi).astype(_np_dtype(dtype))


def _is_float_value(v: np.ndarray) -> bool:
    """Whether ``v`` holds floats: NumPy's, or a float storage type (ml_dtypes' float8 / float4
    are not NumPy kind "f" except e5m2; the float64 reference interpreter widens e5m2 to float64)."""
    return v.dtype.kind == "f" or str(v.dtype) in QUANT_FLOATS


def _zero_float_point(v: np.ndarray) -> None:
    """A float8 / float4 zero point must be zero (see the module's docstring)."""
    if np.any(v.astype(np.float32) != 0):
        raise ValueError("a float8 / float4 zero point must be zero (ONNX's formula and its reference disagree on any other)")


def _scale_work(scale: np.ndarray, precision: str | None) -> np.dtype:
    """The type a scale computes in: ``precision`` when given, float32 for e8m0 scales (a power
    of two, exact in float32), else the scale's own type."""
    if precision is not None:
        return _np_dtype(precision)
    return np.dtype(np.float32) if str(scale.dtype) == "float8_e8m0fnu" else scale.dtype


# ----------------------------------------------------------------------------- QuantizeLinear / DequantizeLinear
def _quantize_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    if d[0] not in SCALE_DTYPES[:4] + ("int32",) or d[1] not in SCALE_DTYPES:
        raise ValueError(f"quantizes a float or int32 x with a float (or e8m0) scale, got x {d[0]} and scale {d[1]}")
    if a["dtype"] not in QUANT_TYPES:
        raise ValueError(f"quantizes to {', '.join(QUANT_TYPES)}, not {a['dtype']}")
    for what, shape in zip(("scale", "zero point"), s[1:]):
        _layout_check(what, shape, s[0], a["axis"], a["block_size"])
    if len(d) > 2 and d[2] != a["dtype"]:
        raise ValueError(f"the zero point is {d[2]} but the output type is {a['dtype']}")
    return s[0], a["dtype"]


def _quantize_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    xs, scale = x[0], _layout(x[1], x[0].shape, a["axis"], a["block_size"])
    # ONNX: the division runs in the precision attribute's type, by default the scale's (a float16
    # scale divides in float16, as ONNX's reference does; ONNX Runtime divides in float32).
    work = _scale_work(scale, a["precision"])
    q = xs.astype(work) / scale.astype(work)
    if a["dtype"] in QUANT_FLOATS:
        if len(x) > 2:
            _zero_float_point(x[2])
        # One rounding, from the quotient in its work type to the float8 / float4 type.
        return convert(q, a["dtype"], bool(a["saturate"]))
    r = np.rint(q).astype(np.float64)
    if len(x) > 2:
        r = r + _layout(x[2], xs.shape, a["axis"], a["block_size"]).astype(np.float64)
    return _saturate(r, a["dtype"])


_def("quantize_linear", "quantization", "saturate(round_half_even(x / scale) + zero_point) to dtype (ONNX QuantizeLinear: "
     "per tensor, per axis or blocked scale and zero point; to float8 / float4 round to nearest even, float8 clipped to its "
     "finite range when saturate=1)", ("x", "scale", "zero_point?"), _quantize_rule, _quantize_ref,
     attrs={"axis": 1, "block_size": 0, "dtype": "uint8", "precision": None, "saturate": 1})


def _dequantize_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    if d[0] not in _DEQUANT_INPUTS or d[1] not in SCALE_DTYPES:
        raise ValueError(f"dequantizes {sorted(_DEQUANT_INPUTS)} with a float (or e8m0) scale, got x {d[0]} and scale {d[1]}")
    if len(d) > 2 and d[2] != d[0]:
        raise ValueError(f"the zero point is {d[2]} but x is {d[0]}")
    out = a["dtype"] or d[1]
    if out not in SCALE_DTYPES[:4]:
        raise ValueError(f"dequantizes to float32, float16, bfloat16 or float64, not {out} (an e8m0 scale needs output_dtype)")
    for what, shape in zip(("scale", "zero point"), s[1:]):
        _layout_check(what, shape, s[0], a["axis"], a["block_size"])
    return s[0], out


def _dequantize_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    shape = x[0].shape
    scale = _layout(x[1], shape, a["axis"], a["block_size"])
    if _is_float_value(x[0]):  # float8 / float4: exact in float32
        if len(x) > 2:
            _zero_float_point(x[2])
        q = x[0].astype(np.float32)
    else:
        q = x[0].astype(np.int64)  # x - zero_point exactly, even for int32 (ONNX's reference goes through float32)
        if len(x) > 2:
            q = q - _layout(x[2], shape, a["axis"], a["block_size"]).astype(np.int64)
    work = np.float64 if scale.dtype == np.float64 else np.float32  # float16 / bfloat16 / e8m0 scales multiply in float32
    out = _np_dtype(a["dtype"]) if a["dtype"] else scale.dtype
    return (q.astype(work) * scale.astype(work)).astype(out)


_def("dequantize_linear", "quantization", "(x - zero_point) * scale in the scale's float type (ONNX DequantizeLinear: per tensor, "
     "per axis or blocked)", ("x", "scale", "zero_point?"), _dequantize_rule, _dequantize_ref,
     attrs={"axis": 1, "block_size": 0, "dtype": None})


# ----------------------------------------------------------------------------- DynamicQuantizeLinear
_DYNAMIC_OUTPUTS = ("y", "y_scale", "y_zero_point")


def _dynamic_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    if d[0] != "float32":
        raise ValueError(f"quantizes a float32 input, got {d[0]}")
    if a["output"] not in range(3):
        raise ValueError(f"output selects one of {_DYNAMIC_OUTPUTS} (0, 1, 2), got {a['output']}")
    return ((s[0], "uint8"), ((), "float32"), ((), "uint8"))[a["output"]]


def _dynamic_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    xs = x[0].astype(np.float32)
    hi = np.float32(max(0.0, float(np.max(xs, initial=0.0))))  # the range always holds 0, so 0 quantizes exactly
    lo = np.float32(min(0.0, float(np.min(xs, initial=0.0))))
    scale = np.float32((hi - lo) if hi != lo else 1.0) / np.float32(255)
    zero = np.rint(np.clip(np.float32(0) - lo / scale, 0, 255))
    if a["output"] == 1:
        return np.asarray(scale, np.float32)
    if a["output"] == 2:
        return np.asarray(zero, np.uint8)
    return _saturate(np.rint(xs / scale).astype(np.float64) + zero, "uint8")


_def("dynamic_quantize_linear", "quantization", "uint8 quantization of x with a scale and zero point from its range "
     "(ONNX DynamicQuantizeLinear; output 0 y, 1 y_scale, 2 y_zero_point: one node per output)", ("x",),
     _dynamic_rule, _dynamic_ref, attrs={"output": 0})


# ----------------------------------------------------------------------------- integer matmul
def _int8_operands(d: Sequence[str], names: Sequence[str]) -> None:
    for dtype, name in zip(d, names):
        if dtype not in _INT8:
            raise ValueError(f"{name} must be int8 or uint8, got {dtype}")


def _per_row_or_tensor(what: str, p: Shape, rows: int) -> None:
    if not (_numel(p) == 1 and len(p) <= 1) and tuple(p) != (rows,):
        raise ValueError(f"{what} of shape {p} is neither per tensor nor a vector of {rows}")


def _centered(v: np.ndarray, zero: np.ndarray | None, view: Shape) -> np.ndarray:
    """``v - zero`` in int64 (exact); a vector zero point is laid out as ``view``."""
    out = v.astype(np.int64)
    if zero is None:
        return out
    z = zero.astype(np.int64)
    return out - (z.reshape(()) if z.size == 1 else z.reshape(view))


def _matmul_integer_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    _int8_operands(d, ("a", "b", "a_zero_point", "b_zero_point"))
    if len(d) > 2 and d[2] != d[0] or len(d) > 3 and d[3] != d[1]:
        raise ValueError(f"the zero points ({d[2:]}) must have the types of a and b ({d[:2]})")
    out, _ = _matmul_rule(a, s[:2], d[:2], p)
    if len(s) > 2:
        _per_row_or_tensor("a_zero_point", s[2], s[0][-2] if len(s[0]) > 1 else 1)
    if len(s) > 3:
        _per_row_or_tensor("b_zero_point", s[3], s[1][-1] if len(s[1]) > 1 else 1)
    return out, "int32"


def _matmul_integer_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    lhs = _centered(x[0], x[2] if len(x) > 2 else None, (-1, 1))  # per row of a
    rhs = _centered(x[1], x[3] if len(x) > 3 else None, (-1,))  # per column of b
    return np.matmul(lhs, rhs).astype(np.int32)


_def("matmul_integer", "quantization", "(a - a_zero_point) @ (b - b_zero_point) of int8/uint8 operands, exact, as int32 "
     "(ONNX MatMulInteger)", ("a", "b", "a_zero_point?", "b_zero_point?"), _matmul_integer_rule, _matmul_integer_ref)


_QLINEAR_MATMUL_INPUTS = ("a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "y_scale", "y_zero_point")


def _qlinear_matmul_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    _int8_operands([d[0], d[2], d[3], d[5], d[7]], [_QLINEAR_MATMUL_INPUTS[i] for i in (0, 2, 3, 5, 7)])
    if not all(_is_float(d[i]) for i in (1, 4, 6)):
        raise ValueError(f"the scales must be float, got {[d[i] for i in (1, 4, 6)]}")
    if d[2] != d[0] or d[5] != d[3]:
        raise ValueError("each zero point must have its operand's type")
    out, _ = _matmul_rule(a, [s[0], s[3]], [d[0], d[3]], p)
    rows, cols = (s[0][-2] if len(s[0]) > 1 else 1), (s[3][-1] if len(s[3]) > 1 else 1)
    for i, n in ((1, rows), (2, rows), (4, cols), (5, cols), (6, cols), (7, cols)):
        _per_row_or_tensor(_QLINEAR_MATMUL_INPUTS[i], s[i], n)
    return out, d[7]


def _requantize(acc: np.ndarray, multiplier: np.ndarray, zero: np.ndarray, dtype: str) -> np.ndarray:
    """An int accumulator times a float multiplier, plus the output zero point, rounded half to even
    and saturated: the output stage of QLinearMatMul and QLinearConv (in float64, as ONNX's
    reference promotes the int32 accumulator)."""
    return _saturate(np.rint(acc.astype(np.float64) * multiplier.astype(np.float64) + zero.astype(np.float64)), dtype)


def _vector(v: np.ndarray, view: Shape) -> np.ndarray:
    return v.reshape(()) if v.size == 1 else v.reshape(view)


def _qlinear_matmul_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    acc = np.matmul(_centered(x[0], x[2], (-1, 1)), _centered(x[3], x[5], (-1,)))
    # The multiplier in the scales' own float type (float16 scales round there, as ONNX's reference does).
    multiplier = _vector(x[1], (-1, 1)) * _vector(x[4], (-1,)) / _vector(x[6], (-1,))
    return _requantize(acc, multiplier, _vector(x[7], (-1,)), str(x[7].dtype))


_def("qlinear_matmul", "quantization", "quantized matmul: requantize((a - a_zp) @ (b - b_zp) * a_scale * b_scale / y_scale) "
     "+ y_zp, per tensor or per row of a / per column of b (ONNX QLinearMatMul)", _QLINEAR_MATMUL_INPUTS,
     _qlinear_matmul_rule, _qlinear_matmul_ref, flops=lambda a, s, o, p: 2 * _numel(o) * s[0][-1])


# ----------------------------------------------------------------------------- integer convolution
def conv_output_size(size: int, kernel: int, stride: int, dilation: int, begin: int, end: int) -> int:
    """ONNX Conv's output length of one spatial axis (explicit pads)."""
    return (size + begin + end - dilation * (kernel - 1) - 1) // stride + 1


def _conv_shape(a: Attrs, x: Shape, w: Shape) -> Shape:
    nd = len(x) - 2
    if nd < 1 or len(w) != len(x):
        raise ValueError(f"convolves an N,C,spatial... input with an M,C/group,kernel... weight, got {x} and {w}")
    group = a["group"]
    if group < 1 or x[1] != w[1] * group or w[0] % group:
        raise ValueError(f"input channels {x[1]} and weight {w} do not fit group={group}")
    strides, dil, pads = tuple(a["strides"] or (1,) * nd), tuple(a["dilations"] or (1,) * nd), tuple(a["pads"] or (0,) * 2 * nd)
    if len(strides) != nd or len(dil) != nd or len(pads) != 2 * nd:
        raise ValueError(f"strides {strides}, dilations {dil} and pads {pads} do not fit a {nd}-D convolution")
    out = tuple(conv_output_size(x[2 + i], w[2 + i], strides[i], dil[i], pads[i], pads[nd + i]) for i in range(nd))
    if min(out) < 1:
        raise ValueError(f"leaves no output: input {x[2:]}, kernel {w[2:]}, pads {pads}")
    return (x[0], w[0]) + out


def _int_conv(a: Attrs, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Exact int64 N-D cross-correlation (x and w already centred on their zero points, so zero
    padding is padding with the zero point, as ONNX specifies): im2col and one float64 GEMM per
    group, exact while every dot product's ``depth * max|x| * max|w|`` stays below 2**53 (each
    partial sum is an integer below that: always, for 8-bit operands); else the int64 loop over
    kernel taps (``_int_conv_taps``)."""
    nd = x.ndim - 2
    out_shape = _conv_shape(a, x.shape, w.shape)
    depth = int(np.prod(w.shape[1:]))
    if depth * _magnitude(x) * _magnitude(w) >= _FLOAT64_EXACT:
        return _int_conv_taps(a, x, w)
    strides, dil = tuple(a["strides"] or (1,) * nd), tuple(a["dilations"] or (1,) * nd)
    pads = tuple(a["pads"] or (0,) * 2 * nd)
    kernel, g = w.shape[2:], a["group"]
    n, cg, mg = x.shape[0], w.shape[1], w.shape[0] // g
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [(pads[i], pads[nd + i]) for i in range(nd)])
    spans = tuple(dil[i] * (kernel[i] - 1) + 1 for i in range(nd))
    win = np.lib.stride_tricks.sliding_window_view(xp, spans, axis=tuple(range(2, 2 + nd)))  # n, C, positions..., span...
    win = win[(slice(None), slice(None)) + tuple(slice(None, (out_shape[2 + i] - 1) * strides[i] + 1, strides[i]) for i in range(nd))
              + tuple(slice(None, None, d) for d in dil)]  # n, C, out..., kernel...
    order = (0, 1, 2) + tuple(range(3 + nd, 3 + 2 * nd)) + tuple(range(3, 3 + nd))
    cols = win.reshape((n, g, cg) + win.shape[2:]).transpose(order).reshape(n, g, depth, -1)  # im2col: (c, kernel...) rows
    out = np.matmul(w.reshape(g, mg, depth).astype(np.float64), cols)  # n, g, mg, out pixels
    return out.astype(np.int64).reshape(out_shape)


#: Integers below this magnitude, and sums of them that stay below it, are exact in float64.
_FLOAT64_EXACT = 2**53


def _magnitude(v: np.ndarray) -> int:
    """max |v| of an integer array, as a Python int (no int64 overflow at its minimum)."""
    return max(-int(v.min()), int(v.max())) if v.size else 0


def _int_conv_taps(a: Attrs, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``_int_conv`` as int64 einsums, one per kernel tap (for values beyond float64's exact range)."""
    nd = x.ndim - 2
    strides, dil = tuple(a["strides"] or (1,) * nd), tuple(a["dilations"] or (1,) * nd)
    pads = tuple(a["pads"] or (0,) * 2 * nd)
    out_shape = _conv_shape(a, x.shape, w.shape)
    xp = np.pad(x, [(0, 0), (0, 0)] + [(pads[i], pads[nd + i]) for i in range(nd)])
    g = a["group"]
    n, cg, mg = x.shape[0], w.shape[1], w.shape[0] // g
    xg = xp.reshape((n, g, cg) + xp.shape[2:])
    wg = w.reshape((g, mg, cg) + w.shape[2:])
    out = np.zeros((n, g, mg) + out_shape[2:], np.int64)
    for k in np.ndindex(*w.shape[2:]):
        window = tuple(slice(k[i] * dil[i], k[i] * dil[i] + (out_shape[2 + i] - 1) * strides[i] + 1, strides[i]) for i in range(nd))
        patch = xg[(slice(None), slice(None), slice(None)) + window]  # n, g, cg, out...
        out += np.einsum("ngc...,gmc->ngm...", patch, wg[(slice(None), slice(None), slice(None)) + k])
    return out.reshape(out_shape)


_CONV_ATTRS = {"strides": None, "pads": None, "dilations": None, "group": 1}


def _conv_integer_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    _int8_operands(d, ("x", "w", "x_zero_point", "w_zero_point"))
    out = _conv_shape(a, s[0], s[1])
    if len(s) > 2:
        _per_row_or_tensor("x_zero_point", s[2], 1)
    if len(s) > 3:
        _per_row_or_tensor("w_zero_point", s[3], s[1][0])
    return out, "int32"


def _weight_view(w: Shape) -> Shape:
    return (-1,) + (1,) * (len(w) - 1)


def _conv_integer_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    xs = _centered(x[0], x[2] if len(x) > 2 else None, ())
    ws = _centered(x[1], x[3] if len(x) > 3 else None, _weight_view(x[1].shape))
    return _int_conv(a, xs, ws).astype(np.int32)


_def("conv_integer", "quantization", "N-D convolution of int8/uint8 (x - x_zero_point) and (w - w_zero_point, per output channel), "
     "exact, as int32 (ONNX ConvInteger; explicit pads: begins then ends)", ("x", "w", "x_zero_point?", "w_zero_point?"),
     _conv_integer_rule, _conv_integer_ref, attrs=_CONV_ATTRS,
     flops=lambda a, s, o, p: 2 * _numel(o) * _numel(s[1][1:]))


_QLINEAR_CONV_INPUTS = ("x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point", "y_scale", "y_zero_point", "bias?")


def _qlinear_conv_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    _int8_operands([d[0], d[2], d[3], d[5], d[7]], [_QLINEAR_CONV_INPUTS[i] for i in (0, 2, 3, 5, 7)])
    if not all(_is_float(d[i]) for i in (1, 4, 6)):
        raise ValueError(f"the scales must be float, got {[d[i] for i in (1, 4, 6)]}")
    out = _conv_shape(a, s[0], s[3])
    for i, n in ((1, 1), (2, 1), (4, s[3][0]), (5, s[3][0]), (6, 1), (7, 1)):
        _per_row_or_tensor(_QLINEAR_CONV_INPUTS[i], s[i], n)
    if len(s) > 8 and (d[8] != "int32" or tuple(s[8]) != (s[3][0],)):
        raise ValueError(f"the bias must be an int32 vector of {s[3][0]}, got {d[8]} {s[8]}")
    return out, d[7]


def _qlinear_conv_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    acc = _int_conv(a, _centered(x[0], x[2], ()), _centered(x[3], x[5], _weight_view(x[3].shape)))
    channel = (1, -1) + (1,) * (acc.ndim - 2)
    if len(x) > 8:
        acc = acc + x[8].astype(np.int64).reshape(channel)
    multiplier = x[1].reshape(()) * _vector(x[4], channel) / x[6].reshape(())
    return _requantize(acc, multiplier, x[7].reshape(()), str(x[7].dtype))


_def("qlinear_conv", "quantization", "quantized N-D convolution: requantize(conv(x - x_zp, w - w_zp) + bias) * x_scale * w_scale / "
     "y_scale + y_zp, w per tensor or per output channel (ONNX QLinearConv)", _QLINEAR_CONV_INPUTS,
     _qlinear_conv_rule, _qlinear_conv_ref, attrs=_CONV_ATTRS, flops=lambda a, s, o, p: 2 * _numel(o) * _numel(s[3][1:]))
