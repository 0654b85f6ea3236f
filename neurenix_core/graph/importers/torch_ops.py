"""ATen -> opset mappings beyond the core set of ``torch_export`` (PyTorch is not imported here).

``torch_export`` merges :data:`HANDLERS` over its own table (an entry here replaces one there).
A handler is ``handler(ctx, fx_node, args, kwargs)`` with the arguments already resolved to graph
values (names), :class:`Const` or Python values; ``ctx`` is ``torch_export``'s context (``ctx.b``
the GraphBuilder, ``ctx.name``, ``ctx.sym_shape``, ``ctx.meta``, ``ctx.tensor_value``, ``ctx.fail``).
Arguments arrive positionally as the exported graph writes them, keyword-only ones in kwargs.

The ops map onto the opset one to one where it has the op (cumsum, topk, one_hot, scatter_elements,
resize, grid_sample, group_norm, the N-d pools and convolutions ...), else decompose into opset ops
(roll into slices, adaptive pools of any rank into the 2-D ones, var/std, atan2, pixel_shuffle ...).
Torch semantics are kept where they differ from ONNX's (floor and true division of integers,
torch's per-plane max-pool indices, the scale a resize maps coordinates with).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Final

import numpy as np

from neurenix_core.graph.importers.builder import Const, Value
from neurenix_core.graph.ir.symbolic import NotSymbolicError, SymDim

__all__ = ["HANDLERS", "Unavailable", "batch_norm_nd", "conv_nd", "conv_transpose_nd", "size_value", "unbatched"]

Handler = Callable[[Any, Any, list[Any], dict[str, Any]], Any]
_BIG: Final = 2**62


class Unavailable:
    """An output torch.export lists that the import does not compute (max-pool indices of an
    adaptive pool ...): harmless unless a later node reads it, which is then refused by name."""

    def __init__(self, why: str) -> None:
        self.why = why


# ----------------------------------------------------------------------------- helpers
def _arg(a: list[Any], k: dict[str, Any], i: int, name: str, default: Any = None) -> Any:
    """Argument ``i`` (positional) or ``name`` (keyword), else ``default``; None means default too."""
    v = a[i] if len(a) > i else k.get(name, default)
    return default if v is None else v


def _rank(c: Any, v: Value) -> int:
    return len(c.b.spec(v).shape)


def _dtype(c: Any, v: Value) -> str:
    return str(c.b.spec(v).dtype)


def _is_float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))


def _out_dtype(c: Any, n: Any) -> str:
    """The node's result dtype (of its first result, for ops with several)."""
    val = n.meta["val"]
    val = val[0] if isinstance(val, (list, tuple)) else val
    return str(val.dtype).replace("torch.", "")


def _scalar(value: float | bool, dtype: str) -> Const:
    return Const(np.asarray(value, np.dtype(dtype) if dtype != "bfloat16" else np.float32))


def size_value(c: Any, n: Any, size: SymDim, dtype: str, tag: str) -> Value:
    """A size computed from the input dimensions (a SymInt operand: the past length of a KV
    cache added to positions) as a 0-d tensor of ``dtype``: the sum of that many ones, which
    ``nx.compile`` folds to a constant once the input shapes are known."""
    ones = _emit(c, n, f"{tag}.ones", "expand", [Const(np.ones((1,), np.int64))], {"shape": (size,)})
    total = _emit(c, n, f"{tag}.size", "reduce_sum", [ones], {"axes": (0,), "keepdims": False})
    return c.b.cast_to(f"{c.name(n)}.{tag}.size", total, dtype)


def _as(c: Any, n: Any, v: Any, dtype: str, tag: str) -> Value:
    """``v`` (a value, a Python scalar or a symbolic size) as ``dtype``: torch computes in the result dtype."""
    if isinstance(v, (str, Const)):
        return c.b.cast_to(f"{c.name(n)}.{tag}", v, dtype)
    if isinstance(v, SymDim):
        return size_value(c, n, v, dtype, tag)
    return _scalar(v, dtype)


def _emit(c: Any, n: Any, tag: str, op: str, inputs: Sequence[Value], attrs: dict[str, Any] | None = None,
          params: dict[str, Any] | None = None) -> Value:
    """A node named after the fx node (``tag`` '' for the node's own result)."""
    return c.b.emit(c.name(n) + (f".{tag}" if tag else ""), op, list(inputs), attrs or {}, params or {})


def _used(n: Any, i: int) -> bool:
    """Whether a later node reads result ``i`` of a node with several results (through getitem)."""
    return any(u.target is operator.getitem and int(u.args[1]) == i for u in n.users)


def _result(n: Any, i: int, make: Callable[[], Value]) -> Value | Unavailable:
    """Result ``i``, built only where it is read: an unread one adds no node (no dead op to place)."""
    return make() if _used(n, i) else Unavailable(f"result {i}, which nothing should read")


def _axis(v: int, ndim: int) -> int:
    return int(v) % ndim if ndim else 0


def _dims(v: Any) -> tuple[int, ...] | None:
    """A dim argument (int, list or None/[] for all axes) as a tuple, or None for all axes."""
    if v is None or (isinstance(v, (list, tuple)) and len(v) == 0):
        return None
    return tuple(int(d) for d in v) if isinstance(v, (list, tuple)) else (int(v),)


def _static(c: Any, n: Any, shape: Sequence[int | SymDim], axis: int, what: str) -> int:
    size = shape[axis]
    if isinstance(size, SymDim):
        raise NotSymbolicError(f"node {c.name(n)!r} {what} along dynamic axis {axis}")
    return int(size)


def _input_shape(c: Any, n: Any, i: int = 0) -> tuple[int | SymDim, ...]:
    return tuple(c.sym_shape(n.args[i]))


def _tuple(v: Any, nd: int, default: int) -> tuple[int, ...]:
    """An int or 1- or nd-long list as nd ints (PyTorch broadcasts a single value)."""
    if v is None or (isinstance(v, (list, tuple)) and len(v) == 0):
        return (default,) * nd
    if isinstance(v, (list, tuple)):
        return tuple(int(i) for i in v) * (nd if len(v) == 1 else 1)
    return (int(v),) * nd


# ----------------------------------------------------------------------------- elementwise
def _unary(op: str, **attrs: Any) -> Handler:
    return lambda c, n, a, k: _emit(c, n, "", op, [a[0]], dict(attrs))


def _in_float(c: Any, n: Any, x: Value) -> Value:
    """``x`` in the node's (float) result dtype: torch computes integer inputs of float ops in it."""
    dtype = _out_dtype(c, n)
    return _as(c, n, x, dtype, "in") if _is_float(dtype) else x


def _float_unary(op: str) -> Handler:
    return lambda c, n, a, k: _emit(c, n, "", op, [_in_float(c, n, a[0])])


def _elu(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    alpha, scale, in_scale = float(_arg(a, k, 1, "alpha", 1.0)), float(_arg(a, k, 2, "scale", 1.0)), float(_arg(a, k, 3, "input_scale", 1.0))
    x, dtype = a[0], _dtype(c, a[0])
    if in_scale != 1.0:
        x = _emit(c, n, "in_scale", "mul", [x, _scalar(in_scale, dtype)])
    out = _emit(c, n, "" if scale == 1.0 else "elu", "elu", [x], {"alpha": alpha})
    return out if scale == 1.0 else _emit(c, n, "", "mul", [out, _scalar(scale, dtype)])


def _softplus(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """softplus(beta * x) / beta, and x itself where beta * x > threshold (torch's linear region)."""
    x, dtype = a[0], _dtype(c, a[0])
    beta, threshold = float(_arg(a, k, 1, "beta", 1.0)), float(_arg(a, k, 2, "threshold", 20.0))
    bx = x if beta == 1.0 else _emit(c, n, "beta", "mul", [x, _scalar(beta, dtype)])
    sp = _emit(c, n, "softplus", "softplus", [bx])
    if beta != 1.0:
        sp = _emit(c, n, "unbeta", "div", [sp, _scalar(beta, dtype)])
    linear = _emit(c, n, "linear", "greater", [bx, _scalar(threshold, dtype)])
    return _emit(c, n, "", "where", [linear, x, sp])


def _log_sigmoid(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    neg = _emit(c, n, "neg", "neg", [a[0]])
    return _emit(c, n, "", "neg", [_emit(c, n, "softplus", "softplus", [neg])])


def _prelu(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """torch's weight is per channel (axis 1): shaped (C, 1, ...) to broadcast as ONNX PRelu does."""
    x, w = a[0], a[1]
    rank, wshape = _rank(c, x), c.b.spec(w).shape
    if rank >= 2 and len(wshape) == 1 and wshape[0] > 1:
        target = (wshape[0],) + (1,) * (rank - 2)
        w = Const(w.array.reshape(target)) if isinstance(w, Const) else c.b.reshape(c.name(n) + ".slope", w, target)
    return _emit(c, n, "", "prelu", [x, w])


def _threshold(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    x, dtype = a[0], _dtype(c, a[0])
    keep = _emit(c, n, "keep", "greater", [x, _scalar(float(a[1]), dtype)])
    return _emit(c, n, "", "where", [keep, x, _scalar(float(a[2]), dtype)])


def _glu(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    x = a[0]
    dim = _axis(int(_arg(a, k, 1, "dim", -1)), _rank(c, x))
    half = _static(c, n, _input_shape(c, n), dim, "splits in halves") // 2
    first = _emit(c, n, "a", "split", [x], {"axis": dim, "sizes": (half, half), "index": 0})
    second = _emit(c, n, "b", "split", [x], {"axis": dim, "sizes": (half, half), "index": 1})
    return _emit(c, n, "", "mul", [first, _emit(c, n, "gate", "sigmoid", [second])])


def _round(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    decimals = int(_arg(a, k, 1, "decimals", 0))
    if decimals == 0:
        return _emit(c, n, "", "round", [a[0]])
    scale = _scalar(10.0 ** decimals, _dtype(c, a[0]))
    up = _emit(c, n, "up", "mul", [a[0], scale])
    return _emit(c, n, "", "div", [_emit(c, n, "round", "round", [up]), scale])


def _trunc_value(c: Any, n: Any, x: Value, tag: str) -> Value:
    """Rounding toward zero: sign(x) * floor(|x|)."""
    mag = _emit(c, n, f"{tag}.floor", "floor", [_emit(c, n, f"{tag}.abs", "abs", [x])])
    return _emit(c, n, tag, "mul", [_emit(c, n, f"{tag}.sign", "sign", [x]), mag])


def _trunc(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    return a[0] if not _is_float(_dtype(c, a[0])) else _trunc_value(c, n, a[0], "")


def _frac(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    return _emit(c, n, "", "sub", [a[0], _trunc_value(c, n, a[0], "trunc")])


def _binary_in(op: str, **attrs: Any) -> Handler:
    """A binary op computed in the node's result dtype (torch's type promotion)."""

    def run(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
        dtype = _out_dtype(c, n)
        return _emit(c, n, "", op, [_as(c, n, a[0], dtype, "a"), _as(c, n, a[1], dtype, "b")], dict(attrs))

    return run


def _div(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """True division in the result dtype (int / int is float in torch); 'trunc' and 'floor'
    round the quotient, exactly for integers (the opset's integer div truncates, as C does)."""
    mode = k.get("rounding_mode", a[2] if len(a) > 2 else None)
    dtype = _out_dtype(c, n)
    x, y = _as(c, n, a[0], dtype, "a"), _as(c, n, a[1], dtype, "b")
    if mode is None or (mode == "trunc" and not _is_float(dtype)):
        return _emit(c, n, "", "div", [x, y])
    if mode == "trunc":
        return _trunc_value(c, n, _emit(c, n, "q", "div", [x, y]), "")
    if mode != "floor":
        raise c.fail(n, f"uses rounding_mode={mode!r}")
    return _floor_div(c, n, x, y, dtype)


def _floor_div(c: Any, n: Any, x: Value, y: Value, dtype: str) -> Value:
    if _is_float(dtype):
        return _emit(c, n, "", "floor", [_emit(c, n, "q", "div", [x, y])])
    # (x - x mod y) is a multiple of y, so the truncating division is exact: floor division.
    rem = _emit(c, n, "mod", "mod", [x, y], {"fmod": False})
    return _emit(c, n, "", "div", [_emit(c, n, "sub", "sub", [x, rem]), y])


def _floor_divide(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    dtype = _out_dtype(c, n)
    return _floor_div(c, n, _as(c, n, a[0], dtype, "a"), _as(c, n, a[1], dtype, "b"), dtype)


def _pow(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    dtype = _out_dtype(c, n)
    if not isinstance(a[1], (str, Const)) and float(a[1]) == 2.0:
        x = _as(c, n, a[0], dtype, "a")
        return _emit(c, n, "", "mul", [x, x])
    return _emit(c, n, "", "pow", [_as(c, n, a[0], dtype, "a"), _as(c, n, a[1], dtype, "b")])


def _hypot(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """sqrt(x*x + y*y), as PyTorch computes it in the input precision."""
    dtype = _out_dtype(c, n)
    x, y = _as(c, n, a[0], dtype, "x"), _as(c, n, a[1], dtype, "y")
    total = _emit(c, n, "sum", "add", [_emit(c, n, "xx", "mul", [x, x]), _emit(c, n, "yy", "mul", [y, y])])
    return _emit(c, n, "", "sqrt", [total])


def _atan2(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """atan(y / x) moved to the right quadrant: +-pi for x < 0, +-pi/2 on the y axis."""
    dtype = _out_dtype(c, n)
    y, x = _as(c, n, a[0], dtype, "y"), _as(c, n, a[1], dtype, "x")
    zero, pi = _scalar(0.0, dtype), _scalar(math.pi, dtype)
    base = _emit(c, n, "atan", "atan", [_emit(c, n, "ratio", "div", [y, x])])
    y_up = _emit(c, n, "y_up", "greater_equal", [y, zero])
    shift = _emit(c, n, "shift", "where", [y_up, pi, _scalar(-math.pi, dtype)])
    left = _emit(c, n, "left", "add", [base, shift])
    axis = _emit(c, n, "axis", "mul", [_emit(c, n, "ysign", "sign", [y]), _scalar(math.pi / 2, dtype)])
    inner = _emit(c, n, "x_zero", "where", [_emit(c, n, "x_eq0", "equal", [x, zero]), axis, left])
    return _emit(c, n, "", "where", [_emit(c, n, "x_pos", "greater", [x, zero]), base, inner])


def _expm1(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    x = _in_float(c, n, a[0])
    return _emit(c, n, "", "sub", [_emit(c, n, "exp", "exp", [x]), _scalar(1.0, _dtype(c, x))])


def _log1p(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    x = _in_float(c, n, a[0])
    return _emit(c, n, "", "log", [_emit(c, n, "plus1", "add", [x, _scalar(1.0, _dtype(c, x))])])


def _log_base(base: float) -> Handler:
    def run(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
        x = _in_float(c, n, a[0])
        return _emit(c, n, "", "div", [_emit(c, n, "ln", "log", [x]), _scalar(math.log(base), _dtype(c, x))])

    return run


def _exp2(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    x = _in_float(c, n, a[0])
    return _emit(c, n, "", "exp", [_emit(c, n, "ln2", "mul", [x, _scalar(math.log(2.0), _dtype(c, x))])])


def _square(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    return _emit(c, n, "", "mul", [a[0], a[0]])


def _nan_to_num(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    x, dtype = a[0], _dtype(c, a[0])
    if not _is_float(dtype):
        return x
    info = np.finfo(np.dtype(dtype) if dtype != "bfloat16" else np.float32)
    nan, pos, neg = _arg(a, k, 1, "nan", 0.0), _arg(a, k, 2, "posinf", float(info.max)), _arg(a, k, 3, "neginf", float(info.min))
    out = _emit(c, n, "nan", "where", [_emit(c, n, "isnan", "isnan", [x]), _scalar(nan, dtype), x])
    is_pos = _emit(c, n, "isposinf", "isinf", [x], {"detect_positive": True, "detect_negative": False})
    out = _emit(c, n, "pos", "where", [is_pos, _scalar(pos, dtype), out])
    is_neg = _emit(c, n, "isneginf", "isinf", [x], {"detect_positive": False, "detect_negative": True})
    return _emit(c, n, "", "where", [is_neg, _scalar(neg, dtype), out])


_BITS: Final = {"float16": "int16", "bfloat16": "int16", "float32": "int32", "float64": "int64"}


def _bits(c: Any, n: Any, x: Value, tag: str) -> Value:
    """A float tensor's bits as the signed integer of its width (the sign bit is the integer's)."""
    return _emit(c, n, tag, "bitcast", [x], {"to": _BITS[_dtype(c, x)]})


def _signbit(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """The sign bit: set for -0.0 and for a NaN with its sign bit (x < 0 misses both), read
    from the float's bits; integers are x < 0, bool never."""
    x, dtype = a[0], _dtype(c, a[0])
    if dtype in _BITS:
        return _emit(c, n, "", "less", [_bits(c, n, x, "bits"), _scalar(0, _BITS[dtype])])
    if dtype == "bool":
        return _emit(c, n, "", "logical_and", [x, _emit(c, n, "not", "logical_not", [x])])
    return _emit(c, n, "", "less", [x, _scalar(0, dtype)])


def _nan_ignoring(op: str) -> Handler:
    """fmax / fmin: maximum / minimum where a NaN operand gives the other one (NaN only where
    both are NaN), in the promoted dtype."""

    def run(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
        dtype = _out_dtype(c, n)
        x, y = _as(c, n, a[0], dtype, "a"), _as(c, n, a[1], dtype, "b")
        if not _is_float(dtype):
            return _emit(c, n, "", op, [x, y])
        both = _emit(c, n, "both", op, [x, y])
        y_nan = _emit(c, n, "b_nan", "where", [_emit(c, n, "isnan_b", "isnan", [y]), x, both])
        return _emit(c, n, "", "where", [_emit(c, n, "isnan_a", "isnan", [x]), y, y_nan])

    return run


def _angle(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """The argument of a real number: pi below zero, else 0 (-0.0 included); NaN stays NaN."""
    x = _in_float(c, n, a[0])
    dtype = _dtype(c, x)
    if not _is_float(dtype):
        raise c.fail(n, f"takes a {dtype} input; angle of real tensors is computed in their float dtype")
    base = _emit(c, n, "base", "where", [_emit(c, n, "neg", "less", [x, _scalar(0.0, dtype)]), _scalar(math.pi, dtype),
                                         _scalar(0.0, dtype)])
    return _emit(c, n, "", "where", [_emit(c, n, "isnan", "isnan", [x]), x, base])


def _frexp(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> list[Any]:
    """x = mantissa * 2 ** exponent with 0.5 <= |mantissa| < 1 (int32 exponent); 0, inf and NaN
    give themselves and exponent 0, as C's frexp. Computed in float64, where every float32 is
    normal: e = floor(log2 |x|) + 1, x divided by 2 ** e in two exact halves (no overflow for
    float64's extremes), then one step of correction where log2 rounded across an integer."""
    dtype = _dtype(c, a[0])
    x = _as(c, n, a[0], "float64", "wide")
    f64 = partial(_scalar, dtype="float64")
    mag = _emit(c, n, "abs", "abs", [x])
    finite = _emit(c, n, "finite", "logical_not", [_emit(c, n, "special", "logical_or", [
        _emit(c, n, "isinf", "isinf", [x]), _emit(c, n, "isnan", "isnan", [x])])])
    ok = _emit(c, n, "ok", "logical_and", [finite, _emit(c, n, "nonzero", "not_equal", [mag, f64(0.0)])])
    safe = _emit(c, n, "safe", "where", [ok, mag, f64(1.0)])
    log2 = _emit(c, n, "log2", "div", [_emit(c, n, "ln", "log", [safe]), f64(math.log(2.0))])
    e = _emit(c, n, "e", "add", [_emit(c, n, "floor", "floor", [log2]), f64(1.0)])
    half = _emit(c, n, "e1", "floor", [_emit(c, n, "e_half", "mul", [e, f64(0.5)])])
    rest = _emit(c, n, "e2", "sub", [e, half])
    m = _emit(c, n, "m1", "div", [x, _emit(c, n, "p1", "pow", [f64(2.0), half])])
    m = _emit(c, n, "m2", "div", [m, _emit(c, n, "p2", "pow", [f64(2.0), rest])])
    for tag, test, factor, step in (("up", "greater_equal", 0.5, 1.0), ("down", "less", 2.0, -1.0)):
        off = _emit(c, n, f"{tag}.off", test, [_emit(c, n, f"{tag}.abs", "abs", [m]), f64(1.0 if tag == "up" else 0.5)])
        m = _emit(c, n, f"{tag}.m", "where", [off, _emit(c, n, f"{tag}.scaled", "mul", [m, f64(factor)]), m])
        e = _emit(c, n, f"{tag}.e", "where", [off, _emit(c, n, f"{tag}.step", "add", [e, f64(step)]), e])
    mantissa = _emit(c, n, "mantissa", "where", [ok, m, x])
    exponent = _emit(c, n, "exponent", "where", [ok, e, f64(0.0)])
    return [_result(n, 0, lambda: c.b.cast_to(c.name(n) + ".mantissa", mantissa, dtype)),
            _result(n, 1, lambda: c.b.cast_to(c.name(n) + ".exponent", exponent, "int32"))]


def _nextafter(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """The next float after x toward y, on the bits: one step up the integer away from zero
    (x and y - x of one sign) or toward it; from +-0 the smallest subnormal of y's sign; y
    itself where x == y; NaN where either is."""
    dtype = _out_dtype(c, n)
    x, y = _as(c, n, a[0], dtype, "x"), _as(c, n, a[1], dtype, "y")
    if dtype not in _BITS:
        raise c.fail(n, f"takes {dtype} inputs; nextafter is defined for floats")
    ints, zero = _BITS[dtype], _scalar(0.0, dtype)
    bits = _bits(c, n, x, "bits")
    away = _emit(c, n, "away", "equal", [_emit(c, n, "up", "greater", [y, x]), _emit(c, n, "pos", "greater", [x, zero])])
    step = _emit(c, n, "step", "where", [away, _scalar(1, ints), _scalar(-1, ints)])
    moved = _emit(c, n, "moved", "bitcast", [_emit(c, n, "next_bits", "add", [bits, step])], {"to": dtype})
    tiny = _emit(c, n, "tiny", "bitcast", [_scalar(1, ints)], {"to": dtype})
    from_zero = _emit(c, n, "signed_tiny", "where", [_emit(c, n, "y_pos", "greater", [y, zero]), tiny,
                                                     _emit(c, n, "neg_tiny", "neg", [tiny])])
    out = _emit(c, n, "nonzero", "where", [_emit(c, n, "x_zero", "equal", [x, zero]), from_zero, moved])
    out = _emit(c, n, "same", "where", [_emit(c, n, "eq", "equal", [x, y]), y, out])
    either = _emit(c, n, "either_nan", "logical_or", [_emit(c, n, "x_nan", "isnan", [x]), _emit(c, n, "y_nan", "isnan", [y])])
    return _emit(c, n, "", "where", [either, _scalar(math.nan, dtype), out])


def _to_bool(c: Any, n: Any, v: Any, tag: str) -> Value:
    """Nonzero as true (torch's logical ops take any dtype)."""
    if not isinstance(v, (str, Const)):
        return Const(np.asarray(bool(v)))
    if _dtype(c, v) == "bool":
        return v
    return _emit(c, n, tag, "not_equal", [v, _scalar(0, _dtype(c, v))])


def _logical(op: str) -> Handler:
    return lambda c, n, a, k: _emit(c, n, "", op, [_to_bool(c, n, a[0], "a"), _to_bool(c, n, a[1], "b")])


def _bitwise(int_op: str, bool_op: str) -> Handler:
    """torch's & | ^ are logical on bool tensors and bitwise on integers."""

    def run(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
        dtype = _out_dtype(c, n)
        op = bool_op if dtype == "bool" else int_op
        return _emit(c, n, "", op, [_as(c, n, a[0], dtype, "a"), _as(c, n, a[1], dtype, "b")])

    return run


def _bitwise_not(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    return _emit(c, n, "", "logical_not" if _dtype(c, a[0]) == "bool" else "bitwise_not", [a[0]])


def _shift(direction: str) -> Handler:
    def run(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
        dtype = _out_dtype(c, n)
        return _emit(c, n, "", "bit_shift", [_as(c, n, a[0], dtype, "a"), _as(c, n, a[1], dtype, "b")], {"direction": direction})

    return run


def _lerp(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    dtype = _out_dtype(c, n)
    x, end, w = _as(c, n, a[0], dtype, "x"), _as(c, n, a[1], dtype, "end"), _as(c, n, a[2], dtype, "w")
    step = _emit(c, n, "step", "mul", [w, _emit(c, n, "diff", "sub", [end, x])])
    return _emit(c, n, "", "add", [x, step])


def _addc(op: str) -> Handler:
    """addcmul / addcdiv: x + value * (t1 op t2)."""

    def run(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
        dtype = _out_dtype(c, n)
        value = _arg(a, k, 3, "value", 1)
        term = _emit(c, n, "term", op, [a[1], a[2]])
        if value != 1:
            term = _emit(c, n, "value", "mul", [term, _scalar(value, dtype)])
        return _emit(c, n, "", "add", [a[0], term])

    return run


def _baddbmm(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    dtype = _out_dtype(c, n)
    beta, alpha = _arg(a, k, 3, "beta", 1), _arg(a, k, 4, "alpha", 1)
    prod = _emit(c, n, "bmm", "matmul", [a[1], a[2]])
    if alpha != 1:
        prod = _emit(c, n, "alpha", "mul", [prod, _scalar(alpha, dtype)])
    if beta == 0:  # torch ignores the input entirely (nan and inf included)
        return prod
    base = a[0] if beta == 1 else _emit(c, n, "beta", "mul", [a[0], _scalar(beta, dtype)])
    return _emit(c, n, "", "add", [base, prod])


def _addbmm(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """beta * input + alpha * (the sum over the batch of batch1[i] @ batch2[i]); beta 0 ignores input."""
    dtype = _out_dtype(c, n)
    beta, alpha = _arg(a, k, 3, "beta", 1), _arg(a, k, 4, "alpha", 1)
    prods = _emit(c, n, "bmm", "matmul", [a[1], a[2]])
    total = _emit(c, n, "sum" if alpha != 1 or beta != 0 else "", "reduce_sum", [prods], {"axes": (0,), "keepdims": False})
    if alpha != 1:
        total = _emit(c, n, "alpha" if beta != 0 else "", "mul", [total, _scalar(alpha, dtype)])
    if beta == 0:
        return total
    base = a[0] if beta == 1 else _emit(c, n, "beta", "mul", [a[0], _scalar(beta, dtype)])
    return _emit(c, n, "", "add", [base, total])


def _minmax(reduce: str, arg: str, binary: str) -> Handler:
    """max/min: of two tensors (max.other), of all (max.default), or along a dim with the index."""

    def run(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Any:
        if len(a) > 1 and isinstance(a[1], (str, Const)):
            return _binary_in(binary)(c, n, a, k)
        if len(a) == 1 and "dim" not in k:
            return _emit(c, n, "", reduce, [a[0]], {"axes": None, "keepdims": False})
        dim, keep = int(_arg(a, k, 1, "dim")), bool(_arg(a, k, 2, "keepdim", False))
        return [_result(n, 0, lambda: _emit(c, n, "", reduce, [a[0]], {"axes": (dim,), "keepdims": keep})),
                _result(n, 1, lambda: _emit(c, n, "index", arg, [a[0]], {"axis": dim, "keepdims": keep}))]

    return run


def _arg_reduce(op: str) -> Handler:
    """argmax/argmin; dim None is over the flattened input."""

    def run(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
        dim, keep = _arg(a, k, 1, "dim"), bool(_arg(a, k, 2, "keepdim", False))
        if dim is not None and _rank(c, a[0]):
            return _emit(c, n, "", op, [a[0]], {"axis": int(dim), "keepdims": keep})
        if _rank(c, a[0]) == 0:  # dim 0 / -1 / None of a 0-d tensor: index 0, 0-d (keepdim or not)
            keep = False
        flat = c.b.reshape(c.name(n) + ".flat", a[0], (-1,))
        out = _emit(c, n, "" if not keep else "flat_index", op, [flat], {"axis": 0, "keepdims": False})
        return c.b.reshape(c.name(n), out, (1,) * _rank(c, a[0])) if keep else out

    return run


# ----------------------------------------------------------------------------- reductions
def _count(c: Any, n: Any, axes: tuple[int, ...] | None) -> int:
    shape = _input_shape(c, n)
    picked = range(len(shape)) if axes is None else [_axis(d, len(shape)) for d in axes]
    return int(np.prod([_static(c, n, shape, d, "divides by the length") for d in picked], dtype=np.int64))


def _moments(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> tuple[Value, Value, tuple[int, ...] | None, bool]:
    """(variance, mean) with torch's correction (unbiased=True is correction 1)."""
    x, dtype = _in_float(c, n, a[0]), _out_dtype(c, n)
    overload = getattr(n.target, "_overloadname", "")
    if overload == "correction" or "correction" in k:
        axes, keep = _dims(_arg(a, k, 1, "dim")), bool(k.get("keepdim", False))
        correction = k.get("correction")
        correction = 1.0 if correction is None else float(correction)
    elif overload == "default" and len(a) <= 2 and not isinstance(_arg(a, k, 1, "dim"), (list, tuple)):
        axes, keep, correction = None, False, 1.0 if bool(_arg(a, k, 1, "unbiased", True)) else 0.0
    else:
        axes, keep = _dims(_arg(a, k, 1, "dim")), bool(_arg(a, k, 3, "keepdim", False))
        correction = 1.0 if bool(_arg(a, k, 2, "unbiased", True)) else 0.0
    mean = _emit(c, n, "mean", "reduce_mean", [x], {"axes": axes, "keepdims": True})
    centred = _emit(c, n, "centred", "sub", [x, mean])
    total = _emit(c, n, "ss", "reduce_sum", [_emit(c, n, "sq", "mul", [centred, centred])], {"axes": axes, "keepdims": keep})
    count = _count(c, n, axes)
    var = _emit(c, n, "var", "div", [total, _scalar(max(count - correction, 0.0), dtype)])
    if not keep:
        mean = _emit(c, n, "mean.squeeze", "squeeze", [mean], {"axes": axes})
    return var, mean, axes, keep


def _var(std: bool, with_mean: bool) -> Handler:
    def run(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Any:
        var, mean, _, _ = _moments(c, n, a, k)
        out = _emit(c, n, "", "sqrt", [var]) if std else var
        return [out, _result(n, 1, lambda: mean)] if with_mean else out

    return run


def _vector_norm(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    x = _in_float(c, n, a[0])
    order, axes, keep = float(_arg(a, k, 1, "ord", 2)), _dims(_arg(a, k, 2, "dim")), bool(_arg(a, k, 3, "keepdim", False))
    attrs = {"axes": axes, "keepdims": keep}
    if order == 2:
        return _emit(c, n, "", "reduce_l2", [x], attrs)
    if order == 1:
        return _emit(c, n, "", "reduce_l1", [x], attrs)
    mag = _emit(c, n, "abs", "abs", [x])
    if math.isinf(order):
        return _emit(c, n, "", "reduce_max" if order > 0 else "reduce_min", [mag], attrs)
    dtype = _dtype(c, x)
    if order == 0:
        nonzero = c.b.cast_to(c.name(n) + ".nz", _emit(c, n, "ne", "not_equal", [x, _scalar(0.0, dtype)]), dtype)
        return _emit(c, n, "", "reduce_sum", [nonzero], attrs)
    powered = _emit(c, n, "pow", "pow", [mag, _scalar(order, dtype)])
    return _emit(c, n, "", "pow", [_emit(c, n, "sum", "reduce_sum", [powered], attrs), _scalar(1.0 / order, dtype)])


def _any_all(op: str) -> Handler:
    def run(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
        axes, keep = _dims(_arg(a, k, 1, "dim")), bool(_arg(a, k, 2, "keepdim", False))
        return _emit(c, n, "", op, [_to_bool(c, n, a[0], "bool")], {"axes": axes, "keepdims": keep})

    return run


def _logsumexp(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    axes, keep = _dims(_arg(a, k, 1, "dim")), bool(_arg(a, k, 2, "keepdim", False))
    return _emit(c, n, "", "reduce_log_sum_exp", [_in_float(c, n, a[0])], {"axes": axes, "keepdims": keep})


def _cosine_similarity(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """sum(x1 * x2) / sqrt(max(sum(x1^2) * sum(x2^2), eps^2)), torch's formula."""
    x1, x2 = a[0], a[1]
    dim, eps = int(_arg(a, k, 2, "dim", 1)), float(_arg(a, k, 3, "eps", 1e-8))
    dtype = _out_dtype(c, n)
    attrs = {"axes": (dim,), "keepdims": False}
    dot = _emit(c, n, "dot", "reduce_sum", [_emit(c, n, "prod", "mul", [x1, x2])], attrs)
    n1 = _emit(c, n, "n1", "reduce_sum", [_emit(c, n, "sq1", "mul", [x1, x1])], attrs)
    n2 = _emit(c, n, "n2", "reduce_sum", [_emit(c, n, "sq2", "mul", [x2, x2])], attrs)
    denom = _emit(c, n, "clamp", "maximum", [_emit(c, n, "n12", "mul", [n1, n2]), _scalar(eps * eps, dtype)])
    return _emit(c, n, "", "div", [dot, _emit(c, n, "denom", "sqrt", [denom])])


def _mse_loss(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    reduction = int(_arg(a, k, 2, "reduction", 1))
    diff = _emit(c, n, "diff", "sub", [a[0], a[1]])
    sq = _emit(c, n, "" if reduction == 0 else "sq", "mul", [diff, diff])
    if reduction == 0:
        return sq
    return _emit(c, n, "", "reduce_mean" if reduction == 1 else "reduce_sum", [sq], {"axes": None, "keepdims": False})


# ----------------------------------------------------------------------------- scans, sorting
def _cum(op: str) -> Handler:
    def run(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
        x = _as(c, n, a[0], _out_dtype(c, n), "in")  # torch sums bool / small ints as int64 (or dtype=)
        if _rank(c, a[0]) == 0:  # along dim 0 or -1 of a 0-d tensor: its one element
            return x
        return _emit(c, n, "", op, [x], {"axis": int(_arg(a, k, 1, "dim"))})

    return run


def _topk(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> list[Value | Unavailable]:
    kk, dim = int(a[1]), int(_arg(a, k, 2, "dim", -1))
    if _rank(c, a[0]) == 0 and kk == 1:  # a 0-d tensor is its own top element, at index 0
        return [a[0], Const(np.asarray(0, np.int64))]
    largest = bool(_arg(a, k, 3, "largest", True))
    attrs = {"k": kk, "axis": dim, "largest": largest, "sorted": True}
    return [_result(n, i, partial(_emit, c, n, ("", "indices")[i], "topk", [a[0]], attrs | {"output": i})) for i in (0, 1)]


def _sort_args(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> tuple[int, bool, bool]:
    """(dim, descending, stable) of sort / sort.stable / argsort / argsort.stable."""
    if getattr(n.target, "_overloadname", "") == "stable":
        return int(k.get("dim", -1)), bool(k.get("descending", False)), True
    stable = bool(k.get("stable", False))
    return int(_arg(a, k, 1, "dim", -1)), bool(_arg(a, k, 2, "descending", False)), stable


def _sorted(c: Any, n: Any, a: list[Any], k: dict[str, Any], outputs: Sequence[int]) -> list[Value]:
    """A full sort is a topk of the whole axis (ties by lower index: a stable sort)."""
    dim, descending, _ = _sort_args(c, n, a, k)
    shape = _input_shape(c, n)
    axis = _axis(dim, len(shape))
    size = _static(c, n, shape, axis, "sorts") if shape else 1
    if not shape:
        return [a[0] if i == 0 else Const(np.asarray(0, np.int64)) for i in outputs]
    attrs = {"k": size, "axis": axis, "largest": descending, "sorted": True}
    return [_emit(c, n, ("", "indices")[i], "topk", [a[0]], attrs | {"output": i}) for i in outputs]


def _sort(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> list[Any]:
    def result(i: int) -> Value:
        return _sorted(c, n, a, k, (i,))[0]

    return [_result(n, i, partial(result, i)) for i in (0, 1)]


def _argsort(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    return _sorted(c, n, a, k, (1,))[0]


# ----------------------------------------------------------------------------- shapes and indexing
def _roll(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """Each (shift, dim) as two slices concatenated; no dims rolls the flattened tensor."""
    x = a[0]
    shifts = _dims(a[1]) or ()
    dims = _dims(_arg(a, k, 2, "dims"))
    shape = _input_shape(c, n)
    if dims is None:
        flat = c.b.reshape(c.name(n) + ".flat", x, (-1,))
        total = int(np.prod([_static(c, n, shape, i, "rolls") for i in range(len(shape))], dtype=np.int64))
        rolled = _roll_axis(c, n, flat, int(shifts[0]), 0, total, "flat")
        return c.b.reshape(c.name(n), rolled, shape)
    if len(shifts) != len(dims):
        raise c.fail(n, f"has {len(shifts)} shifts for {len(dims)} dims")
    out = x
    for i, (s, d) in enumerate(zip(shifts, dims)):
        d = _axis(d, len(shape))
        last = i == len(dims) - 1
        out = _roll_axis(c, n, out, int(s), d, _static(c, n, shape, d, "rolls"), "" if last else f"d{i}")
    return out


def _roll_axis(c: Any, n: Any, x: Value, shift: int, axis: int, size: int, tag: str) -> Value:
    shift = shift % size if size else 0
    if shift == 0:
        return x if tag != "" else _emit(c, n, "", "identity", [x])
    pre = f"{tag}." if tag else ""
    tail = _emit(c, n, pre + "tail", "slice", [x], {"starts": (size - shift,), "ends": (_BIG,), "axes": (axis,), "steps": (1,)})
    head = _emit(c, n, pre + "head", "slice", [x], {"starts": (0,), "ends": (size - shift,), "axes": (axis,), "steps": (1,)})
    return _emit(c, n, tag, "concat", [tail, head], {"axis": axis})


def _diff(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """diff(x, n, dim, prepend, append): x[1:] - x[:-1] along dim, n times (bool: not_equal)."""
    x = a[0]
    times, dim = int(_arg(a, k, 1, "n", 1)), _axis(int(_arg(a, k, 2, "dim", -1)), _rank(c, x))
    prepend, append = _arg(a, k, 3, "prepend"), _arg(a, k, 4, "append")
    if prepend is not None or append is not None:
        x = _emit(c, n, "cat", "concat", [v for v in (prepend, x, append) if v is not None], {"axis": dim})
    op = "not_equal" if _dtype(c, x) == "bool" else "sub"
    for i in range(times):
        tag = "" if i == times - 1 else f"d{i}"
        pre = f"{tag}." if tag else ""
        later = _emit(c, n, pre + "later", "slice", [x], {"starts": (1,), "ends": (_BIG,), "axes": (dim,), "steps": (1,)})
        earlier = _emit(c, n, pre + "earlier", "slice", [x], {"starts": (0,), "ends": (-1,), "axes": (dim,), "steps": (1,)})
        x = _emit(c, n, tag, op, [later, earlier])
    return x


def _flip(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    dims = _dims(a[1]) or ()
    rank = _rank(c, a[0])
    if not dims or rank == 0:  # flipping a 0-d tensor (dims 0 or -1) leaves it as it is
        return a[0]
    axes = tuple(_axis(d, rank) for d in dims)
    return _emit(c, n, "", "slice", [a[0]], {"starts": (-1,) * len(axes), "ends": (-_BIG,) * len(axes), "axes": axes,
                                              "steps": (-1,) * len(axes)})


def _repeat(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """x.repeat(*sizes): leading new axes for extra sizes, then a tile."""
    x, reps = a[0], tuple(int(r) for r in a[1])
    rank, shape = _rank(c, x), _input_shape(c, n)
    if len(reps) < rank:
        raise c.fail(n, f"repeats {reps} fewer axes than the input's {rank}")
    if len(reps) > rank:
        x = c.b.reshape(c.name(n) + ".lift", x, (1,) * (len(reps) - rank) + tuple(shape), tuple(shape))
    return _emit(c, n, "", "tile", [x], {"repeats": reps})


def _tile(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    reps = tuple(int(r) for r in a[1])
    rank = _rank(c, a[0])
    reps = (1,) * (rank - len(reps)) + reps
    return _repeat(c, n, [a[0], reps], k)


def _trilu(upper: bool) -> Handler:
    return lambda c, n, a, k: _emit(c, n, "", "trilu", [a[0]], {"upper": upper, "k": int(_arg(a, k, 1, "diagonal", 0))})


def _one_hot(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    depth = int(_arg(a, k, 1, "num_classes", -1))
    if depth < 0:
        raise c.fail(n, "infers num_classes from the data; pass num_classes= explicitly")
    return _emit(c, n, "", "one_hot", [a[0], Const(np.asarray([0, 1], np.int64))], {"depth": depth, "axis": -1})


def _einsum(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    dtype = _out_dtype(c, n)
    operands = [_as(c, n, v, dtype, f"in{i}") for i, v in enumerate(a[1])]
    return _emit(c, n, "", "einsum", operands, {"equation": str(a[0]).replace(" ", "")})


def _like(value: Any) -> Handler:
    """zeros_like / ones_like / full_like / empty_like: a scalar expanded to the input's shape."""

    def run(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
        fill = value if value is not None else _arg(a, k, 1, "fill_value")
        if not isinstance(fill, (int, float, bool)):
            raise c.fail(n, "fills with a value computed at run time")
        shape, dtype = c.sym_shape(n), _out_dtype(c, n)
        scalar = Const(np.full((1,) * len(shape), fill, dtype=np.dtype(dtype)))
        return _emit(c, n, "", "expand", [scalar], {"shape": tuple(shape)})

    return run


def _broadcast_tensors(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> list[Value]:
    outs = []
    for i, (v, meta) in enumerate(zip(a[0], n.meta["val"])):
        shape = tuple(c.dim(d) for d in meta.shape)
        same = tuple(c.sym_shape(n.args[0][i])) == shape
        outs.append(v if same else _emit(c, n, str(i), "expand", [v], {"shape": shape}))
    return outs


def _pixel_shuffle(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """(*, C*r*r, H, W) -> (*, C, H*r, W*r) as reshape, transpose, reshape (torch's own decomposition)."""
    shape, r = _input_shape(c, n), int(a[1])
    lead, (h, w) = tuple(shape[:-3]), shape[-2:]
    ch = _static(c, n, shape, len(shape) - 3, "shuffles channels") // (r * r)
    m = len(lead)
    split = c.b.reshape(c.name(n) + ".split", a[0], lead + (ch, r, r, h, w), shape)
    perm = tuple(range(m)) + (m, m + 3, m + 1, m + 4, m + 2)
    moved = _emit(c, n, "perm", "transpose", [split], {"perm": perm})
    return c.b.reshape(c.name(n), moved, tuple(c.sym_shape(n)))


def _pixel_unshuffle(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    shape, r = _input_shape(c, n), int(a[1])
    lead, ch = tuple(shape[:-3]), shape[-3]
    oh, ow = _static(c, n, shape, len(shape) - 2, "unshuffles") // r, _static(c, n, shape, len(shape) - 1, "unshuffles") // r
    m = len(lead)
    split = c.b.reshape(c.name(n) + ".split", a[0], lead + (ch, oh, r, ow, r), shape)
    perm = tuple(range(m)) + (m, m + 2, m + 4, m + 1, m + 3)
    moved = _emit(c, n, "perm", "transpose", [split], {"perm": perm})
    return c.b.reshape(c.name(n), moved, tuple(c.sym_shape(n)))


# ----------------------------------------------------------------------------- scatter
_SCATTER_REDUCE: Final = {"add": "add", "sum": "add", "multiply": "mul", "prod": "mul", "amax": "max", "amin": "min"}


def _fill_like_index(c: Any, n: Any, value: Any, dtype: str) -> Value:
    shape = tuple(c.sym_shape(n.args[2]))
    return _emit(c, n, "src", "expand", [Const(np.full((1,) * len(shape), value, np.dtype(dtype)))], {"shape": shape})


def _scatter_src(c: Any, n: Any, src: Any, dtype: str) -> Value:
    """The update tensor cut to the index's shape (torch reads only that corner of src)."""
    if not isinstance(src, (str, Const)):
        return _fill_like_index(c, n, src, dtype)
    src = c.b.cast_to(c.name(n) + ".src", src, dtype)
    ishape, sshape = tuple(c.sym_shape(n.args[2])), tuple(c.sym_shape(n.args[3]))
    if ishape == sshape:
        return src
    axes = tuple(i for i, (p, q) in enumerate(zip(ishape, sshape)) if p != q)
    return _emit(c, n, "src.cut", "slice", [src], {"starts": (0,) * len(axes), "ends": tuple(ishape[i] for i in axes), "axes": axes,
                                                   "steps": (1,) * len(axes)})


def _scatter(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """scatter (src or value, optional reduce=), scatter_add, scatter_reduce(include_self=)."""
    name = getattr(getattr(n.target, "overloadpacket", None), "__name__", "")
    dtype = _out_dtype(c, n)
    x, dim, index = a[0], int(a[1]), a[2]
    src = _scatter_src(c, n, _arg(a, k, 3, "src", k.get("value")), dtype)
    include_self = True
    if name == "scatter_add":
        reduce = "add"
    elif name == "scatter_reduce":
        reduce, include_self = str(a[4]), bool(_arg(a, k, 5, "include_self", True))
    else:
        reduce = k.get("reduce", a[4] if len(a) > 4 else "none")
    if reduce != "none" and reduce not in _SCATTER_REDUCE:
        raise c.fail(n, f"reduces with {reduce!r}; add, sum, multiply, prod, amax and amin are supported")
    op = "none" if reduce == "none" else _SCATTER_REDUCE[reduce]
    if not include_self and op != "none":
        # The written positions start from the reduction's identity, so only the updates count.
        identity = {"add": 0, "mul": 1, "max": _extreme(dtype, low=True), "min": _extreme(dtype, low=False)}[op]
        x = _emit(c, n, "clear", "scatter_elements", [x, index, _fill_like_index(c, n, identity, dtype)], {"axis": dim})
    return _emit(c, n, "", "scatter_elements", [x, index, src], {"axis": dim, "reduction": op})


def _as_strided(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """as_strided(x, size, stride, storage_offset) over x's elements in row-major order (what
    PyTorch's decompositions of views such as ``diagonal`` produce on a contiguous tensor): a
    gather of the flattened input at the offsets the strides give, computed at import."""
    index = _strided_index(c, n, a[1], a[2], _arg(a, k, 3, "storage_offset", 0) or 0)
    flat = _emit(c, n, "flat", "reshape", [a[0]], {"shape": (-1,)})
    return _emit(c, n, "", "gather", [flat, Const(index)], {"axis": 0})


def _strided_index(c: Any, n: Any, size: Sequence[Any], stride: Sequence[Any], offset: Any) -> np.ndarray:
    """The row-major positions in the node's (contiguous, static) first input of the view
    ``size`` / ``stride`` / ``offset``."""
    shape = _input_shape(c, n)
    dims = [d for d in shape if isinstance(d, int)]
    if len(dims) != len(shape) or not all(isinstance(v, int) for v in (*size, *stride, offset)):
        raise c.fail(n, "takes sizes or strides computed at run time")
    index = np.full(tuple(size), int(offset), np.int64)
    for axis, (extent, step) in enumerate(zip(size, stride)):
        index += (np.arange(extent, dtype=np.int64) * int(step)).reshape((-1,) + (1,) * (len(size) - axis - 1))
    total = int(np.prod(dims, dtype=np.int64))
    if index.size and (index.min() < 0 or index.max() >= total):
        raise c.fail(n, f"reaches past its input's {total} elements (a view of a larger storage)")
    return index


def _scatter_flat(c: Any, n: Any, x: Value, positions: Value, src: Value, reduction: str = "none") -> Value:
    """x with the row-major ``positions`` (int64, any shape) set to (or, reduction 'add',
    increased by) ``src``'s elements in the same order, as scatter_elements on the flat tensor."""
    dtype = _dtype(c, x)
    flat = _emit(c, n, "flat", "reshape", [x], {"shape": (-1,)})
    index = _emit(c, n, "positions", "reshape", [positions], {"shape": (-1,)})
    values = _emit(c, n, "values", "reshape", [c.b.cast_to(c.name(n) + ".src", src, dtype)], {"shape": (-1,)})
    written = _emit(c, n, "scatter", "scatter_elements", [flat, index, values], {"axis": 0, "reduction": reduction})
    return c.b.reshape(c.name(n), written, tuple(c.sym_shape(n)))


def _as_strided_scatter(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """as_strided_scatter(x, src, size, stride, storage_offset): src written into the view."""
    index = _strided_index(c, n, a[2], a[3], _arg(a, k, 4, "storage_offset", 0) or 0)
    return _scatter_flat(c, n, a[0], Const(index), a[1])


def _diagonal_scatter(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """diagonal_scatter(x, src, offset, dim1, dim2): src written on the diagonal (positions
    taken from NumPy's diagonal of x's row-major positions, which orders them as torch does)."""
    shape = _input_shape(c, n)
    sizes = [_static(c, n, shape, i, "writes a diagonal") for i in range(len(shape))]
    offset, dim1, dim2 = int(_arg(a, k, 2, "offset", 0)), int(_arg(a, k, 3, "dim1", 0)), int(_arg(a, k, 4, "dim2", 1))
    positions = np.diagonal(np.arange(int(np.prod(sizes, dtype=np.int64)), dtype=np.int64).reshape(sizes), offset, dim1, dim2)
    return _scatter_flat(c, n, a[0], Const(np.ascontiguousarray(positions)), a[1])


def _put(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """put(x, index, source, accumulate): source's elements written (added) at the flat
    positions index (negative ones from the end) of x."""
    total = int(np.prod([_static(c, n, _input_shape(c, n), i, "puts") for i in range(_rank(c, a[0]))], dtype=np.int64))
    index = c.b.cast_to(c.name(n) + ".index", a[1], "int64")
    negative = _emit(c, n, "neg", "less", [index, _scalar(0, "int64")])
    index = _emit(c, n, "wrap", "where", [negative, _emit(c, n, "plus", "add", [index, _scalar(total, "int64")]), index])
    return _scatter_flat(c, n, a[0], index, a[2], "add" if bool(_arg(a, k, 3, "accumulate", False)) else "none")


def _take(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """take(x, index): x's elements at the flat positions index (negative ones from the end),
    shaped as index."""
    total = int(np.prod([_static(c, n, _input_shape(c, n), i, "takes elements") for i in range(_rank(c, a[0]))], dtype=np.int64))
    index = c.b.cast_to(c.name(n) + ".index", a[1], "int64")
    negative = _emit(c, n, "neg", "less", [index, _scalar(0, "int64")])
    index = _emit(c, n, "wrap", "where", [negative, _emit(c, n, "plus", "add", [index, _scalar(total, "int64")]), index])
    return _emit(c, n, "", "gather", [_emit(c, n, "flat", "reshape", [a[0]], {"shape": (-1,)}), index], {"axis": 0})


def _bucketize(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """bucketize(x, boundaries (sorted, 1-D), out_int32, right): the number of boundaries a
    binary search passes, counted: those not >= x (right: not > x), so that a NaN lands past
    the last boundary as torch's search puts it."""
    x, bounds = a[0], a[1]
    right = bool(k.get("right", a[3] if len(a) > 3 else False))
    if not isinstance(x, (str, Const)):  # bucketize.Scalar
        x = _scalar(x, _dtype(c, bounds))
    dtype = _promote_pair(c, x, bounds)
    x, bounds = _as(c, n, x, dtype, "x"), _as(c, n, bounds, dtype, "bounds")
    column = _emit(c, n, "column", "unsqueeze", [x], {"axes": (-1,)})
    stops = _emit(c, n, "stops", "greater" if right else "greater_equal", [bounds, column])
    passed = c.b.cast_to(c.name(n) + ".passed", _emit(c, n, "passes", "logical_not", [stops]), _out_dtype(c, n))
    return _emit(c, n, "", "reduce_sum", [passed], {"axes": (-1,), "keepdims": False})


def _promote_pair(c: Any, x: Value, y: Value) -> str:
    """The dtype torch compares x and y in (float over int, the wider of two)."""
    dx, dy = _dtype(c, x), _dtype(c, y)
    if _is_float(dx) != _is_float(dy):
        return dx if _is_float(dx) else dy
    return str(np.promote_types(np.dtype(dx), np.dtype(dy))) if "bfloat16" not in (dx, dy) else dx


def _refuse(why: str) -> Handler:
    """An op the import does not compute, refused by name with the reason (the error names the
    node and its ATen op)."""

    def run(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
        raise c.fail(n, why)

    return run


_DATA_SIZED: Final = ("returns as many elements as its input's values select (a data-dependent size), which a neurenix "
                      "graph's static shapes cannot hold; nonzero_static(size=...) or a mask with where keeps the shape static")
_RANDOM: Final = ("draws random numbers, and a neurenix graph is deterministic: draw them in PyTorch and pass them to "
                  "forward as an input")
_RANDOM_WINDOWS: Final = ("pools windows placed at random (fractional max pooling), and a neurenix graph is deterministic: "
                          "pass _random_samples, drawn in PyTorch, to forward as an input")


def _rank_of_true(c: Any, n: Any, mask: Value, tag: str) -> Value:
    """For a flat bool mask, each position's rank among the true ones (0 for the first true,
    clamped at 0 before it): which element of a packed source a true position takes."""
    counted = _emit(c, n, f"{tag}.count", "cumsum", [c.b.cast_to(f"{c.name(n)}.{tag}.int", mask, "int64")], {"axis": 0})
    return _emit(c, n, f"{tag}.rank", "maximum", [_emit(c, n, f"{tag}.before", "sub", [counted, _scalar(1, "int64")]),
                                                  _scalar(0, "int64")])


def _masked_scatter(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """masked_scatter(x, mask, source): the true positions of mask (broadcast to x) take
    source's elements in order, with static shapes: each true position's rank among the true
    ones (a cumulative sum) is the element of the flattened source it reads."""
    x, mask, source = a[0], a[1], a[2]
    shape = tuple(c.sym_shape(n))
    if tuple(c.b.spec(mask).shape) != tuple(c.b.example(shape)):
        mask = _emit(c, n, "mask", "expand", [mask], {"shape": shape})
    flat_mask = _emit(c, n, "mask.flat", "reshape", [mask], {"shape": (-1,)})
    src = _emit(c, n, "src.flat", "reshape", [c.b.cast_to(c.name(n) + ".src", source, _dtype(c, x))], {"shape": (-1,)})
    if not int(np.prod(c.b.spec(source).shape, dtype=np.int64)):
        return x  # torch checks that the mask then holds no true value
    last = _scalar(int(np.prod(c.b.spec(source).shape, dtype=np.int64)) - 1, "int64")
    rank = _emit(c, n, "clamp", "minimum", [_rank_of_true(c, n, flat_mask, "pos"), last])
    picked = _emit(c, n, "picked", "gather", [src, rank], {"axis": 0})
    out = _emit(c, n, "where", "where", [flat_mask, picked, _emit(c, n, "flat", "reshape", [x], {"shape": (-1,)})])
    return c.b.reshape(c.name(n), out, shape)


def _resize(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """resize(x, size) (resize_as_): the first prod(size) elements in row-major order, as
    torch's storage keeps them; growing is refused (the new elements are uninitialised memory)."""
    have = int(np.prod([_static(c, n, _input_shape(c, n), i, "resizes") for i in range(_rank(c, a[0]))], dtype=np.int64))
    target = tuple(c.sym_shape(n))
    want = int(np.prod([_static(c, n, target, i, "resizes") for i in range(len(target))], dtype=np.int64))
    if want > have:
        raise c.fail(n, f"grows a tensor of {have} elements to {want}, whose new elements torch leaves uninitialised")
    flat = _emit(c, n, "flat", "reshape", [a[0]], {"shape": (-1,)})
    if want < have:
        flat = _emit(c, n, "head", "slice", [flat], {"starts": (0,), "ends": (want,), "axes": (0,), "steps": (1,)})
    return c.b.reshape(c.name(n), flat, target)


def _nonzero_static(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """nonzero_static(x, size, fill_value): the coordinates of the first ``size`` nonzero
    elements (row-major), rows past the count filled with fill_value. Each nonzero position is
    scattered to its rank among the nonzero ones (ranks at or past size to a spare slot), then
    the flat positions are split into coordinates."""
    x = a[0]
    size, fill = int(_arg(a, k, 1, "size")), int(_arg(a, k, 2, "fill_value", -1))
    shape = _input_shape(c, n)
    dims = [_static(c, n, shape, i, "finds nonzero elements") for i in range(len(shape))]
    total = int(np.prod(dims, dtype=np.int64))
    flat = _emit(c, n, "flat", "reshape", [x], {"shape": (-1,)})
    nonzero = _to_bool(c, n, flat, "nonzero")
    rank = _rank_of_true(c, n, nonzero, "rank")
    kept = _emit(c, n, "kept", "logical_and", [nonzero, _emit(c, n, "fits", "less", [rank, _scalar(size, "int64")])])
    slot = _emit(c, n, "slot", "where", [kept, rank, _scalar(size, "int64")])
    found = _emit(c, n, "found", "scatter_elements", [Const(np.full((size + 1,), -1, np.int64)), slot,
                                                      Const(np.arange(total, dtype=np.int64))], {"axis": 0, "reduction": "max"})
    found = _emit(c, n, "first", "slice", [found], {"starts": (0,), "ends": (size,), "axes": (0,), "steps": (1,)})
    if not dims:  # a 0-d input has no coordinates: (size, 0)
        return _emit(c, n, "", "slice", [_emit(c, n, "col", "unsqueeze", [found], {"axes": (1,)})],
                     {"starts": (0,), "ends": (0,), "axes": (1,), "steps": (1,)})
    valid = _emit(c, n, "valid", "greater_equal", [found, _scalar(0, "int64")])
    columns = []
    for i, extent in enumerate(dims):
        stride = int(np.prod(dims[i + 1:], dtype=np.int64))
        coord = _emit(c, n, f"c{i}", "mod", [_emit(c, n, f"q{i}", "div", [found, _scalar(stride, "int64")]), _scalar(extent, "int64")],
                      {"fmod": False})
        coord = _emit(c, n, f"c{i}.fill", "where", [valid, coord, _scalar(fill, "int64")])
        columns.append(_emit(c, n, f"c{i}.col", "unsqueeze", [coord], {"axes": (1,)}))
    return columns[0] if len(columns) == 1 else _emit(c, n, "", "concat", columns, {"axis": 1})


def _grouped_mm(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """transformers' ``grouped_mm_fallback(x, weight, offs)`` (the mixture-of-experts layers of
    transformers 5: x's rows sorted by expert, ``offs`` the running row counts per expert, each
    row times its expert's matrix, rows past the last count zero): each row's expert is the
    number of counts at or below its position, and the rows multiply their gathered matrices."""
    x, weight, offs = a[0], a[1], c.b.cast_to(c.name(n) + ".offs", a[2], "int64")
    rows, experts = _input_shape(c, n)[0], _input_shape(c, n, 1)[0]
    ones = _emit(c, n, "ones", "expand", [Const(np.ones((1,), np.int64))], {"shape": (rows,)})
    row = _emit(c, n, "row", "add", [_emit(c, n, "count", "cumsum", [ones], {"axis": 0}), Const(np.asarray(-1, np.int64))])
    passed = _emit(c, n, "passed", "greater_equal", [_emit(c, n, "row2", "unsqueeze", [row], {"axes": (1,)}),
                                                       _emit(c, n, "offs2", "unsqueeze", [offs], {"axes": (0,)})])
    expert = _emit(c, n, "expert", "reduce_sum", [c.b.cast_to(c.name(n) + ".passed.int", passed, "int64")], {"axes": (1,), "keepdims": False})
    last = _as(c, n, experts - 1, "int64", "last")
    chosen = _emit(c, n, "gather", "gather", [weight, _emit(c, n, "clamp", "minimum", [expert, last])], {"axis": 0})
    product = _emit(c, n, "mm", "matmul", [_emit(c, n, "x3", "unsqueeze", [x], {"axes": (1,)}), chosen])
    out = _emit(c, n, "rows", "squeeze", [product], {"axes": (1,)})
    inside = _emit(c, n, "inside", "unsqueeze", [_emit(c, n, "in", "less_equal", [expert, last])], {"axes": (1,)})
    return _emit(c, n, "", "where", [inside, out, _scalar(0, _out_dtype(c, n))])


def _index_copy(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """index_copy(x, dim, index, source): source's slices written at positions ``index`` of axis
    ``dim`` (a static key/value cache's update), as scatter_elements with the index broadcast
    along source's other axes."""
    x, index, src = a[0], a[2], a[3]
    shape = tuple(c.sym_shape(n.args[3]))
    if not shape or not _input_shape(c, n):  # 0-d: the one element is the source's (index 0, checked by PyTorch)
        return _emit(c, n, "", "reshape", [c.b.cast_to(c.name(n) + ".src", src, _out_dtype(c, n))], {"shape": tuple(c.sym_shape(n))})
    dim = int(a[1]) % len(shape)
    lifted = _emit(c, n, "index", "reshape", [index], {"shape": tuple(-1 if i == dim else 1 for i in range(len(shape)))})
    spread = _emit(c, n, "spread", "expand", [lifted], {"shape": shape})
    return _emit(c, n, "", "scatter_elements", [x, spread, c.b.cast_to(c.name(n) + ".src", src, _out_dtype(c, n))], {"axis": dim})


def _slice_scatter(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """slice_scatter(x, src, dim, start, end, step): ``x`` with ``x[start:end:step]`` on axis ``dim``
    replaced by ``src``. Step 1 (Funnel's relative attention, symbolic bounds included) is the
    concat of the part before, src and the part after; another step scatters src's slices at
    start + step * i (static axis). PyTorch's own decomposition indexes a trailing axis (x[..., i]),
    which ``index`` refuses; this keeps the op whole."""
    x, src = a[0], a[1]
    shape = _input_shape(c, n)
    dim = _axis(_arg(a, k, 2, "dim", 0), len(shape))
    size, step = shape[dim], int(_arg(a, k, 5, "step", 1))
    start, end = _arg(a, k, 3, "start", 0), _arg(a, k, 4, "end", _BIG)
    if isinstance(size, int):  # PyTorch's bounds: negatives from the end, clamped, end >= start
        start = min(max(start + size if isinstance(start, int) and start < 0 else start, 0), size) if isinstance(start, int) else start
        end = min(max(end + size if isinstance(end, int) and end < 0 else end, 0), size) if isinstance(end, int) else end
        end = max(end, start) if isinstance(end, int) and isinstance(start, int) else end
    src = c.b.cast_to(c.name(n) + ".src", src, _out_dtype(c, n))
    if step == 1:
        parts = [] if isinstance(start, int) and start == 0 else [
            _emit(c, n, "before", "slice", [x], {"starts": (0,), "ends": (start,), "axes": (dim,), "steps": (1,)})]
        parts.append(src)
        if not (isinstance(end, int) and (end >= _BIG or end == size)):
            parts.append(_emit(c, n, "after", "slice", [x], {"starts": (end,), "ends": (_BIG,), "axes": (dim,), "steps": (1,)}))
        return parts[0] if len(parts) == 1 else _emit(c, n, "", "concat", parts, {"axis": dim})
    count = _static(c, n, tuple(c.sym_shape(n.args[1])), dim, "scatters a strided slice")
    _static(c, n, shape, dim, "scatters a strided slice")
    if count == 0:
        return x
    positions = (int(start) + step * np.arange(count, dtype=np.int64)).reshape(tuple(-1 if i == dim else 1 for i in range(len(shape))))
    spread = _emit(c, n, "index", "expand", [Const(positions)], {"shape": tuple(c.sym_shape(n.args[1]))})
    return _emit(c, n, "", "scatter_elements", [x, spread, src], {"axis": dim})


def _extreme(dtype: str, low: bool) -> float | int:
    if _is_float(dtype):
        return -np.inf if low else np.inf
    if dtype == "bool":
        return not low
    info = np.iinfo(np.dtype(dtype))
    return int(info.min if low else info.max)


def _index_put(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """x[i0, i1, ...] = values (or += with accumulate) for index tensors on the leading axes, as
    scatter_nd; a boolean mask over the leading axes with a broadcastable value, as where."""
    x, indices, values = a[0], list(a[1]), a[2]
    accumulate = bool(_arg(a, k, 3, "accumulate", False))
    dtype, shape = _dtype(c, x), _input_shape(c, n)
    values = c.b.cast_to(c.name(n) + ".values", values, dtype)
    lead = 0
    while lead < len(indices) and indices[lead] is not None:
        lead += 1
    if lead == 0 or any(i is not None for i in indices[lead:]):
        raise c.fail(n, "assigns through index tensors that are not on the leading axes")
    if lead == 1 and _dtype(c, indices[0]) == "bool":
        return _masked_put(c, n, x, indices[0], values, accumulate, shape)
    if any(_dtype(c, i) == "bool" for i in indices):
        raise c.fail(n, "mixes boolean masks with index tensors")
    parts = []
    index_shapes = [tuple(c.sym_shape(arg)) if not isinstance(arg, (list, tuple)) and arg is not None else ()
                    for arg in n.args[1][:lead]]
    common = _broadcast_shape(c, n, index_shapes)
    for i, idx in enumerate(indices[:lead]):
        idx = c.b.cast_to(f"{c.name(n)}.i{i}", idx, "int64")
        size = Const(np.asarray(_static(c, n, shape, i, "indexes negative positions"), np.int64))
        negative = _emit(c, n, f"i{i}.neg", "less", [idx, Const(np.asarray(0, np.int64))])
        idx = _emit(c, n, f"i{i}.wrap", "where", [negative, _emit(c, n, f"i{i}.plus", "add", [idx, size]), idx])
        if index_shapes[i] != common:
            idx = _emit(c, n, f"i{i}.expand", "expand", [idx], {"shape": common})
        parts.append(_emit(c, n, f"i{i}.unsqueeze", "unsqueeze", [idx], {"axes": (-1,)}))
    coords = parts[0] if lead == 1 else _emit(c, n, "coords", "concat", parts, {"axis": -1})
    updates = _emit(c, n, "updates", "expand", [values], {"shape": common + tuple(shape[lead:])})
    return _emit(c, n, "", "scatter_nd", [x, coords, updates], {"reduction": "add" if accumulate else "none"})


def _broadcast_shape(c: Any, n: Any, shapes: list[tuple[Any, ...]]) -> tuple[Any, ...]:
    rank = max(len(s) for s in shapes)
    out: list[Any] = []
    for axis in range(rank):
        sizes = [s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0]
        real = [d for d in sizes if not (isinstance(d, int) and d == 1)]
        if any(isinstance(d, SymDim) for d in real) and len({str(d) for d in real}) > 1:
            raise NotSymbolicError(f"node {c.name(n)!r} broadcasts index tensors of dynamic shapes")
        out.append(real[0] if real else 1)
    return tuple(out)


def _rows_by_rank(c: Any, n: Any, mask: Value, values: Value, msym: tuple[Any, ...], rest: int) -> Value:
    """values (K, *vrest) spread over the mask's shape: each position takes the row of its rank
    among the true positions (false ones some row, unused), shaped to broadcast against x."""
    vshape = tuple(c.b.spec(values).shape)
    rows = c.b.reshape(c.name(n) + ".rows", values, (-1,) + vshape[len(vshape) - rest:] if rest else (-1,))
    flat = _emit(c, n, "mask.flat", "reshape", [mask], {"shape": (-1,)})
    last = _scalar(int(np.prod(vshape[:len(vshape) - rest], dtype=np.int64)) - 1, "int64")
    rank = _emit(c, n, "clamp", "minimum", [_rank_of_true(c, n, flat, "pos"), last])
    picked = _emit(c, n, "picked", "gather", [rows, rank], {"axis": 0})
    vrest = vshape[len(vshape) - rest:] if rest else ()
    return c.b.reshape(c.name(n) + ".spread", picked, msym + (1,) * (rest - len(vrest)) + tuple(vrest))


def _masked_put(c: Any, n: Any, x: Value, mask: Value, values: Value, accumulate: bool, shape: Sequence[Any]) -> Value:
    """x[mask] = values over the mask's leading axes: one value (or row) for all true
    positions, as where; or one row per true position, values (K, *rest), each true position
    reading the row of its rank among the true ones (static shapes: a cumulative sum)."""
    mshape, vshape = tuple(c.b.spec(mask).shape), tuple(c.b.spec(values).shape)
    rest = len(shape) - len(mshape)
    msym = tuple(c.sym_shape(n.args[1][0]))
    if len(vshape) > rest and int(np.prod(vshape[:len(vshape) - rest], dtype=np.int64)) != 1:
        value = _rows_by_rank(c, n, mask, values, msym, rest)
    else:
        value = values if len(vshape) <= rest else c.b.reshape(c.name(n) + ".value", values, vshape[len(vshape) - rest:])
    if len(mshape) < len(shape):
        mask = c.b.reshape(c.name(n) + ".mask", mask, msym + (1,) * rest)
    if accumulate:
        added = _emit(c, n, "add", "add", [x, value])
        return _emit(c, n, "", "where", [mask, added, x])
    return _emit(c, n, "", "where", [mask, value, x])


# ----------------------------------------------------------------------------- pooling
def _pool_nd(kind: str, nd: int, indices: bool = False) -> Handler:
    """max_pool{1,2,3}d (with_indices) and avg_pool{1,2,3}d as the opset's N-d max_pool / avg_pool."""

    def run(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Any:
        x = a[0]
        rank = _rank(c, x)
        if rank == nd + 1:  # unbatched input: a batch of one
            return unbatched(c, n, x, lambda v: run(c, n, [v] + list(a[1:]), k))
        kernel = _tuple(a[1], nd, 1)
        stride = _tuple(_arg(a, k, 2, "stride", []), nd, 1) if _arg(a, k, 2, "stride", []) else kernel
        padding = _tuple(_arg(a, k, 3, "padding", 0), nd, 0)
        attrs: dict[str, Any] = {"kernel_shape": kernel, "strides": stride, "pads": padding + padding}
        if kind == "max":
            dilation, ceil = _tuple(_arg(a, k, 4, "dilation", 1), nd, 1), bool(_arg(a, k, 5, "ceil_mode", False))
            attrs |= {"dilations": dilation, "ceil_mode": ceil}
            if nd == 2 and not ceil and dilation == (1, 1):
                values = _emit(c, n, "", "max_pool2d", [x], {"kernel_size": kernel, "stride": stride, "padding": padding})
            else:
                values = _emit(c, n, "", "max_pool", [x], attrs)
            return [values, _result(n, 1, lambda: _plane_indices(c, n, x, attrs))] if indices else values
        ceil, include = bool(_arg(a, k, 4, "ceil_mode", False)), bool(_arg(a, k, 5, "count_include_pad", True))
        if _arg(a, k, 6, "divisor_override") is not None:
            return _sum_pool(c, n, x, kernel, stride, padding, ceil, int(_arg(a, k, 6, "divisor_override")))
        if nd == 2 and not ceil:
            return _emit(c, n, "", "avg_pool2d", [x], {"kernel_size": kernel, "stride": stride, "padding": padding,
                                                       "count_include_pad": include})
        return _emit(c, n, "", "avg_pool", [x], attrs | {"ceil_mode": ceil, "count_include_pad": include})

    return run


def _sum_pool(c: Any, n: Any, x: Value, kernel: tuple[int, ...], stride: tuple[int, ...], padding: tuple[int, ...],
              ceil: bool, divisor: int) -> Value:
    """avg_pool with divisor_override: each window's sum over the divisor. The input is padded
    with zeros (torch's padding, and on the far side as much as ceil_mode's last window needs),
    so every window is whole: its mean times the kernel's size is its sum."""
    nd, shape, rank = len(kernel), _input_shape(c, n), _rank(c, x)
    pads = [(0, 0)] * (rank - nd)
    for i in range(nd):
        size = _static(c, n, shape, len(shape) - nd + i, "pools")
        span = size + 2 * padding[i] - kernel[i]
        count = (-(-span // stride[i]) if ceil else span // stride[i]) + 1
        if ceil and (count - 1) * stride[i] >= size + padding[i]:  # torch drops a last window that starts in the padding
            count -= 1
        extra = max(0, (count - 1) * stride[i] + kernel[i] - size - 2 * padding[i])
        pads.append((padding[i], padding[i] + extra))
    padded = _emit(c, n, "pad", "pad", [x], {"pads": tuple(pads), "mode": "constant", "value": 0.0})
    mean = _emit(c, n, "mean", "avg_pool", [padded], {"kernel_shape": kernel, "strides": stride, "pads": (0,) * (2 * nd),
                                                      "ceil_mode": False, "count_include_pad": True})
    area = int(np.prod(kernel, dtype=np.int64))
    return _emit(c, n, "", "mul", [mean, _scalar(area / divisor, _dtype(c, x))])


def _plane_indices(c: Any, n: Any, x: Value, attrs: dict[str, Any]) -> Value:
    """torch's indices count within each (n, c) plane; the opset's (ONNX's) count over the
    whole tensor, so the plane's offset goes with a modulo by the plane size."""
    shape, nd = _input_shape(c, n), len(attrs["kernel_shape"])  # the spatial axes are the last nd, batched or not
    plane = int(np.prod([_static(c, n, shape, i, "returns pooling indices") for i in range(len(shape) - nd, len(shape))], dtype=np.int64))
    flat = _emit(c, n, "flat_indices", "max_pool", [x], attrs | {"output": 1})
    return _emit(c, n, "indices", "mod", [flat, Const(np.asarray(plane, np.int64))], {"fmod": False})


def unbatched(c: Any, n: Any, x: Value, body: Callable[[Value], Any]) -> Any:
    """``body`` of an unbatched input (C, *S), which torch takes beside (N, C, *S): a batch axis
    of one added for it and removed from each of its results, as torch does inside."""
    lifted = _emit(c, n, "batch", "unsqueeze", [x], {"axes": (0,)})
    out = body(lifted)
    outs = out if isinstance(out, list) else [out]
    back = [v if isinstance(v, Unavailable) else _emit(c, n, f"unbatch{i}", "squeeze", [v], {"axes": (0,)}) for i, v in enumerate(outs)]
    return back if isinstance(out, list) else back[0]


def _adaptive(kind: str, nd: int) -> Handler:
    """adaptive_{avg,max}_pool{1,2,3}d through the opset's 2-D adaptive pools: the pools are
    separable (a box's mean or max is the mean or max of its rows' means or maxes), so 1-D is
    2-D over (1, L) and 3-D is 2-D over (H, W) then over (D, H*W)."""
    op = f"adaptive_{kind}_pool2d"

    def run(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Any:
        x = a[0]
        rank, shape = _rank(c, x), _input_shape(c, n)
        sizes = a[1] if isinstance(a[1], (list, tuple)) else [a[1]]
        sizes = tuple(int(shape[rank - nd + i]) if s is None else int(s) for i, s in enumerate(_tuple_keep_none(sizes, nd)))  # type: ignore[arg-type]  # a SymDim has no __int__: symbolic dims raise here
        spatial = tuple(shape[rank - nd:])
        if kind == "max" and _used(n, 1) and all(isinstance(d, int) and d % s == 0 for d, s in zip(spatial, sizes)):
            # Where every output cell's window is the same (each size divides its axis), the adaptive
            # pool is max_pool with kernel = stride = in / out, and its indices are max_pool's.
            kernel = [d // s for d, s in zip(spatial, sizes)]
            return _pool_nd("max", nd, True)(c, n, [x, kernel, kernel, 0, 1, False], {})
        if kind == "max" and _used(n, 1) and rank in (nd + 1, nd + 2):
            return _adaptive_max_indices(c, n, x, sizes)
        if rank == nd + 1:
            out = unbatched(c, n, x, lambda v: _adaptive_body(c, n, v, op, nd, sizes, (1,) + tuple(shape)))
        elif rank == nd + 2:
            out = _adaptive_body(c, n, x, op, nd, sizes, shape)
        else:
            raise c.fail(n, f"pools a rank-{rank} input; {nd}-D adaptive pooling takes {nd + 1} or {nd + 2} axes")
        why = f"the indices of adaptive_max_pool{nd}d where an output size does not divide its axis ({spatial} to {sizes})"
        return [out, Unavailable(why)] if kind == "max" else out

    return run


def _adaptive_max_indices(c: Any, n: Any, x: Value, sizes: tuple[int, ...]) -> list[Value]:
    """Adaptive max pooling with torch's indices where the windows differ in size: output cell
    i of an axis of length L pools [floor(i L / out), ceil((i + 1) L / out)). Each spatial axis
    is gathered into (out, K) windows, a short window padded with its own last position (a
    repeat moves neither the max nor its first index); the argmax over each cell's window
    picks the value, and a table computed at import maps it to the index within the plane."""
    nd, shape = len(sizes), _input_shape(c, n)
    spatial = [_static(c, n, shape, len(shape) - nd + i, "returns pooling indices") for i in range(nd)]
    lead, windows, tables = tuple(shape[:-nd]), x, []
    for i, (size, out) in enumerate(zip(spatial, sizes)):
        cells = np.arange(out)
        starts, ends = (cells * size) // out, -((-(cells + 1) * size) // out)
        width = int((ends - starts).max())
        table = np.minimum(starts[:, None] + np.arange(width), ends[:, None] - 1).astype(np.int64)
        tables.append(table)
        windows = _emit(c, n, f"win{i}", "gather", [windows, Const(table)], {"axis": len(lead) + 2 * i})
    m = len(lead)
    perm = tuple(range(m)) + tuple(m + 2 * i for i in range(nd)) + tuple(m + 2 * i + 1 for i in range(nd))
    cells_shape, widths = tuple(sizes), tuple(t.shape[1] for t in tables)
    area = int(np.prod(widths, dtype=np.int64))
    moved = _emit(c, n, "cells", "transpose", [windows], {"perm": perm})
    flat = c.b.reshape(c.name(n) + ".flat", moved, lead + cells_shape + (area,))
    local = _emit(c, n, "local", "argmax", [flat], {"axis": -1, "keepdims": True})
    values = _emit(c, n, "", "squeeze", [_emit(c, n, "picked", "gather_elements", [flat, local], {"axis": -1})], {"axes": (-1,)})
    strides = [int(np.prod(spatial[i + 1:], dtype=np.int64)) for i in range(nd)]
    plane = np.zeros(cells_shape + widths, np.int64)
    for i, table in enumerate(tables):  # table i: (out_i, K_i) on axes i and nd + i
        view = [1] * (2 * nd)
        view[i], view[nd + i] = table.shape
        plane = plane + table.reshape(view) * strides[i]
    offsets = Const((np.arange(int(np.prod(cells_shape, dtype=np.int64)), dtype=np.int64) * area).reshape(cells_shape + (1,)))
    where = _emit(c, n, "where", "add", [local, offsets])
    index = _emit(c, n, "index", "gather", [Const(plane.reshape(-1)), where], {"axis": 0})
    return [values, _emit(c, n, "indices", "squeeze", [index], {"axes": (-1,)})]


def _tuple_keep_none(v: Sequence[Any], nd: int) -> tuple[Any, ...]:
    return tuple(v) * (nd if len(v) == 1 else 1)


def _adaptive_body(c: Any, n: Any, x: Value, op: str, nd: int, sizes: tuple[int, ...], shape: Sequence[Any]) -> Value:
    if nd == 2:
        return _emit(c, n, "", op, [x], {"output_size": sizes})
    if nd == 1:
        wide = _emit(c, n, "2d", "unsqueeze", [x], {"axes": (2,)})
        pooled = _emit(c, n, "pool", op, [wide], {"output_size": (1, sizes[0])})
        return _emit(c, n, "", "squeeze", [pooled], {"axes": (2,)})
    batch, ch, depth = shape[0], _static(c, n, shape, 1, "pools"), _static(c, n, shape, 2, "pools")
    planes = c.b.reshape(c.name(n) + ".planes", x, (batch, ch * depth) + tuple(shape[3:]), tuple(shape))
    hw = _emit(c, n, "hw", op, [planes], {"output_size": sizes[1:]})
    area = sizes[1] * sizes[2]
    columns = c.b.reshape(c.name(n) + ".columns", hw, (batch, ch, depth, area))
    pooled = _emit(c, n, "d", op, [columns], {"output_size": (sizes[0], area)})
    return c.b.reshape(c.name(n), pooled, (batch, ch) + sizes)


# ----------------------------------------------------------------------------- convolution
def conv_nd(c: Any, n: Any, x: Value, w: Value, bias: Any, stride: Any, padding: Any, dilation: Any, groups: int) -> Value:
    """Any-rank convolution as the opset's ``conv`` (weight and bias as inputs)."""
    nd = len(c.b.spec(w).shape) - 2
    st, dil = _tuple(stride, nd, 1), _tuple(dilation, nd, 1)
    if padding == "valid":
        padding = 0
    if padding == "same":
        kernel = c.b.spec(w).shape[2:]
        total = [dil[i] * (kernel[i] - 1) for i in range(nd)]
        pads = tuple(t // 2 for t in total) + tuple(t - t // 2 for t in total)
    else:
        pad = _tuple(padding, nd, 0)
        pads = pad + pad
    inputs = [x, w] + ([] if bias is None else [bias])
    attrs = {"strides": st, "pads": pads, "dilations": dil, "group": int(groups)}
    return _emit(c, n, "", "conv", inputs, attrs)


def conv_transpose_nd(c: Any, n: Any, x: Value, w: Value, bias: Any, stride: Any, padding: Any, output_padding: Any,
                      groups: int, dilation: Any) -> Value:
    """Any-rank transposed convolution as the opset's ``conv_transpose``."""
    nd = len(c.b.spec(w).shape) - 2
    pad = _tuple(padding, nd, 0)
    attrs = {"strides": _tuple(stride, nd, 1), "pads": pad + pad, "dilations": _tuple(dilation, nd, 1), "group": int(groups),
             "output_padding": _tuple(output_padding, nd, 0)}
    return _emit(c, n, "", "conv_transpose", [x, w] + ([] if bias is None else [bias]), attrs)


def _conv_handler(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """conv3d(input, weight, bias, stride, padding, dilation, groups)."""
    return conv_nd(c, n, a[0], a[1], _arg(a, k, 2, "bias"), _arg(a, k, 3, "stride", 1), _arg(a, k, 4, "padding", 0),
                   _arg(a, k, 5, "dilation", 1), int(_arg(a, k, 6, "groups", 1)))


def _conv_t_handler(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """conv_transpose{1,3}d(input, weight, bias, stride, padding, output_padding, groups, dilation)."""
    return conv_transpose_nd(c, n, a[0], a[1], _arg(a, k, 2, "bias"), _arg(a, k, 3, "stride", 1), _arg(a, k, 4, "padding", 0),
                             _arg(a, k, 5, "output_padding", 0), int(_arg(a, k, 6, "groups", 1)), _arg(a, k, 7, "dilation", 1))


# ----------------------------------------------------------------------------- normalisation
def _ones(c: Any, count: int, dtype: str, value: float = 1.0) -> Const:
    return Const(np.full((count,), value, np.dtype(dtype) if dtype != "bfloat16" else np.float32))


def batch_norm_nd(c: Any, n: Any, x: Value, w: Any, bias: Any, mean: Value, var: Value, eps: float) -> Value:
    """Inference batch norm over axis 1 of any rank (the ONNX BatchNormalization op)."""
    dtype, count = _dtype(c, x), int(c.b.spec(mean).shape[0])
    scale = _ones(c, count, dtype) if w is None else w
    shift = _ones(c, count, dtype, 0.0) if bias is None else bias
    return _emit(c, n, "", "batch_normalization", [x, scale, shift, mean, var], {"epsilon": float(eps)})


def _group_norm(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """group_norm(input, num_groups, weight, bias, eps)."""
    x, groups = a[0], int(a[1])
    dtype, ch = _dtype(c, x), _static(c, n, _input_shape(c, n), 1, "normalises")
    w, bias, eps = _arg(a, k, 2, "weight"), _arg(a, k, 3, "bias"), float(_arg(a, k, 4, "eps", 1e-5))
    scale = _ones(c, ch, dtype) if w is None else w
    shift = _ones(c, ch, dtype, 0.0) if bias is None else bias
    return _emit(c, n, "", "group_norm", [x, scale, shift], {"num_groups": groups, "epsilon": eps})


def _instance_norm(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """instance_norm(input, weight, bias, running_mean, running_var, use_input_stats, momentum, eps, cudnn)."""
    x = a[0]
    w, bias, mean, var = (_arg(a, k, i, name) for i, name in enumerate(("weight", "bias", "running_mean", "running_var"), 1))
    use_input_stats, eps = bool(_arg(a, k, 5, "use_input_stats", True)), float(_arg(a, k, 7, "eps", 1e-5))
    if not use_input_stats:
        if mean is None or var is None:
            raise c.fail(n, "normalises with running statistics it does not have")
        return batch_norm_nd(c, n, x, w, bias, mean, var, eps)
    dtype, ch = _dtype(c, x), _static(c, n, _input_shape(c, n), 1, "normalises")
    scale = _ones(c, ch, dtype) if w is None else w
    shift = _ones(c, ch, dtype, 0.0) if bias is None else bias
    return _emit(c, n, "", "instance_norm", [x, scale, shift], {"epsilon": eps})


def _rms_norm(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """rms_norm(input, normalized_shape, weight, eps): eps None is the dtype's machine epsilon."""
    x, normalized = a[0], tuple(int(d) for d in a[1])
    dtype = _dtype(c, x)
    w, eps = _arg(a, k, 2, "weight"), _arg(a, k, 3, "eps")
    if eps is None:
        eps = float(np.finfo(np.dtype(dtype) if dtype != "bfloat16" else np.float32).eps)
    scale = Const(np.ones(normalized, np.dtype(dtype) if dtype != "bfloat16" else np.float32)) if w is None else w
    return _emit(c, n, "", "rms_normalization", [x, scale], {"axis": -len(normalized), "epsilon": float(eps)})


# ----------------------------------------------------------------------------- distances, bilinear, embedding bags
def _p_norm(c: Any, n: Any, diff: Value, p: float, axis: int, tag: str) -> Value:
    """The p-norm of ``diff`` along ``axis`` as torch's distance kernels define it: p = 0 counts
    the nonzero entries, inf is the largest magnitude, else (sum |d| ** p) ** (1 / p)."""
    dtype, attrs = _dtype(c, diff), {"axes": (axis,), "keepdims": False}
    mag = _emit(c, n, f"{tag}.abs", "abs", [diff])
    if p == 0:
        nonzero = c.b.cast_to(f"{c.name(n)}.{tag}.nz", _emit(c, n, f"{tag}.ne", "not_equal", [diff, _scalar(0.0, dtype)]), dtype)
        return _emit(c, n, tag, "reduce_sum", [nonzero], attrs)
    if math.isinf(p):
        return _emit(c, n, tag, "reduce_max", [mag], attrs)
    if p == 1:
        return _emit(c, n, tag, "reduce_sum", [mag], attrs)
    if p == 2:
        return _emit(c, n, tag, "sqrt", [_emit(c, n, f"{tag}.ss", "reduce_sum", [_emit(c, n, f"{tag}.sq", "mul", [mag, mag])], attrs)])
    powered = _emit(c, n, f"{tag}.pow", "pow", [mag, _scalar(p, dtype)])
    return _emit(c, n, tag, "pow", [_emit(c, n, f"{tag}.sum", "reduce_sum", [powered], attrs), _scalar(1.0 / p, dtype)])


def _cdist(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """_cdist_forward(x1 (*, P, M), x2 (*, R, M), p, compute_mode) -> (*, P, R). p = 2 takes
    torch's matrix-product form where compute_mode asks for it (1, or None/0 with P or R over
    25): |a|^2 - 2 a.b + |b|^2 as one matmul of padded rows, clamped at 0; otherwise, and for
    every other p, the norm of the pairwise differences."""
    x1, x2, p = a[0], a[1], float(a[2])
    mode = int(_arg(a, k, 3, "compute_mode", 0))
    shape1, shape2 = _input_shape(c, n, 0), _input_shape(c, n, 1)
    rows, cols = shape1[-2], shape2[-2]
    big = not (isinstance(rows, int) and rows <= 25 and isinstance(cols, int) and cols <= 25)
    if p == 2 and (mode == 1 or (mode == 0 and big)):
        return _euclid_mm(c, n, x1, x2)
    diff = _emit(c, n, "diff", "sub", [_emit(c, n, "a", "unsqueeze", [x1], {"axes": (-2,)}), _emit(c, n, "b", "unsqueeze", [x2], {"axes": (-3,)})])
    return _p_norm(c, n, diff, p, -1, "")


def _euclid_mm(c: Any, n: Any, x1: Value, x2: Value) -> Value:
    """torch's _euclidean_dist: [-2 a, |a|^2, 1] @ [b, 1, |b|^2]^T, clamped at 0, square-rooted."""
    dtype = _dtype(c, x1)
    norms = [_emit(c, n, f"{t}.norm", "reduce_sum", [_emit(c, n, f"{t}.sq", "mul", [v, v])], {"axes": (-1,), "keepdims": True})
             for t, v in (("a", x1), ("b", x2))]
    one = Const(np.ones((1,) * _rank(c, x1), np.dtype(dtype)))
    ones = [_emit(c, n, f"{t}.one", "expand", [one], {"shape": tuple(_input_shape(c, n, i)[:-1]) + (1,)}) for i, t in enumerate("ab")]
    left = _emit(c, n, "left", "concat", [_emit(c, n, "a.m2", "mul", [x1, _scalar(-2.0, dtype)]), norms[0], ones[0]], {"axis": -1})
    right = _emit(c, n, "right", "concat", [x2, ones[1], norms[1]], {"axis": -1})
    rank = _rank(c, x2)
    perm = tuple(range(rank - 2)) + (rank - 1, rank - 2)
    prod = _emit(c, n, "mm", "matmul", [left, _emit(c, n, "right.t", "transpose", [right], {"perm": perm})])
    return _emit(c, n, "", "sqrt", [_emit(c, n, "clamp", "maximum", [prod, _scalar(0.0, dtype)])])


def _pdist(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """_pdist_forward(x (N, M), p): the distances of rows i < j in row-major order."""
    x, p = a[0], float(_arg(a, k, 1, "p", 2.0))
    count = _static(c, n, _input_shape(c, n), 0, "pairs rows")
    first, second = np.triu_indices(count, 1)
    rows = [_emit(c, n, f"rows{i}", "gather", [x, Const(idx.astype(np.int64))], {"axis": 0}) for i, idx in enumerate((first, second))]
    return _p_norm(c, n, _emit(c, n, "diff", "sub", rows), p, -1, "")


def _trilinear(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """_trilinear(i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim) (nn.functional.bilinear):
    each input with size-1 axes inserted at its expand dims, the three multiplied (broadcast)
    and summed over sumdim."""
    lifted = [a[i] if not a[3 + i] else _emit(c, n, f"in{i}", "unsqueeze", [a[i]], {"axes": tuple(sorted(int(d) for d in a[3 + i]))})
              for i in range(3)]
    prod = _emit(c, n, "prod", "mul", [_emit(c, n, "prod12", "mul", lifted[:2]), lifted[2]])
    sumdim = tuple(int(d) for d in a[6])
    return _emit(c, n, "", "reduce_sum", [prod], {"axes": sumdim, "keepdims": False}) if sumdim else prod


def _embedding_bag(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> list[Any]:
    """_embedding_bag(_forward_only)(weight, indices (L,), offsets, scale_grad_by_freq, mode,
    sparse, per_sample_weights, include_last_offset, padding_idx): each bag's rows summed,
    averaged or maxed (mode 0, 1, 2). Static shapes throughout: a (bags, L) membership matrix,
    bag b holding positions offsets[b] <= j < offsets[b + 1] (the last one to L, or to the last
    offset with include_last_offset) whose index is not padding_idx; sums are a matmul, an
    empty bag gives zeros. Only the bags' values are computed (the other results are
    bookkeeping for the backward pass)."""
    weight, indices, offsets = a[0], a[1], a[2]
    mode, per_sample = int(_arg(a, k, 4, "mode", 0)), _arg(a, k, 6, "per_sample_weights")
    last, padding = bool(_arg(a, k, 7, "include_last_offset", False)), int(_arg(a, k, 8, "padding_idx", -1))
    dtype, length = _dtype(c, weight), _static(c, n, _input_shape(c, n, 1), 0, "bags indices")
    bags = _static(c, n, _input_shape(c, n, 2), 0, "bags indices") - (1 if last else 0)
    offsets = c.b.cast_to(c.name(n) + ".offsets", offsets, "int64")
    starts = _emit(c, n, "starts", "slice", [offsets], {"starts": (0,), "ends": (bags,), "axes": (0,), "steps": (1,)})
    if last:
        ends = _emit(c, n, "ends", "slice", [offsets], {"starts": (1,), "ends": (bags + 1,), "axes": (0,), "steps": (1,)})
    else:
        later = _emit(c, n, "later", "slice", [offsets], {"starts": (1,), "ends": (_BIG,), "axes": (0,), "steps": (1,)})
        ends = _emit(c, n, "ends", "concat", [later, Const(np.asarray([length], np.int64))], {"axis": 0})
    position = Const(np.arange(length, dtype=np.int64).reshape(1, -1))
    column = {"axes": (1,)}
    inside = _emit(c, n, "inside", "logical_and", [
        _emit(c, n, "after", "greater_equal", [position, _emit(c, n, "starts.col", "unsqueeze", [starts], column)]),
        _emit(c, n, "before", "less", [position, _emit(c, n, "ends.col", "unsqueeze", [ends], column)])])
    if padding >= 0:
        kept = _emit(c, n, "kept", "not_equal", [indices, Const(np.asarray(padding, np.int64))])
        inside = _emit(c, n, "member", "logical_and", [inside, _emit(c, n, "kept.row", "unsqueeze", [kept], {"axes": (0,)})])
    rows = _emit(c, n, "rows", "gather", [weight, indices], {"axis": 0})
    if per_sample is not None:
        rows = _emit(c, n, "weighted", "mul", [rows, _emit(c, n, "psw", "unsqueeze", [per_sample], column)])
    member = c.b.cast_to(c.name(n) + ".member", inside, dtype)
    if mode == 2 and not length:
        raise c.fail(n, "takes the max of bags that hold no indices at all")
    if mode == 2:
        masked = _emit(c, n, "masked", "where", [_emit(c, n, "member3", "unsqueeze", [inside], {"axes": (2,)}),
                                                 _emit(c, n, "rows3", "unsqueeze", [rows], {"axes": (0,)}), _scalar(-np.inf, dtype)])
        peak = _emit(c, n, "peak", "reduce_max", [masked], {"axes": (1,), "keepdims": False})
        filled = _emit(c, n, "any", "reduce_max", [member], {"axes": (1,), "keepdims": True})
        out = _emit(c, n, "", "where", [_emit(c, n, "nonempty", "greater", [filled, _scalar(0.0, dtype)]), peak, _scalar(0.0, dtype)])
    else:
        out = _emit(c, n, "" if mode == 0 else "sum", "matmul", [member, rows])
        if mode == 1:
            count = _emit(c, n, "count", "reduce_sum", [member], {"axes": (1,), "keepdims": True})
            out = _emit(c, n, "", "div", [out, _emit(c, n, "count1", "maximum", [count, _scalar(1.0, dtype)])])
    why = "the bookkeeping results of embedding_bag (offset2bag, bag sizes, max indices)"
    return [out, Unavailable(why), Unavailable(why), Unavailable(why)]


# ----------------------------------------------------------------------------- resize and sampling
def _upsample(mode: str, nd: int, exact: bool = False, antialias: bool = False) -> Handler:
    """upsample_{nearest,linear,bilinear,trilinear,bicubic}{1,2,3}d (.vec and the per-axis
    scales overload) as resize. torch maps coordinates with 1/scale_factor when the scale is
    given, else in/out: resize with scales does the first, with sizes the second."""
    has_corners = mode != "nearest"

    def run(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
        x = a[0]
        rank = _rank(c, x)
        corners = bool(_arg(a, k, 2, "align_corners", False)) if has_corners else False
        rest = list(a[3:] if has_corners else a[2:])
        if getattr(n.target, "_overloadname", "") == "vec":
            factors = _arg(rest, k, 0, "scale_factors")
            factors = None if factors is None else tuple(float(f) for f in factors)
        else:
            given = [_arg(rest, k, i, f"scales_{axis}") for i, axis in enumerate("dhw"[3 - nd:])]
            factors = None if any(f is None for f in given) else tuple(float(f) for f in given)
        attrs: dict[str, Any] = {"axes": tuple(range(rank - nd, rank))}
        if factors is not None and not (mode != "nearest" and corners):
            attrs["scales"] = factors
        else:  # align_corners maps by (in-1)/(out-1) whatever the scale: the sizes say it
            attrs["sizes"] = tuple(c.sym_shape(n))[rank - nd:]
        if mode == "nearest":
            attrs |= ({"coordinate_transformation_mode": "half_pixel", "nearest_mode": "round_prefer_ceil"} if exact
                      else {"coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"})
        else:
            # half_pixel, not ONNX's pytorch_half_pixel: that one maps an output of size 1 to input
            # coordinate 0, where torch's kernels (area_pixel_compute_source_index) take the middle,
            # in/2 - 0.5 (a 7x9 image resized to 1x1 was 1.9 off). torch's antialiased kernels (PIL's)
            # leave out the taps past the edge and renormalize the rest, where ONNX's antialias
            # replicates the edge pixel into them: exclude_outside.
            attrs |= {"mode": mode, "coordinate_transformation_mode": "align_corners" if corners else "half_pixel",
                      "antialias": antialias, "exclude_outside": antialias}
            if mode == "cubic":  # torch's bicubic: A = -0.75, or PIL's -0.5 with antialias
                attrs["cubic_coeff_a"] = -0.5 if antialias else -0.75
        return _emit(c, n, "", "resize", [x], attrs)

    return run


def _grid_sampler(c: Any, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """grid_sampler(input, grid, interpolation_mode, padding_mode, align_corners) with torch's enums."""
    modes, paddings = {0: "linear", 1: "nearest", 2: "cubic"}, {0: "zeros", 1: "border", 2: "reflection"}
    mode, padding = int(a[2]), int(a[3])
    if mode not in modes or padding not in paddings:
        raise c.fail(n, f"uses interpolation mode {mode} / padding mode {padding}")
    return _emit(c, n, "", "grid_sample", [a[0], a[1]], {"mode": modes[mode], "padding_mode": paddings[padding],
                                                          "align_corners": bool(a[4])})


# ----------------------------------------------------------------------------- the table
HANDLERS: Final[dict[str, Handler]] = {
    # activations
    "elu": _elu, "selu": _unary("selu", alpha=1.6732632423543772, gamma=1.0507009873554805),
    "celu": lambda c, n, a, k: _emit(c, n, "", "celu", [a[0]], {"alpha": float(_arg(a, k, 1, "alpha", 1.0))}),
    "softplus": _softplus, "mish": _unary("mish"), "prelu": _prelu, "_prelu_kernel": _prelu, "log_sigmoid": _log_sigmoid,
    "threshold": _threshold, "glu": _glu,
    # elementwise math
    "isinf": _unary("isinf"), "isnan": _unary("isnan"), "round": _round, "trunc": _trunc, "fix": _trunc, "frac": _frac,
    "remainder": _binary_in("mod", fmod=False), "fmod": _binary_in("mod", fmod=True), "atan2": _atan2, "arctan2": _atan2, "hypot": _hypot,
    "div": _div, "floor_divide": _floor_divide, "pow": _pow,
    "maximum": _binary_in("maximum"), "minimum": _binary_in("minimum"),
    "expm1": _expm1, "log1p": _log1p, "log2": _log_base(2.0), "log10": _log_base(10.0), "exp2": _exp2, "square": _square,
    "tan": _float_unary("tan"), "asin": _float_unary("asin"), "acos": _float_unary("acos"), "atan": _float_unary("atan"),
    "sinh": _float_unary("sinh"), "cosh": _float_unary("cosh"), "asinh": _float_unary("asinh"), "acosh": _float_unary("acosh"),
    "atanh": _float_unary("atanh"), "softsign": _unary("softsign"), "nan_to_num": _nan_to_num,
    "lerp": _lerp, "addcmul": _addc("mul"), "addcdiv": _addc("div"), "baddbmm": _baddbmm,
    "addbmm": _addbmm, "_cdist_forward": _cdist, "_pdist_forward": _pdist, "_trilinear": _trilinear,
    "_embedding_bag_forward_only": _embedding_bag, "_embedding_bag": _embedding_bag,
    "put": _put, "masked_scatter": _masked_scatter, "as_strided_scatter": _as_strided_scatter, "diagonal_scatter": _diagonal_scatter,
    "resize": _resize, "nonzero_static": _nonzero_static, "take": _take, "bucketize": _bucketize,
    # refused by name: data-dependent output sizes, random draws, kernels with no opset form
    "nonzero": _refuse(_DATA_SIZED), "masked_select": _refuse(_DATA_SIZED), "_unique2": _refuse(_DATA_SIZED),
    "unique_dim": _refuse(_DATA_SIZED), "unique_consecutive": _refuse(_DATA_SIZED), "_unique": _refuse(_DATA_SIZED),
    "randn_like": _refuse(_RANDOM), "rand_like": _refuse(_RANDOM), "randint_like": _refuse(_RANDOM), "multinomial": _refuse(_RANDOM),
    "rrelu_with_noise": _refuse(_RANDOM), "rrelu_with_noise_functional": _refuse(_RANDOM),
    "fractional_max_pool2d": _refuse(_RANDOM_WINDOWS), "fractional_max_pool3d": _refuse(_RANDOM_WINDOWS),
    "hash_tensor": _refuse("hashes the bits of its input, which no opset op computes"),
    "_linear_cross_entropy_batch_chunked": _refuse("is PyTorch's chunked linear + cross-entropy kernel, which has no opset form; "
                                                   "compute linear then cross_entropy"),
    "_linear_cross_entropy_batch_chunked_no_reduction": _refuse("is PyTorch's chunked linear + cross-entropy kernel, which has no "
                                                                "opset form; compute linear then cross_entropy"),
    "signbit": _signbit, "fmax": _nan_ignoring("maximum"), "fmin": _nan_ignoring("minimum"), "angle": _angle,
    "frexp": _frexp, "nextafter": _nextafter,
    # logical and bitwise
    "logical_and": _logical("logical_and"), "logical_or": _logical("logical_or"), "logical_xor": _logical("logical_xor"),
    "bitwise_and": _bitwise("bitwise_and", "logical_and"), "__and__": _bitwise("bitwise_and", "logical_and"),
    "bitwise_or": _bitwise("bitwise_or", "logical_or"), "__or__": _bitwise("bitwise_or", "logical_or"),
    "bitwise_xor": _bitwise("bitwise_xor", "logical_xor"), "__xor__": _bitwise("bitwise_xor", "logical_xor"),
    "bitwise_not": _bitwise_not, "__lshift__": _shift("left"), "__rshift__": _shift("right"),
    "bitwise_left_shift": _shift("left"), "bitwise_right_shift": _shift("right"),
    # reductions
    "max": _minmax("reduce_max", "argmax", "maximum"), "min": _minmax("reduce_min", "argmin", "minimum"),
    "argmax": _arg_reduce("argmax"), "argmin": _arg_reduce("argmin"),
    "var": _var(False, False), "std": _var(True, False), "var_mean": _var(False, True), "std_mean": _var(True, True),
    "linalg_vector_norm": _vector_norm, "any": _any_all("reduce_max"), "all": _any_all("reduce_min"), "logsumexp": _logsumexp,
    "cosine_similarity": _cosine_similarity, "mse_loss": _mse_loss,
    # scans and sorting
    "cumsum": _cum("cumsum"), "cumprod": _cum("cumprod"), "topk": _topk, "sort": _sort, "argsort": _argsort,
    # shapes and indexing
    "roll": _roll, "diff": _diff, "flip": _flip, "repeat": _repeat, "tile": _tile, "tril": _trilu(False), "triu": _trilu(True),
    "one_hot": _one_hot, "einsum": _einsum, "broadcast_tensors": _broadcast_tensors,
    "zeros_like": _like(0), "ones_like": _like(1), "empty_like": _like(0), "full_like": _like(None),
    "pixel_shuffle": _pixel_shuffle, "pixel_unshuffle": _pixel_unshuffle,
    "scatter": _scatter, "scatter_add": _scatter, "index_copy": _index_copy, "slice_scatter": _slice_scatter, "grouped_mm_fallback": _grouped_mm, "as_strided": _as_strided, "scatter_reduce": _scatter, "index_put": _index_put,
    # pooling
    "max_pool1d": _pool_nd("max", 1), "max_pool2d": _pool_nd("max", 2), "max_pool3d": _pool_nd("max", 3),
    "max_pool1d_with_indices": _pool_nd("max", 1, True), "max_pool2d_with_indices": _pool_nd("max", 2, True),
    "max_pool3d_with_indices": _pool_nd("max", 3, True),
    "avg_pool1d": _pool_nd("avg", 1), "avg_pool2d": _pool_nd("avg", 2), "avg_pool3d": _pool_nd("avg", 3),
    "adaptive_avg_pool1d": _adaptive("avg", 1), "adaptive_avg_pool2d": _adaptive("avg", 2), "_adaptive_avg_pool2d": _adaptive("avg", 2),
    "adaptive_avg_pool3d": _adaptive("avg", 3), "_adaptive_avg_pool3d": _adaptive("avg", 3),
    "adaptive_max_pool1d": _adaptive("max", 1), "adaptive_max_pool2d": _adaptive("max", 2), "adaptive_max_pool3d": _adaptive("max", 3),
    # convolution
    "conv3d": _conv_handler, "conv_transpose1d": _conv_t_handler, "conv_transpose3d": _conv_t_handler,
    # normalisation
    "group_norm": _group_norm, "instance_norm": _instance_norm, "rms_norm": _rms_norm,
    # resize and sampling
    "upsample_nearest1d": _upsample("nearest", 1), "upsample_nearest2d": _upsample("nearest", 2),
    "upsample_nearest3d": _upsample("nearest", 3), "_upsample_nearest_exact1d": _upsample("nearest", 1, exact=True),
    "_upsample_nearest_exact2d": _upsample("nearest", 2, exact=True), "_upsample_nearest_exact3d": _upsample("nearest", 3, exact=True),
    "upsample_linear1d": _upsample("linear", 1), "upsample_bilinear2d": _upsample("linear", 2),
    "upsample_trilinear3d": _upsample("linear", 3), "upsample_bicubic2d": _upsample("cubic", 2),
    "_upsample_bilinear2d_aa": _upsample("linear", 2, antialias=True), "_upsample_bicubic2d_aa": _upsample("cubic", 2, antialias=True),
    "grid_sampler": _grid_sampler, "grid_sampler_2d": _grid_sampler, "grid_sampler_3d": _grid_sampler,
}
