"""Elementwise arithmetic, comparisons, unary math, activations and the matmul family (ONNX's math family).

Dtypes follow ONNX: an elementwise op returns its inputs' common type (ONNX gives both the same
type; the torch.export importer may mix them, where ``_promote`` decides), ``pow`` returns the
base's type, comparisons return bool. Every ref returns exactly the dtype its ``infer`` declares:
float16 / bfloat16 math is computed in float32 and rounded once to the input's type (what ONNX's
reference and the runtimes do), float64 stays float64, integers stay integers.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from neurenix_core.backends import cpu_nn as K
from neurenix_core.graph.opset.schema import (
    REQUIRED,
    Arrays,
    Attrs,
    Builder,
    Params,
    Ref,
    Shape,
    _axis,
    _broadcast,
    _compare,
    _const_dtype,
    _def,
    _elementwise,
    _elementwise_flops,
    _float_only,
    _np_dtype,
    _numel,
    _promote,
    _same,
)
from neurenix_core.graph.opset.special import erf as _erf64


# ----------------------------------------------------------------------------- dtype helpers
def _is_half(dtype: np.dtype[Any]) -> bool:
    return dtype == np.float16 or dtype.name == "bfloat16"


def _wide(x: np.ndarray) -> np.ndarray:
    """``x`` in the dtype its math runs in: float32 for float16/bfloat16, float64 for integers
    (an activation's float attributes apply to them), itself otherwise."""
    if _is_half(x.dtype):
        return x.astype(np.float32)
    if x.dtype.kind in "iub":
        return x.astype(np.float64)
    return x


def _as(out: Any, dtype: np.dtype[Any]) -> np.ndarray:
    return np.asarray(out).astype(dtype, copy=False)


def _result_dtype(arrays: Sequence[np.ndarray]) -> np.dtype[Any]:
    """The dtype ``_elementwise`` infers for these arrays."""
    return _np_dtype(_promote([_const_dtype(np.asarray(v)) for v in arrays]))


def _float_ref(fn: Callable[..., Any]) -> Ref:
    """A ref computing ``fn(x_wide, attrs)`` and returning the input's dtype."""
    return lambda a, x, p: _as(fn(_wide(x[0]), a), x[0].dtype)


def _numeric(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    if d[0] == "bool":
        raise ValueError("expects a numeric input, got bool")
    return s[0], d[0]


# ----------------------------------------------------------------------------- elementwise arithmetic
def _div(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if x.dtype.kind in "iu" and y.dtype.kind in "iu":
        # ONNX (C semantics): integer division truncates toward zero; stay in integers so int64 keeps its precision.
        with np.errstate(divide="ignore"):
            q, r = np.floor_divide(x, y), np.remainder(x, y)
        return q + ((r != 0) & ((x < 0) ^ (y < 0))).astype(q.dtype)
    return np.divide(x, y)


_BINARY: dict[str, tuple[Callable[[np.ndarray, np.ndarray], np.ndarray], str]] = {
    "add": (np.add, "a + b"), "sub": (np.subtract, "a - b"), "mul": (np.multiply, "a * b"), "div": (_div, "a / b (integers truncate toward zero)"),
    "maximum": (np.maximum, "elementwise max (NaN propagates)"), "minimum": (np.minimum, "elementwise min (NaN propagates)"),
}


def _binary_ref(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Ref:
    def ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
        with np.errstate(all="ignore"):  # integer overflow wraps and x/0 is inf, as in ONNX's reference
            return _as(fn(x[0], x[1]), _result_dtype(x))

    return ref


for _name, (_fn, _doc) in _BINARY.items():
    _def(_name, "elementwise", _doc + ", broadcasting", ("a", "b"), _elementwise, _binary_ref(_fn), flops=_elementwise_flops)


def _pow_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    return _broadcast(s), d[0]


def _pow_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    base, exp = x
    if base.dtype.kind in "iu" and exp.dtype.kind in "iu" and not (exp < 0).any():
        return _as(np.power(base, exp), base.dtype)  # exact integer powers (int64 beyond 2**53 too)
    with np.errstate(all="ignore"):
        return _as(np.power(_wide(base), _wide(exp) if exp.dtype.kind in "iub" or _is_half(exp.dtype) else exp), base.dtype)


_def("pow", "elementwise", "a ** b, broadcasting; the result has a's dtype (ONNX Pow)", ("a", "b"), _pow_rule, _pow_ref,
     flops=_elementwise_flops)


def _mod_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    with np.errstate(all="ignore"):
        out = np.fmod(x[0], x[1]) if a["fmod"] else np.mod(x[0], x[1])
    return _as(out, _result_dtype(x))


_def("mod", "elementwise", "remainder, broadcasting: the divisor's sign (fmod=False, Python's %) or the dividend's (fmod=True, C fmod)",
     ("a", "b"), _elementwise, _mod_ref, attrs={"fmod": False}, flops=_elementwise_flops)

# ----------------------------------------------------------------------------- comparisons
_COMPARE: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "equal": np.equal, "not_equal": np.not_equal, "less": np.less, "less_equal": np.less_equal,
    "greater": np.greater, "greater_equal": np.greater_equal, "logical_and": np.logical_and, "logical_or": np.logical_or,
}
def _compare_ref(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Ref:
    return lambda a, x, p: np.asarray(fn(x[0], x[1]))


for _name, _fn in _COMPARE.items():
    _def(_name, "comparison", f"{_name}(a, b) -> bool, broadcasting", ("a", "b"), _compare, _compare_ref(_fn))


def _to_bool(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    return s[0], "bool"


def _isinf_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    v = _wide(x[0])
    return np.asarray((np.isposinf(v) & bool(a["detect_positive"])) | (np.isneginf(v) & bool(a["detect_negative"])))


_def("logical_not", "comparison", "not a -> bool", ("x",), _to_bool, lambda a, x, p: np.logical_not(x[0]))
_def("isnan", "comparison", "x is NaN -> bool (ONNX IsNaN)", ("x",), _to_bool, lambda a, x, p: np.isnan(_wide(x[0])))
_def("isinf", "comparison", "x is +inf (detect_positive) or -inf (detect_negative) -> bool (ONNX IsInf)", ("x",), _to_bool,
     _isinf_ref, attrs={"detect_positive": True, "detect_negative": True})


# ----------------------------------------------------------------------------- unary math
def _erf(x: np.ndarray) -> np.ndarray:
    if x.dtype == np.float64:
        # The CPU kernel's fit is exact to 1.2e-7, a float32 ulp: float64 takes Cephes' erf (the
        # special family's), exact to a float64 ulp, as PyTorch's float64 erf is.
        return _erf64(x)
    return K.erf(x).astype(x.dtype, copy=False)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return K.sigmoid(x).astype(x.dtype, copy=False)


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(x, np.zeros((), x.dtype))  # log(1 + e**x) without overflow


_UNARY_FLOAT: dict[str, tuple[Callable[[np.ndarray], np.ndarray], str]] = {
    "exp": (np.exp, "e ** x"), "log": (np.log, "natural log"), "sqrt": (np.sqrt, "square root"),
    "rsqrt": (lambda x: 1 / np.sqrt(x), "1 / sqrt(x)"), "reciprocal": (lambda x: 1 / x, "1 / x"),
    "sin": (np.sin, "sine"), "cos": (np.cos, "cosine"), "tan": (np.tan, "tangent"),
    "asin": (np.arcsin, "arcsine"), "acos": (np.arccos, "arccosine"), "atan": (np.arctan, "arctangent"),
    "sinh": (np.sinh, "hyperbolic sine"), "cosh": (np.cosh, "hyperbolic cosine"), "asinh": (np.arcsinh, "inverse hyperbolic sine"),
    "acosh": (np.arccosh, "inverse hyperbolic cosine"), "atanh": (np.arctanh, "inverse hyperbolic tangent"),
    "erf": (_erf, "error function"), "tanh": (np.tanh, "hyperbolic tangent"), "sigmoid": (_sigmoid, "1 / (1 + e ** -x)"),
    "floor": (np.floor, "round down"), "ceil": (np.ceil, "round up"), "round": (np.round, "round to nearest, halves to even"),
    "softplus": (_softplus, "log(1 + e ** x)"), "softsign": (lambda x: x / (1 + np.abs(x)), "x / (1 + |x|)"),
    "mish": (lambda x: x * np.tanh(_softplus(x)), "x * tanh(softplus(x))"),
}


def _unary_float_ref(fn: Callable[[np.ndarray], np.ndarray]) -> Ref:
    def ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
        with np.errstate(all="ignore"):  # log(-1) is NaN and exp overflows to inf, as in ONNX
            return _as(fn(_wide(x[0])), x[0].dtype)

    return ref


for _name, (_unary, _doc) in _UNARY_FLOAT.items():
    _def(_name, "unary", _doc, ("x",), _float_only, _unary_float_ref(_unary), flops=_elementwise_flops)

_UNARY_ANY: dict[str, tuple[Callable[[np.ndarray], np.ndarray], str]] = {
    "neg": (np.negative, "-x"), "abs": (np.abs, "|x|"), "sign": (np.sign, "-1, 0 or 1"),
    "relu": (K.relu, "max(x, 0)"), "identity": (lambda x: x, "x"),
}
def _unary_any_ref(fn: Callable[[np.ndarray], np.ndarray]) -> Ref:
    return lambda a, x, p: _as(fn(x[0]), x[0].dtype)


for _name, (_unary, _doc) in _UNARY_ANY.items():
    _def(_name, "unary", _doc, ("x",), _same, _unary_any_ref(_unary), flops=_elementwise_flops)

_def("dropout", "unary", "identity at inference (p kept for the record)", ("x",), _same, lambda a, x, p: x[0], attrs={"p": 0.5})


def _clip_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    if a["min"] is None and a["max"] is None:
        return x[0]
    return _as(np.clip(x[0], a["min"], a["max"]), x[0].dtype)


_def("clip", "unary", "min(max(x, min), max); None = unbounded (ONNX Clip with run-time bounds: maximum then minimum)",
     ("x",), _same, _clip_ref, attrs={"min": None, "max": None}, flops=_elementwise_flops)

# ----------------------------------------------------------------------------- activations
_def("leaky_relu", "activation", "x if x >= 0 else alpha * x", ("x",), _float_only,
     _float_ref(lambda x, a: np.where(x >= 0, x, x * a["alpha"])), attrs={"alpha": 0.01}, flops=_elementwise_flops)
_def("hardsigmoid", "activation", "clip(alpha * x + beta, 0, 1) (ONNX; PyTorch's is alpha=1/6, beta=0.5)", ("x",), _float_only,
     _float_ref(lambda x, a: np.clip(x * a["alpha"] + a["beta"], 0, 1)), attrs={"alpha": 1.0 / 6.0, "beta": 0.5},
     flops=_elementwise_flops)


def _prelu_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    if _broadcast(s) != s[0]:
        raise ValueError(f"slope {s[1]} does not broadcast to the input's shape {s[0]}")
    return _numeric(a, s, d, p)


_def("prelu", "activation", "x if x >= 0 else slope * x (slope an input broadcast to x, ONNX PRelu)", ("x", "slope"), _prelu_rule,
     lambda a, x, p: _as(np.where(x[0] < 0, x[0] * x[1], x[0]), x[0].dtype), flops=_elementwise_flops)
_def("elu", "activation", "x if x > 0 else alpha * (e ** x - 1)", ("x",), _float_only,
     _float_ref(lambda x, a: np.where(x > 0, x, a["alpha"] * np.expm1(np.minimum(x, 0)))), attrs={"alpha": 1.0}, flops=_elementwise_flops)
_def("selu", "activation", "gamma * (x if x > 0 else alpha * (e ** x - 1)) (ONNX's default alpha and gamma)", ("x",), _float_only,
     _float_ref(lambda x, a: a["gamma"] * np.where(x > 0, x, a["alpha"] * np.expm1(np.minimum(x, 0)))),
     attrs={"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875}, flops=_elementwise_flops)
_def("celu", "activation", "max(0, x) + min(0, alpha * (e ** (x / alpha) - 1))", ("x",), _float_only,
     _float_ref(lambda x, a: np.maximum(x, 0) + np.minimum(0, a["alpha"] * np.expm1(np.minimum(x, 0) / a["alpha"]))),
     attrs={"alpha": 1.0}, flops=_elementwise_flops)
_def("thresholded_relu", "activation", "x if x > alpha else 0", ("x",), _float_only,
     _float_ref(lambda x, a: np.where(x > a["alpha"], x, 0)), attrs={"alpha": 1.0}, flops=_elementwise_flops)
_def("shrink", "activation", "x + bias if x < -lambd, x - bias if x > lambd, else 0 (ONNX Shrink)", ("x",), _numeric,
     _float_ref(lambda x, a: np.where(x < -a["lambd"], x + a["bias"], np.where(x > a["lambd"], x - a["bias"], 0))),
     attrs={"bias": 0.0, "lambd": 0.5}, flops=_elementwise_flops)


def _gelu_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    return K.gelu(_wide(x[0]), a["approximate"]).astype(x[0].dtype, copy=False)


def _gelu_dec(b: Builder, i: list[str], a: Attrs, p: Params) -> str:
    x = i[0]
    if a["approximate"] == "tanh":
        # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        cube = b.op("mul", [b.op("mul", [x, x]), x])
        inner = b.op("mul", [b.op("add", [x, b.op("mul", [cube, b.const(np.float32(0.044715))])]), b.const(np.float32(math.sqrt(2.0 / math.pi)))])
        t = b.op("add", [b.op("tanh", [inner]), b.const(np.float32(1.0))])
    else:
        t = b.op("add", [b.op("erf", [b.op("mul", [x, b.const(np.float32(1.0 / math.sqrt(2.0)))])]), b.const(np.float32(1.0))])
    return b.op("mul", [b.op("mul", [x, t]), b.const(np.float32(0.5))])


_def("gelu", "activation", "x * Phi(x); approximate 'none' (erf) or 'tanh'", ("x",), _float_only, _gelu_ref,
     attrs={"approximate": "none"}, decompose=_gelu_dec, flops=_elementwise_flops)
_def("silu", "activation", "x * sigmoid(x)", ("x",), _float_only, _float_ref(lambda x, a: x * K.sigmoid(x)),
     decompose=lambda b, i, a, p: b.op("mul", [i[0], b.op("sigmoid", [i[0]])]), flops=_elementwise_flops)
_def("hardswish", "activation", "x * hardsigmoid(x) (alpha=1/6, beta=0.5)", ("x",), _float_only,
     _float_ref(lambda x, a: x * np.clip(x / 6 + 0.5, 0, 1)),
     decompose=lambda b, i, a, p: b.op("mul", [i[0], b.op("hardsigmoid", [i[0]])]), flops=_elementwise_flops)


def _log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    t = x - x.max(axis=axis, keepdims=True)
    return t - np.log(np.exp(t).sum(axis=axis, keepdims=True))


def _hardmax(x: np.ndarray, axis: int) -> np.ndarray:
    out = np.zeros_like(x)
    if x.size:
        np.put_along_axis(out, np.expand_dims(np.argmax(x, axis=axis), axis), 1, axis=axis)  # the first maximum wins ties
    return out


def _axis_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    _axis(a["axis"], len(s[0]))
    return _float_only(a, s, d, p)


def _axis_ref(fn: Callable[[np.ndarray, int], np.ndarray]) -> Ref:
    return lambda a, x, p: _as(fn(_wide(x[0]), _axis(a["axis"], x[0].ndim)), x[0].dtype)


_def("softmax", "activation", "exp(x) / sum(exp(x)) along axis", ("x",), _axis_rule, _axis_ref(K.softmax), attrs={"axis": -1},
     flops=lambda a, s, o, p: 5 * _numel(o))
_def("log_softmax", "activation", "x - log(sum(exp(x))) along axis", ("x",), _axis_rule, _axis_ref(_log_softmax), attrs={"axis": -1},
     flops=lambda a, s, o, p: 5 * _numel(o))
_def("hardmax", "activation", "1 where x is the first maximum along axis, else 0 (ONNX Hardmax)", ("x",), _axis_rule,
     _axis_ref(_hardmax), attrs={"axis": -1}, flops=lambda a, s, o, p: 2 * _numel(o))


# ----------------------------------------------------------------------------- scans
def _cum_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    if not s[0]:
        raise ValueError("needs an input of at least one dimension")
    _axis(a["axis"], len(s[0]))
    return _numeric(a, s, d, p)


def _cum_ref(fn: Callable[..., np.ndarray], identity: int) -> Ref:
    def ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
        v, ax = x[0], _axis(a["axis"], x[0].ndim)
        if a["reverse"]:
            v = np.flip(v, ax)
        with np.errstate(all="ignore"):
            out = fn(_wide(v) if _is_half(v.dtype) else v, axis=ax)
        if a["exclusive"]:
            # shift by one along the axis: element i holds the scan of elements before i
            first = np.full_like(np.take(out, [0], axis=ax), identity)
            out = np.concatenate([first, np.delete(out, -1, axis=ax)], axis=ax)
        if a["reverse"]:
            out = np.flip(out, ax)
        return _as(np.ascontiguousarray(out), x[0].dtype)

    return ref


_SCAN_ATTRS = {"axis": REQUIRED, "exclusive": False, "reverse": False}
_def("cumsum", "scan", "running sum along axis (exclusive: shifted by one, reverse: from the end), ONNX CumSum", ("x",),
     _cum_rule, _cum_ref(np.cumsum, 0), attrs=_SCAN_ATTRS, flops=_elementwise_flops)
_def("cumprod", "scan", "running product along axis (exclusive: shifted by one, reverse: from the end), ONNX CumProd", ("x",),
     _cum_rule, _cum_ref(np.cumprod, 1), attrs=_SCAN_ATTRS, flops=_elementwise_flops)


# ----------------------------------------------------------------------------- matmul family
def _matmul_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    x, y = s
    if not x or not y:
        raise ValueError("matmul needs inputs of at least one dimension")
    x2, y2 = (x if len(x) > 1 else (1,) + x), (y if len(y) > 1 else y + (1,))
    if x2[-1] != y2[-2]:
        raise ValueError(f"matmul: inner dimensions differ ({x} @ {y})")
    out = _broadcast([x2[:-2], y2[:-2]]) + (x2[-2], y2[-1])
    if len(x) == 1:
        out = out[:-2] + out[-1:]
    if len(y) == 1:
        out = out[:-1]
    return out, _promote(d)


def _matmul_flops(a: Attrs, s: list[Shape], out: Shape, p: Params) -> int:
    return 2 * _numel(out) * s[0][-1]


def _product(x: np.ndarray) -> np.ndarray:
    """A float operand of a product: half floats accumulate in float32 (as the runtimes do)."""
    return x.astype(np.float32) if _is_half(x.dtype) else x


_def("matmul", "linear algebra", "matrix product with NumPy/ONNX MatMul broadcasting", ("a", "b"), _matmul_rule,
     lambda a, x, p: _as(np.matmul(_product(x[0]), _product(x[1])), _result_dtype(x)), flops=_matmul_flops)


def _gemm_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    x, y = s[0], s[1]
    if len(x) != 2 or len(y) != 2:
        raise ValueError(f"gemm takes 2-D a and b, got {x} and {y}")
    m, k = x[::-1] if a["trans_a"] else x
    k2, n = y[::-1] if a["trans_b"] else y
    if k != k2:
        raise ValueError(f"gemm: inner dimensions differ ({k} vs {k2})")
    if len(s) > 2 and _broadcast([(m, n), s[2]]) != (m, n):
        raise ValueError(f"gemm: c of shape {s[2]} does not broadcast to the product's {(m, n)}")
    return (m, n), _promote(d)


def _gemm_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    A = _product(x[0].T if a["trans_a"] else x[0])
    B = _product(x[1].T if a["trans_b"] else x[1])
    out = (A @ B) * a["alpha"] if a["alpha"] != 1.0 else A @ B
    if len(x) > 2:
        out = out + (_product(x[2]) * a["beta"] if a["beta"] != 1.0 else _product(x[2]))
    return _as(out, _result_dtype(x))


_def("gemm", "linear algebra", "alpha * a' @ b' + beta * c (ONNX Gemm; ' = transposed when trans_a/trans_b)",
     ("a", "b", "c?"), _gemm_rule, _gemm_ref, attrs={"alpha": 1.0, "beta": 1.0, "trans_a": False, "trans_b": False},
     flops=lambda a, s, o, p: 2 * _numel(o) * (s[0][0] if a["trans_a"] else s[0][1]))


def _einsum_terms(equation: str, count: int) -> tuple[list[str], str]:
    """The input terms and the output term of an einsum equation (implicit output: the ellipsis,
    then the labels used once, sorted, as NumPy and ONNX define it)."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != count:
        raise ValueError(f"einsum equation {equation!r} has {len(terms)} input term(s) for {count} input(s)")
    if not arrow:
        once = sorted(c for c, k in Counter(c for c in lhs if c.isalpha()).items() if k == 1)
        rhs = ("..." if "..." in lhs else "") + "".join(once)
    for t in terms + [rhs]:
        if t.count("...") > 1 or not all(c.isalpha() for c in t.replace("...", "")):
            raise ValueError(f"einsum equation {equation!r} has a malformed term {t!r}")
    return terms, rhs


def _einsum_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    terms, rhs = _einsum_terms(a["equation"], len(s))
    sizes: dict[str, int] = {}
    ellipsis: Shape = ()
    for term, shape in zip(terms, s):
        head, dots, tail = term.partition("...")
        labelled = len(head) + len(tail)
        if labelled > len(shape) or (not dots and labelled != len(shape)):
            raise ValueError(f"einsum term {term!r} does not fit an input of shape {shape}")
        if dots:
            ellipsis = _broadcast([ellipsis, shape[len(head):len(shape) - len(tail)]])
        for label, size in list(zip(head, shape)) + list(zip(tail, shape[len(shape) - len(tail):])):
            if sizes.setdefault(label, size) != size:
                raise ValueError(f"einsum label {label!r} has sizes {sizes[label]} and {size}")
    head, dots, tail = rhs.partition("...")
    if len(set(head + tail)) != len(head + tail) or not set(head + tail) <= set(sizes):
        raise ValueError(f"einsum output {rhs!r} repeats a label or names one no input has")
    out = tuple(sizes[c] for c in head) + (ellipsis if dots else ()) + tuple(sizes[c] for c in tail)
    return out, _promote(d)


_def("einsum", "linear algebra", "Einstein summation over the inputs by equation (ONNX/NumPy einsum, '...' broadcasts)", ("x*",),
     _einsum_rule, lambda a, x, p: _as(np.einsum(a["equation"], *[_product(v) for v in x]), _result_dtype(x)),
     attrs={"equation": REQUIRED})


def _det_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    x = s[0]
    if len(x) < 2 or x[-1] != x[-2]:
        raise ValueError(f"needs square matrices in the last two dimensions, got shape {x}")
    return x[:-2], _float_only(a, s, d, p)[1]


_def("det", "linear algebra", "determinant of the square matrices in the last two dimensions (ONNX Det)", ("x",), _det_rule,
     lambda a, x, p: _as(np.linalg.det(_product(x[0])), x[0].dtype))


def _linear_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    x, w = s[0], p["weight"].shape
    if not x or x[-1] != w[1]:
        raise ValueError(f"linear expects a last dimension of {w[1]}, got shape {x}")
    return x[:-1] + (int(w[0]),), d[0]


def _linear_dec(b: Builder, i: list[str], a: Attrs, p: Params) -> str:
    out = b.op("matmul", [i[0], b.const(np.ascontiguousarray(np.asarray(p["weight"]).T))])
    return out if p.get("bias") is None else b.op("add", [out, b.const(np.asarray(p["bias"]))])


_def("linear", "linear algebra", "x @ weight.T + bias (weight (out, in) on the node)", ("x",), _linear_rule,
     lambda a, x, p: K.linear(x[0], p["weight"].astype(x[0].dtype), None if p.get("bias") is None else p["bias"].astype(x[0].dtype)),
     attrs={"in_features": None, "out_features": None}, params=("weight", "bias?"), decompose=_linear_dec,
     flops=lambda a, s, o, p: 2 * _numel(o) * int(p["weight"].shape[1]))
