"""Elementwise arithmetic, comparisons, unary math, activations and the matmul family."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from neurenix_core.backends import cpu_nn as K
from neurenix_core.graph.opset.schema import (
    Arrays, Attrs, Builder, Params, Shape, _axis, _broadcast, _compare, _def, _elementwise, _elementwise_flops, _f, _float_only, _numel, _promote, _same,
)

# ----------------------------------------------------------------------------- elementwise
def _div(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if x.dtype.kind in "iu" and y.dtype.kind in "iu":
        return np.trunc(x / y).astype(np.result_type(x, y))  # ONNX: integer division truncates
    return np.divide(x, y)


_BINARY: dict[str, tuple[Callable[[np.ndarray, np.ndarray], np.ndarray], str]] = {
    "add": (np.add, "a + b"), "sub": (np.subtract, "a - b"), "mul": (np.multiply, "a * b"), "div": (_div, "a / b (integers truncate)"),
    "pow": (np.power, "a ** b"), "maximum": (np.maximum, "elementwise max"), "minimum": (np.minimum, "elementwise min"),
}
for _name, (_fn, _doc) in _BINARY.items():
    _def(_name, "elementwise", _doc + ", broadcasting", ("a", "b"), _elementwise,
         lambda a, x, p, fn=_fn: np.asarray(fn(x[0], x[1])), flops=_elementwise_flops)

_COMPARE: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "equal": np.equal, "not_equal": np.not_equal, "less": np.less, "less_equal": np.less_equal,
    "greater": np.greater, "greater_equal": np.greater_equal, "logical_and": np.logical_and, "logical_or": np.logical_or,
}
for _name, _fn in _COMPARE.items():
    _def(_name, "comparison", f"{_name}(a, b) -> bool, broadcasting", ("a", "b"), _compare,
         lambda a, x, p, fn=_fn: np.asarray(fn(x[0], x[1])))
_def("logical_not", "comparison", "not a -> bool", ("x",), lambda a, s, d, p: (s[0], "bool"), lambda a, x, p: np.logical_not(x[0]))
_def("isnan", "comparison", "x is NaN -> bool (ONNX IsNaN)", ("x",), lambda a, s, d, p: (s[0], "bool"), lambda a, x, p: np.isnan(x[0]))


def _erf(x: np.ndarray) -> np.ndarray:
    return K.erf(x).astype(x.dtype, copy=False)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return K.sigmoid(x).astype(x.dtype, copy=False)


_UNARY_FLOAT: dict[str, tuple[Callable[[np.ndarray], np.ndarray], str]] = {
    "exp": (np.exp, "e ** x"), "log": (np.log, "natural log"), "sqrt": (np.sqrt, "square root"),
    "rsqrt": (lambda x: 1 / np.sqrt(x), "1 / sqrt(x)"), "reciprocal": (lambda x: 1 / x, "1 / x"),
    "sin": (np.sin, "sine"), "cos": (np.cos, "cosine"), "erf": (_erf, "error function"),
    "tanh": (np.tanh, "hyperbolic tangent"), "sigmoid": (_sigmoid, "1 / (1 + e ** -x)"),
    "floor": (np.floor, "round down"), "ceil": (np.ceil, "round up"),
}
for _name, (_fn, _doc) in _UNARY_FLOAT.items():
    _def(_name, "unary", _doc, ("x",), _float_only, lambda a, x, p, fn=_fn: np.asarray(fn(x[0])), flops=_elementwise_flops)

_UNARY_ANY: dict[str, tuple[Callable[[np.ndarray], np.ndarray], str]] = {
    "neg": (np.negative, "-x"), "abs": (np.abs, "|x|"), "sign": (np.sign, "-1, 0 or 1"),
    "relu": (K.relu, "max(x, 0)"), "identity": (lambda x: x, "x"),
}
for _name, (_fn, _doc) in _UNARY_ANY.items():
    _def(_name, "unary", _doc, ("x",), _same, lambda a, x, p, fn=_fn: np.asarray(fn(x[0])), flops=_elementwise_flops)

_def("dropout", "unary", "identity at inference (p kept for the record)", ("x",), _same, lambda a, x, p: x[0], attrs={"p": 0.5})
_def("clip", "unary", "min(max(x, min), max); None = unbounded", ("x",), _same,
     lambda a, x, p: np.clip(x[0], a["min"], a["max"]).astype(x[0].dtype, copy=False), attrs={"min": None, "max": None},
     flops=_elementwise_flops)
_def("leaky_relu", "activation", "x if x >= 0 else alpha * x", ("x",), _float_only,
     lambda a, x, p: np.where(x[0] >= 0, x[0], x[0] * _f(x[0], a["alpha"])), attrs={"alpha": 0.01}, flops=_elementwise_flops)
_def("hardsigmoid", "activation", "clip(alpha * x + beta, 0, 1) (ONNX; PyTorch's is alpha=1/6, beta=0.5)", ("x",), _float_only,
     lambda a, x, p: np.clip(x[0] * _f(x[0], a["alpha"]) + _f(x[0], a["beta"]), 0, 1).astype(x[0].dtype, copy=False),
     attrs={"alpha": 1.0 / 6.0, "beta": 0.5}, flops=_elementwise_flops)


def _gelu_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    return K.gelu(x[0], a["approximate"]).astype(x[0].dtype, copy=False)


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
_def("silu", "activation", "x * sigmoid(x)", ("x",), _float_only, lambda a, x, p: x[0] * _sigmoid(x[0]),
     decompose=lambda b, i, a, p: b.op("mul", [i[0], b.op("sigmoid", [i[0]])]), flops=_elementwise_flops)
_def("hardswish", "activation", "x * hardsigmoid(x) (alpha=1/6, beta=0.5)", ("x",), _float_only,
     lambda a, x, p: x[0] * np.clip(x[0] / _f(x[0], 6.0) + _f(x[0], 0.5), 0, 1).astype(x[0].dtype, copy=False),
     decompose=lambda b, i, a, p: b.op("mul", [i[0], b.op("hardsigmoid", [i[0]])]), flops=_elementwise_flops)


def _softmax_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    return K.softmax(x[0], a["axis"]).astype(x[0].dtype, copy=False)


def _log_softmax_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    t = x[0] - x[0].max(axis=a["axis"], keepdims=True)
    return t - np.log(np.exp(t).sum(axis=a["axis"], keepdims=True))


def _axis_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    _axis(a["axis"], len(s[0]))
    return _float_only(a, s, d, p)


_def("softmax", "activation", "exp(x) / sum(exp(x)) along axis", ("x",), _axis_rule, _softmax_ref, attrs={"axis": -1},
     flops=lambda a, s, o, p: 5 * _numel(o))
_def("log_softmax", "activation", "x - log(sum(exp(x))) along axis", ("x",), _axis_rule, _log_softmax_ref, attrs={"axis": -1},
     flops=lambda a, s, o, p: 5 * _numel(o))


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


_def("matmul", "linear algebra", "matrix product with NumPy/ONNX MatMul broadcasting", ("a", "b"), _matmul_rule,
     lambda a, x, p: np.matmul(x[0], x[1]), flops=_matmul_flops)


def _gemm_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    x, y = s[0], s[1]
    if len(x) != 2 or len(y) != 2:
        raise ValueError(f"gemm takes 2-D a and b, got {x} and {y}")
    m, k = x[::-1] if a["trans_a"] else x
    k2, n = y[::-1] if a["trans_b"] else y
    if k != k2:
        raise ValueError(f"gemm: inner dimensions differ ({k} vs {k2})")
    if len(s) > 2:
        _broadcast([(m, n), s[2]])
    return (m, n), _promote(d)


def _gemm_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    A = x[0].T if a["trans_a"] else x[0]
    B = x[1].T if a["trans_b"] else x[1]
    out = (A @ B) * _f(A, a["alpha"])
    return out + x[2] * _f(A, a["beta"]) if len(x) > 2 else out


_def("gemm", "linear algebra", "alpha * a' @ b' + beta * c (ONNX Gemm; ' = transposed when trans_a/trans_b)",
     ("a", "b", "c?"), _gemm_rule, _gemm_ref, attrs={"alpha": 1.0, "beta": 1.0, "trans_a": False, "trans_b": False},
     flops=lambda a, s, o, p: 2 * _numel(o) * (s[0][0] if a["trans_a"] else s[0][1]))


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


