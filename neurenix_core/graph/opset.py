"""The opset: every op a :class:`~neurenix_core.graph.ir.Node` may carry, in one table.

Each :class:`OpDef` says what the op reads (``inputs``: values, ``params``: weights carried on the
node), its attributes with their defaults, how the output's static shape and dtype follow from
the inputs' (``infer``), what it computes (``ref``: a NumPy implementation that keeps its input
float dtype, so the float64 reference and the float32 CPU backend share it), and for a composite
op its decomposition into other ops (``decompose``). Semantics follow ONNX / the array API
(broadcasting, negative axes, ``keepdims``) so that the torch.export and ONNX importers map
nearly one to one; where PyTorch and ONNX differ the attribute says which (``flatten`` keeps
PyTorch's ``start_dim``/``end_dim``, ``reshape`` takes ONNX's ``0`` = "copy this dimension").

Composite ops keep their own node kind so that a backend that fuses them natively sees them; the
core applies ``decompose`` (recursively) for a backend that does not declare the op. The first
17 ops of the first release (``LEGACY_OPS``) keep their names, attributes and params, so plugins
written against it lower what they always lowered.

``docs/models.md`` carries a table generated from OPSET by :func:`markdown_table`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, final

import numpy as np

from neurenix_core.backends import cpu_nn as K

__all__ = [
    "OpDef", "OPSET", "LEGACY_OPS", "COMPOSITES", "DTYPES", "REQUIRED", "Builder", "attrs_of", "markdown_table",
    "infer", "evaluate",
]

Shape = tuple[int, ...]
Arrays = list[np.ndarray]
Params = Mapping[str, np.ndarray]
Attrs = Mapping[str, Any]

#: Value dtypes a graph may carry.
DTYPES: Final = ("float32", "float16", "bfloat16", "float64", "int8", "int16", "int32", "int64", "uint8", "bool")

#: The ops of the first release: a plugin whose manifest declares no ``graph_ops`` lowers these.
LEGACY_OPS: Final = frozenset({
    "linear", "conv2d", "relu", "gelu", "sigmoid", "tanh", "softmax", "max_pool2d", "avg_pool2d",
    "adaptive_avg_pool2d", "flatten", "batch_norm2d", "layer_norm", "dropout",
    "multihead_attention", "add", "mul",
})


class _Required:
    def __repr__(self) -> str:
        return "required"


#: Attribute default meaning "the node must set it".
REQUIRED: Final = _Required()


class Builder(Protocol):
    """What a decomposition writes into (``neurenix_core.graph.decompose`` implements it)."""

    def op(self, op: str, inputs: Sequence[str], attrs: Attrs | None = None, params: Params | None = None) -> str:
        """Append a node; returns its output value name."""
        ...

    def const(self, value: np.ndarray) -> str:
        """A ``constant`` node holding ``value``; returns its output value name."""
        ...


Infer = Callable[[Attrs, list[Shape], list[str], Params], tuple[Shape, str]]
Ref = Callable[[Attrs, Arrays, Params], np.ndarray]
Decompose = Callable[[Builder, list[str], Attrs, Params], str]


@final
@dataclass(frozen=True, slots=True)
class OpDef:
    """One op. ``inputs`` names end in ``?`` when optional and ``*`` when variadic; ``params`` are
    weights on the node (``?`` optional)."""

    name: str
    category: str
    doc: str
    inputs: tuple[str, ...]
    attrs: Mapping[str, Any]
    params: tuple[str, ...]
    infer: Infer
    ref: Ref
    decompose: Decompose | None = None
    flops: Callable[[Attrs, list[Shape], Shape, Params], int] | None = None
    tags: frozenset[str] = field(default_factory=frozenset)

    @property
    def composite(self) -> bool:
        return self.decompose is not None


OPSET: dict[str, OpDef] = {}


def _def(name: str, category: str, doc: str, inputs: Sequence[str], infer: Infer, ref: Ref, *,
         attrs: Mapping[str, Any] | None = None, params: Sequence[str] = (), decompose: Decompose | None = None,
         flops: Callable[[Attrs, list[Shape], Shape, Params], int] | None = None) -> None:
    OPSET[name] = OpDef(name, category, doc, tuple(inputs), dict(attrs or {}), tuple(params), infer, ref, decompose, flops)


def attrs_of(op: str, attrs: Attrs) -> dict[str, Any]:
    """``attrs`` completed with the op's defaults; raises ValueError on unknown or missing ones."""
    spec = OPSET[op].attrs
    unknown = set(attrs) - set(spec)
    if unknown:
        raise ValueError(f"op {op!r} has no attribute(s) {sorted(unknown)}; it takes {sorted(spec) or 'none'}")
    out = {k: attrs.get(k, v) for k, v in spec.items()}
    missing = [k for k, v in out.items() if v is REQUIRED]
    if missing:
        raise ValueError(f"op {op!r} needs attribute(s) {missing}")
    return out


# ----------------------------------------------------------------------------- shared helpers
def _is_float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))


def _axis(axis: int, ndim: int) -> int:
    if not -ndim <= axis < max(ndim, 1):
        raise ValueError(f"axis {axis} is out of range for a {ndim}-D value")
    return axis % max(ndim, 1)


def _axes(axes: Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    return tuple(range(ndim)) if axes is None else tuple(sorted(_axis(a, ndim) for a in axes))


def _promote(dtypes: Sequence[str]) -> str:
    floats = [d for d in dtypes if _is_float(d)]
    if floats:
        return max(floats, key=lambda d: ("float16", "bfloat16", "float32", "float64").index(d))
    if all(d == "bool" for d in dtypes):
        return "bool"
    return str(np.result_type(*[np.dtype(d) for d in dtypes if d != "bool"] or [np.bool_]))


def _broadcast(shapes: Sequence[Shape]) -> Shape:
    return tuple(int(d) for d in np.broadcast_shapes(*shapes))


def _same(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    return s[0], d[0]


def _float_only(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    if not _is_float(d[0]):
        raise ValueError(f"expects a floating-point input, got {d[0]}")
    return s[0], d[0]


def _elementwise(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    return _broadcast(s), _promote(d)


def _compare(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    return _broadcast(s), "bool"


def _f(x: np.ndarray, value: float) -> np.ndarray:
    """A scalar in ``x``'s dtype (keeps float32 math float32)."""
    return np.asarray(value, dtype=x.dtype if x.dtype.kind == "f" else np.float64)


def _numel(s: Shape) -> int:
    return int(math.prod(s))


def _elementwise_flops(a: Attrs, s: list[Shape], out: Shape, p: Params) -> int:
    return _numel(out)


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


# ----------------------------------------------------------------------------- convolution and pooling
def _window(size: int, k: int, st: int, pad: int, dil: int) -> int:
    return (size + 2 * pad - dil * (k - 1) - 1) // st + 1


def _spatial(x: Shape, k: Sequence[int], st: Sequence[int], pad: Sequence[int], dil: Sequence[int]) -> Shape:
    out = tuple(_window(x[2 + i], k[i], st[i], pad[i], dil[i]) for i in range(len(k)))
    if min(out) < 1:
        raise ValueError(f"spatial size {x[2:]} is smaller than the kernel extent {tuple(dil[i] * (k[i] - 1) + 1 for i in range(len(k)))}")
    return out


def _conv_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    x, w = s[0], p["weight"].shape
    nd = len(w) - 2
    if len(x) != nd + 2 or x[1] != w[1] * a["groups"]:
        raise ValueError(f"expects an N,C{',H,W' if nd == 2 else ',L'} input with {w[1] * a['groups']} channels, got shape {x}")
    return (x[0], int(w[0])) + _spatial(x, w[2:], a["stride"], a["padding"], a["dilation"]), d[0]


def _conv_flops(a: Attrs, s: list[Shape], out: Shape, p: Params) -> int:
    return 2 * _numel(out) * _numel(tuple(p["weight"].shape[1:]))


def _conv2d_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    bias = p.get("bias")
    return K.conv2d(x[0], p["weight"].astype(x[0].dtype), None if bias is None else bias.astype(x[0].dtype),
                    a["stride"], a["padding"], a["dilation"], a["groups"]).astype(x[0].dtype, copy=False)


_CONV_ATTRS = {"in_channels": None, "out_channels": None, "kernel_size": None, "stride": (1, 1), "padding": (0, 0),
               "dilation": (1, 1), "groups": 1}
_def("conv2d", "convolution", "NCHW cross-correlation, weight (O, C/groups, kh, kw) on the node; symmetric zero padding "
     "(other padding modes: a pad node before it)", ("x",), _conv_rule, _conv2d_ref, attrs=_CONV_ATTRS,
     params=("weight", "bias?"), flops=_conv_flops)


def _conv_t_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    x, w = s[0], p["weight"].shape
    if len(x) != 4 or len(w) != 4 or x[1] != w[0]:
        raise ValueError(f"expects an N,C,H,W input with {w[0]} channels (weight (C, O/groups, kh, kw)), got shape {x}")
    st, pad, out_pad, dil = a["stride"], a["padding"], a["output_padding"], a["dilation"]
    if any(op >= max(sv, dv) for op, sv, dv in zip(out_pad, st, dil)):
        raise ValueError(f"output_padding {tuple(out_pad)} must be smaller than the stride or the dilation")
    size = tuple((x[2 + i] - 1) * st[i] - 2 * pad[i] + dil[i] * (w[2 + i] - 1) + out_pad[i] + 1 for i in range(2))
    if min(size) < 1:
        raise ValueError(f"padding {tuple(pad)} leaves no output from input {x[2:]}")
    return (x[0], int(w[1]) * a["groups"]) + size, d[0]


def _conv_t_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    """Scatter form: every input pixel adds its kernel-weighted patch at stride steps into the
    full output, which is then cropped by ``padding`` (output_padding extends the far end)."""
    xs, w = x[0], p["weight"].astype(x[0].dtype)
    n, c, h, wd = xs.shape
    g, (st, pad, out_pad, dil) = a["groups"], (a["stride"], a["padding"], a["output_padding"], a["dilation"])
    cg, og, kh, kw = c // g, w.shape[1], w.shape[2], w.shape[3]
    full = np.zeros((n, og * g, (h - 1) * st[0] + dil[0] * (kh - 1) + 1 + out_pad[0],
                     (wd - 1) * st[1] + dil[1] * (kw - 1) + 1 + out_pad[1]), xs.dtype)
    for k in range(g):
        xg, wg = xs[:, k * cg:(k + 1) * cg], w[k * cg:(k + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                r, q = i * dil[0], j * dil[1]
                full[:, k * og:(k + 1) * og, r:r + (h - 1) * st[0] + 1:st[0], q:q + (wd - 1) * st[1] + 1:st[1]] += np.einsum(
                    "nchw,co->nohw", xg, wg[:, :, i, j])
    oh = full.shape[2] - 2 * pad[0]
    ow = full.shape[3] - 2 * pad[1]
    out = full[:, :, pad[0]:pad[0] + oh, pad[1]:pad[1] + ow]
    bias = p.get("bias")
    if bias is not None:
        out = out + bias.astype(xs.dtype).reshape(1, -1, 1, 1)
    return np.ascontiguousarray(out)


_def("conv_transpose2d", "convolution", "NCHW transposed convolution (the gradient of conv2d w.r.t. its input), weight "
     "(C, O/groups, kh, kw) on the node; output size (H-1)*stride - 2*padding + dilation*(k-1) + output_padding + 1",
     ("x",), _conv_t_rule, _conv_t_ref,
     attrs={"in_channels": None, "out_channels": None, "kernel_size": None, "stride": (1, 1), "padding": (0, 0),
            "output_padding": (0, 0), "dilation": (1, 1), "groups": 1},
     params=("weight", "bias?"), flops=lambda a, s, o, p: 2 * _numel(s[0]) * _numel(tuple(p["weight"].shape[1:])))


def _conv1d_attrs2(a: Attrs) -> dict[str, Any]:
    return {"stride": (1, a["stride"][0]), "padding": (0, a["padding"][0]), "dilation": (1, a["dilation"][0]), "groups": a["groups"]}


def _conv1d_dec(b: Builder, i: list[str], a: Attrs, p: Params) -> str:
    params = {"weight": np.asarray(p["weight"])[:, :, None, :]} | ({} if p.get("bias") is None else {"bias": p["bias"]})
    x = b.op("unsqueeze", [i[0]], {"axes": (2,)})
    return b.op("squeeze", [b.op("conv2d", [x], _conv1d_attrs2(a), params)], {"axes": (2,)})


def _conv1d_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    p2 = {"weight": p["weight"][:, :, None, :]} | ({} if p.get("bias") is None else {"bias": p["bias"]})
    return _conv2d_ref(_conv1d_attrs2(a), [x[0][:, :, None, :]], p2)[:, :, 0, :]


_def("conv1d", "convolution", "N,C,L cross-correlation, weight (O, C/groups, k) on the node", ("x",), _conv_rule, _conv1d_ref,
     attrs={"stride": (1,), "padding": (0,), "dilation": (1,), "groups": 1}, params=("weight", "bias?"), decompose=_conv1d_dec,
     flops=_conv_flops)


def _pool_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    x = s[0]
    if len(x) != 4:
        raise ValueError(f"expects a 4-D NCHW input, got shape {x}")
    st = a["stride"] if a["stride"] is not None else a["kernel_size"]
    return x[:2] + _spatial(x, a["kernel_size"], st, a["padding"], (1, 1)), d[0]


def _pool_flops(a: Attrs, s: list[Shape], out: Shape, p: Params) -> int:
    return _numel(out) * _numel(tuple(a["kernel_size"]))


_def("max_pool2d", "pooling", "max over kh x kw windows (padding counts as -inf)", ("x",), _pool_rule,
     lambda a, x, p: K.max_pool2d(x[0], a["kernel_size"], a["stride"], a["padding"]),
     attrs={"kernel_size": REQUIRED, "stride": None, "padding": (0, 0)}, flops=_pool_flops)
_def("avg_pool2d", "pooling", "mean over kh x kw windows", ("x",), _pool_rule,
     lambda a, x, p: K.avg_pool2d(x[0], a["kernel_size"], a["stride"], a["padding"], a["count_include_pad"]),
     attrs={"kernel_size": REQUIRED, "stride": None, "padding": (0, 0), "count_include_pad": True}, flops=_pool_flops)


def _adaptive_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    if len(s[0]) != 4:
        raise ValueError(f"expects a 4-D NCHW input, got shape {s[0]}")
    return s[0][:2] + tuple(int(v) for v in a["output_size"]), d[0]


def _adaptive_max_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    t = x[0]
    hs, he = K.adaptive_bounds(t.shape[2], a["output_size"][0])
    ws, we = K.adaptive_bounds(t.shape[3], a["output_size"][1])
    rows = [np.stack([t[:, :, h0:h1, w0:w1].max(axis=(2, 3)) for w0, w1 in zip(ws, we)], -1) for h0, h1 in zip(hs, he)]
    return np.stack(rows, -2)


_def("adaptive_avg_pool2d", "pooling", "mean over PyTorch's adaptive cells", ("x",), _adaptive_rule,
     lambda a, x, p: K.adaptive_avg_pool2d(x[0], a["output_size"]), attrs={"output_size": REQUIRED},
     flops=lambda a, s, o, p: _numel(s[0]))
_def("adaptive_max_pool2d", "pooling", "max over PyTorch's adaptive cells", ("x",), _adaptive_rule, _adaptive_max_ref,
     attrs={"output_size": REQUIRED}, flops=lambda a, s, o, p: _numel(s[0]))


def _reduce_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    x = s[0]
    axes = _axes(a["axes"], len(x))
    if a["keepdims"]:
        return tuple(1 if i in axes else n for i, n in enumerate(x)), d[0]
    return tuple(n for i, n in enumerate(x) if i not in axes), d[0]


def _global_dec(kind: str) -> Decompose:
    return lambda b, i, a, p: b.op(kind, [i[0]], {"axes": (2, 3), "keepdims": True})


_def("global_avg_pool", "pooling", "mean over H and W, keeping them as 1 (ONNX GlobalAveragePool)", ("x",),
     lambda a, s, d, p: (s[0][:2] + (1,) * (len(s[0]) - 2), d[0]), lambda a, x, p: x[0].mean(axis=(2, 3), keepdims=True),
     decompose=_global_dec("reduce_mean"), flops=lambda a, s, o, p: _numel(s[0]))
_def("global_max_pool", "pooling", "max over H and W, keeping them as 1 (ONNX GlobalMaxPool)", ("x",),
     lambda a, s, d, p: (s[0][:2] + (1,) * (len(s[0]) - 2), d[0]), lambda a, x, p: x[0].max(axis=(2, 3), keepdims=True),
     decompose=_global_dec("reduce_max"), flops=lambda a, s, o, p: _numel(s[0]))

_REDUCE: dict[str, Callable[..., np.ndarray]] = {"reduce_sum": np.sum, "reduce_mean": np.mean, "reduce_max": np.max, "reduce_min": np.min,
                                                 "reduce_prod": np.prod}
for _name, _fn in _REDUCE.items():
    _def(_name, "reduction", f"{_name[7:]} over axes (None = all), keepdims as ONNX", ("x",), _reduce_rule,
         lambda a, x, p, fn=_fn: np.asarray(fn(x[0], axis=_axes(a["axes"], x[0].ndim), keepdims=a["keepdims"])).astype(x[0].dtype, copy=False),
         attrs={"axes": None, "keepdims": True}, flops=lambda a, s, o, p: _numel(s[0]))


def _arg_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    shape, _ = _reduce_rule({"axes": (a["axis"],), "keepdims": a["keepdims"]}, s, d, p)
    return shape, "int64"


for _name, _fn in {"argmax": np.argmax, "argmin": np.argmin}.items():
    _def(_name, "reduction", f"index of the {_name[3:]} along axis (int64), first on ties", ("x",), _arg_rule,
         lambda a, x, p, fn=_fn: np.asarray(fn(x[0], axis=a["axis"], keepdims=a["keepdims"])).astype(np.int64),
         attrs={"axis": 0, "keepdims": True})


# ----------------------------------------------------------------------------- shape manipulation
def _reshape_target(x: Shape, shape: Sequence[int]) -> Shape:
    dims = [x[i] if v == 0 else int(v) for i, v in enumerate(shape)]  # ONNX: 0 copies the input's dimension
    if dims.count(-1) > 1:
        raise ValueError(f"reshape target {tuple(shape)} has more than one -1")
    if -1 in dims:
        known = _numel(tuple(v for v in dims if v != -1))
        if known == 0 or _numel(x) % known:
            raise ValueError(f"cannot reshape {x} to {tuple(shape)}")
        dims[dims.index(-1)] = _numel(x) // known
    if _numel(tuple(dims)) != _numel(x):
        raise ValueError(f"cannot reshape {x} ({_numel(x)} elements) to {tuple(dims)}")
    return tuple(dims)


_def("reshape", "shape", "same elements, new static shape (-1 inferred once, 0 copies the input dimension)", ("x",),
     lambda a, s, d, p: (_reshape_target(s[0], a["shape"]), d[0]),
     lambda a, x, p: x[0].reshape(_reshape_target(x[0].shape, a["shape"])), attrs={"shape": REQUIRED})


def _flatten_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    x = s[0]
    if not x:
        raise ValueError("flatten needs at least one dimension")
    i, j = a["start_dim"] % len(x), a["end_dim"] % len(x)
    return x[:i] + (_numel(x[i : j + 1]),) + x[j + 1 :], d[0]


_def("flatten", "shape", "merge dimensions start_dim..end_dim (PyTorch's flatten)", ("x",), _flatten_rule,
     lambda a, x, p: x[0].reshape(_flatten_rule(a, [x[0].shape], [""], p)[0]), attrs={"start_dim": 1, "end_dim": -1})


def _perm(a: Attrs, n: int) -> tuple[int, ...]:
    perm = tuple(reversed(range(n))) if a["perm"] is None else tuple(_axis(v, n) for v in a["perm"])
    if sorted(perm) != list(range(n)):
        raise ValueError(f"perm {a['perm']} is not a permutation of {n} axes")
    return perm


_def("transpose", "shape", "permute axes (perm; None reverses them) - PyTorch's permute/transpose map here", ("x",),
     lambda a, s, d, p: (tuple(s[0][i] for i in _perm(a, len(s[0]))), d[0]),
     lambda a, x, p: np.ascontiguousarray(x[0].transpose(_perm(a, x[0].ndim))), attrs={"perm": None})


def _squeeze_axes(a: Attrs, x: Shape) -> tuple[int, ...]:
    axes = tuple(i for i, n in enumerate(x) if n == 1) if a["axes"] is None else _axes(a["axes"], len(x))
    for i in axes:
        if x[i] != 1:
            raise ValueError(f"cannot squeeze axis {i} of size {x[i]} (shape {x})")
    return axes


_def("squeeze", "shape", "drop size-1 axes (None = all of them)", ("x",),
     lambda a, s, d, p: (tuple(n for i, n in enumerate(s[0]) if i not in _squeeze_axes(a, s[0])), d[0]),
     lambda a, x, p: x[0].reshape(tuple(n for i, n in enumerate(x[0].shape) if i not in _squeeze_axes(a, x[0].shape))),
     attrs={"axes": None})


def _unsqueeze(a: Attrs, x: Shape) -> Shape:
    n = len(x) + len(a["axes"])
    axes = sorted(_axis(v, n) for v in a["axes"])
    out, it = [], iter(x)
    for i in range(n):
        out.append(1 if i in axes else next(it))
    return tuple(out)


_def("unsqueeze", "shape", "insert size-1 axes at the output positions axes", ("x",), lambda a, s, d, p: (_unsqueeze(a, s[0]), d[0]),
     lambda a, x, p: x[0].reshape(_unsqueeze(a, x[0].shape)), attrs={"axes": REQUIRED})
_def("expand", "shape", "broadcast to shape (ONNX Expand: two-way broadcasting)", ("x",),
     lambda a, s, d, p: (_broadcast([s[0], tuple(a["shape"])]), d[0]),
     lambda a, x, p: np.ascontiguousarray(np.broadcast_to(x[0], _broadcast([x[0].shape, tuple(a["shape"])]))), attrs={"shape": REQUIRED})


def _concat_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    ax = _axis(a["axis"], len(s[0]))
    for t in s[1:]:
        if len(t) != len(s[0]) or any(t[i] != s[0][i] for i in range(len(t)) if i != ax):
            raise ValueError(f"concat along axis {ax}: shapes {s} differ elsewhere")
    return s[0][:ax] + (sum(t[ax] for t in s),) + s[0][ax + 1 :], _promote(d)


_def("concat", "shape", "join along axis", ("x*",), _concat_rule, lambda a, x, p: np.concatenate(x, axis=a["axis"]), attrs={"axis": 0})


def _split_bounds(a: Attrs, x: Shape) -> tuple[int, int, int]:
    ax = _axis(a["axis"], len(x))
    sizes = list(a["sizes"])
    if sum(sizes) != x[ax]:
        raise ValueError(f"split sizes {sizes} do not add up to axis {ax} of shape {x}")
    start = sum(sizes[: a["index"]])
    return ax, start, start + sizes[a["index"]]


def _split_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    ax, lo, hi = _split_bounds(a, x[0].shape)
    return np.ascontiguousarray(np.take(x[0], np.arange(lo, hi), axis=ax))


def _split_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    ax, lo, hi = _split_bounds(a, s[0])
    return s[0][:ax] + (hi - lo,) + s[0][ax + 1 :], d[0]


_def("split", "shape", "chunk index of x cut along axis into sizes (one node per output of ONNX Split)", ("x",),
     _split_rule, _split_ref, attrs={"axis": 0, "sizes": REQUIRED, "index": 0})


def _slices(a: Attrs, x: Shape) -> tuple[slice, ...]:
    out = [slice(None)] * len(x)
    axes = a["axes"] if a["axes"] is not None else tuple(range(len(a["starts"])))
    steps = a["steps"] if a["steps"] is not None else (1,) * len(axes)
    for ax, st, en, sp in zip(axes, a["starts"], a["ends"], steps):
        out[_axis(ax, len(x))] = _onnx_slice(int(st), int(en), int(sp), x[_axis(ax, len(x))])
    return tuple(out)


def _onnx_slice(start: int, end: int, step: int, n: int) -> slice:
    """ONNX Slice bounds on an axis of length ``n`` as a Python slice. Not Python's own clamping:
    with a negative step ONNX clamps ``end`` to -1 ("past the first element"), which a Python
    slice would read as "the last element", so that end becomes None."""
    start, end = start + n if start < 0 else start, end + n if end < 0 else end
    if step > 0:
        return slice(min(max(start, 0), n), min(max(end, 0), n), step)
    start, end = min(max(start, -1), n - 1), min(max(end, -1), n - 1)
    if start < 0:
        return slice(0, 0, 1)
    return slice(start, None if end < 0 else end, step)


def _slice_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    return tuple(len(range(*sl.indices(n))) for sl, n in zip(_slices(a, s[0]), s[0])), d[0]


_def("slice", "shape", "x[starts:ends:steps] on axes (ONNX Slice with static starts/ends)", ("x",), _slice_rule,
     lambda a, x, p: np.ascontiguousarray(x[0][_slices(a, x[0].shape)]), attrs={"starts": REQUIRED, "ends": REQUIRED, "axes": None, "steps": None})


def _gather_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    if d[1] not in ("int32", "int64"):
        raise ValueError(f"gather indices must be int32/int64, got {d[1]}")
    ax = _axis(a["axis"], len(s[0]))
    return s[0][:ax] + s[1] + s[0][ax + 1 :], d[0]


def _gather_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    ax = _axis(a["axis"], x[0].ndim)
    idx = np.where(x[1] < 0, x[1] + x[0].shape[ax], x[1])
    if idx.size and (idx.min() < 0 or idx.max() >= x[0].shape[ax]):
        raise ValueError(f"gather index out of range for axis {ax} of size {x[0].shape[ax]}")
    return np.take(x[0], idx, axis=ax)


_def("gather", "indexing", "take indices (int64) from data along axis (ONNX Gather)", ("data", "indices"), _gather_rule, _gather_ref,
     attrs={"axis": 0})


def _index_dtype(d: str, op: str) -> None:
    if d not in ("int32", "int64"):
        raise ValueError(f"{op} indices must be int32/int64, got {d}")


def _gather_elements_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    _index_dtype(d[1], "gather_elements")
    ax = _axis(a["axis"], len(s[0]))
    if len(s[1]) != len(s[0]) or any(i > n for k, (i, n) in enumerate(zip(s[1], s[0])) if k != ax):
        raise ValueError(f"gather_elements indices {s[1]} do not fit data {s[0]} outside axis {ax}")
    return s[1], d[0]


def _gather_elements_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    ax = _axis(a["axis"], x[0].ndim)
    n = x[0].shape[ax]
    idx = np.where(x[1] < 0, x[1] + n, x[1])
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise ValueError(f"gather_elements index out of range for axis {ax} of size {n}")
    data = x[0][tuple(slice(0, k) if i != ax else slice(None) for i, k in enumerate(idx.shape))]
    return np.take_along_axis(data, idx, axis=ax)


_def("gather_elements", "indexing", "data[..., indices[i, j, ...], ...] along axis, output shaped as indices (ONNX GatherElements, torch.gather)",
     ("data", "indices"), _gather_elements_rule, _gather_elements_ref, attrs={"axis": 0})


def _gather_nd_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    _index_dtype(d[1], "gather_nd")
    if a["batch_dims"] != 0:
        raise ValueError(f"gather_nd supports batch_dims=0, got {a['batch_dims']}")
    k = s[1][-1] if s[1] else 0
    if not s[1] or k > len(s[0]):
        raise ValueError(f"gather_nd indices {s[1]} need a last axis of at most {len(s[0])} coordinates")
    return s[1][:-1] + s[0][k:], d[0]


def _gather_nd_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    k = x[1].shape[-1]
    dims = np.asarray(x[0].shape[:k], np.int64)
    idx = np.where(x[1] < 0, x[1] + dims, x[1])
    if idx.size and (np.any(idx < 0) or np.any(idx >= dims)):
        raise ValueError(f"gather_nd index out of range for data of shape {x[0].shape}")
    return np.ascontiguousarray(x[0][tuple(np.moveaxis(idx, -1, 0))])


_def("gather_nd", "indexing", "data at the coordinates in indices' last axis (ONNX GatherND, batch_dims 0)",
     ("data", "indices"), _gather_nd_rule, _gather_nd_ref, attrs={"batch_dims": 0})


def _embedding_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    if d[0] not in ("int32", "int64"):
        raise ValueError(f"embedding takes integer indices, got {d[0]}")
    w = p["weight"]
    return s[0] + (int(w.shape[1]),), str(w.dtype) if str(w.dtype) in DTYPES else "float32"


_def("embedding", "indexing", "rows of weight (num, dim) at integer indices", ("indices",), _embedding_rule,
     lambda a, x, p: _gather_ref({"axis": 0}, [p["weight"], x[0]], {}), params=("weight",),
     decompose=lambda b, i, a, p: b.op("gather", [b.const(np.asarray(p["weight"])), i[0]], {"axis": 0}))


def _where_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    if d[0] != "bool":
        raise ValueError(f"where takes a bool condition, got {d[0]}")
    return _broadcast(s), _promote(d[1:])


_def("where", "indexing", "a where cond else b, broadcasting", ("cond", "a", "b"), _where_rule, lambda a, x, p: np.where(x[0], x[1], x[2]))


def _pad_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    pads = a["pads"]
    if len(pads) != len(s[0]):
        raise ValueError(f"pads needs one (before, after) pair per axis ({len(s[0])}), got {len(pads)}")
    return tuple(n + int(lo) + int(hi) for n, (lo, hi) in zip(s[0], pads)), d[0]


_PAD_MODES: Final = {"constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}


def _pad_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    pads = [(int(lo), int(hi)) for lo, hi in a["pads"]]
    if a["mode"] == "constant":
        return np.pad(x[0], pads, mode="constant", constant_values=a["value"])
    return np.pad(x[0], pads, mode=_PAD_MODES[a["mode"]])


_def("pad", "shape", "pad every axis by (before, after); mode constant (value) | reflect | edge | wrap", ("x",), _pad_rule, _pad_ref,
     attrs={"pads": REQUIRED, "mode": "constant", "value": 0.0})


def _np_dtype(name: str) -> np.dtype[Any]:
    if name == "bfloat16":
        import ml_dtypes  # a core dependency; only bfloat16 values need it

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def _cast_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    to = a["to"]
    if _is_float(to) and x[0].dtype.kind == "f":
        return x[0]  # float -> float keeps the interpreter's working precision (float64 reference)
    if _is_float(to):
        return x[0].astype(np.float64)
    return x[0].astype(_np_dtype(to))


def _cast_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    if a["to"] not in DTYPES:
        raise ValueError(f"cast to unknown dtype {a['to']!r}; dtypes: {', '.join(DTYPES)}")
    return s[0], a["to"]


_def("cast", "dtype", "convert to dtype `to` (floats stay in the interpreter's float precision)", ("x",), _cast_rule, _cast_ref,
     attrs={"to": REQUIRED})


def _const_dtype(v: np.ndarray) -> str:
    return "bool" if v.dtype == np.bool_ else str(v.dtype)


_def("constant", "constant", "the array `value` on the node (weights, scalars, masks)", (),
     lambda a, s, d, p: (tuple(int(n) for n in np.shape(p["value"])), _const_dtype(np.asarray(p["value"]))),
     lambda a, x, p: p["value"], params=("value",))


# ----------------------------------------------------------------------------- normalisation
def _bn_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    c = int(p["running_mean"].shape[0])
    if len(s[0]) < 2 or s[0][1] != c:
        raise ValueError(f"expects N,C,... with {c} channels, got shape {s[0]}")
    return _float_only(a, s, d, p)


def _bn_affine(p: Params, eps: float) -> tuple[np.ndarray, np.ndarray]:
    scale = 1.0 / np.sqrt(np.asarray(p["running_var"], np.float64) + eps)
    if p.get("weight") is not None:
        scale = scale * p["weight"]
    shift = -np.asarray(p["running_mean"], np.float64) * scale
    if p.get("bias") is not None:
        shift = shift + p["bias"]
    return scale, shift


def _bn_dec(b: Builder, i: list[str], a: Attrs, p: Params) -> str:
    scale, shift = _bn_affine(p, a["eps"])
    shape = (-1, 1, 1)  # channels first, then H and W (batch_norm2d is N,C,H,W)
    mul = b.op("mul", [i[0], b.const(scale.reshape(shape).astype(np.float32))])
    return b.op("add", [mul, b.const(shift.reshape(shape).astype(np.float32))])


def _bn_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    cast = {k: (None if v is None else v.astype(x[0].dtype)) for k, v in p.items()}
    return K.batch_norm(x[0], cast["running_mean"], cast["running_var"], cast.get("weight"), cast.get("bias"), a["eps"])


_def("batch_norm2d", "normalisation", "inference batch norm over channel axis 1 with running statistics", ("x",), _bn_rule, _bn_ref,
     attrs={"num_features": None, "eps": 1e-5}, params=("running_mean", "running_var", "weight?", "bias?"), decompose=_bn_dec,
     flops=lambda a, s, o, p: 2 * _numel(o))


def _ln_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    dims = tuple(a["normalized_shape"])
    if s[0][len(s[0]) - len(dims):] != dims:
        raise ValueError(f"expects trailing dimensions {dims}, got shape {s[0]}")
    return _float_only(a, s, d, p)


def _ln_dec(b: Builder, i: list[str], a: Attrs, p: Params) -> str:
    axes = tuple(range(-len(tuple(a["normalized_shape"])), 0))
    centred = b.op("sub", [i[0], b.op("reduce_mean", [i[0]], {"axes": axes, "keepdims": True})])
    var = b.op("reduce_mean", [b.op("mul", [centred, centred])], {"axes": axes, "keepdims": True})
    out = b.op("mul", [centred, b.op("rsqrt", [b.op("add", [var, b.const(np.float32(a["eps"]))])])])
    if p.get("weight") is not None:
        out = b.op("mul", [out, b.const(np.asarray(p["weight"]))])
    if p.get("bias") is not None:
        out = b.op("add", [out, b.const(np.asarray(p["bias"]))])
    return out


def _ln_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    w, bias = p.get("weight"), p.get("bias")
    return K.layer_norm(x[0], a["normalized_shape"], None if w is None else w.astype(x[0].dtype),
                        None if bias is None else bias.astype(x[0].dtype), a["eps"])


_def("layer_norm", "normalisation", "normalise over the trailing normalized_shape, then weight and bias", ("x",), _ln_rule, _ln_ref,
     attrs={"normalized_shape": REQUIRED, "eps": 1e-5}, params=("weight?", "bias?"), decompose=_ln_dec,
     flops=lambda a, s, o, p: 8 * _numel(o))


# ----------------------------------------------------------------------------- attention
def _sdpa_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    q, k, v = s[:3]
    if len(q) < 2 or q[-1] != k[-1] or k[-2] != v[-2]:
        raise ValueError(f"expects q (..., L, E), k (..., S, E), v (..., S, Ev); got {q}, {k}, {v}")
    scores = _broadcast([q[:-2], k[:-2]]) + (q[-2], k[-2])
    if len(s) > 3:
        _broadcast([scores, s[3]])
    return _broadcast([q[:-2], v[:-2]]) + (q[-2], v[-1]), d[0]


def _sdpa_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    q, k, v = x[:3]
    scale = a["scale"] if a["scale"] is not None else 1.0 / math.sqrt(q.shape[-1])
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) * _f(q, scale)
    if a["is_causal"]:
        L, S = q.shape[-2], k.shape[-2]
        scores = np.where(np.tril(np.ones((L, S), bool)), scores, _f(q, -np.inf))
    if len(x) > 3:
        mask = x[3]
        scores = np.where(mask, scores, _f(q, -np.inf)) if mask.dtype == np.bool_ else scores + mask.astype(q.dtype)
    return np.matmul(K.softmax(scores, -1).astype(q.dtype, copy=False), v)


def _sdpa_flops(a: Attrs, s: list[Shape], out: Shape, p: Params) -> int:
    q, k = s[0], s[1]
    return 4 * _numel(_broadcast([q[:-2], k[:-2]])) * q[-2] * k[-2] * q[-1]


_def("scaled_dot_product_attention", "attention",
     "softmax(q @ k^T * scale + mask) @ v; a bool mask keeps True (PyTorch), a float mask is added; scale None = 1/sqrt(E)",
     ("q", "k", "v", "mask?"), _sdpa_rule, _sdpa_ref, attrs={"scale": None, "is_causal": False}, flops=_sdpa_flops)


def _mha_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    e = int(p["out_proj_weight"].shape[0])
    for x in s[:3]:
        if len(x) != 3 or x[-1] != e:
            raise ValueError(f"expects 3-D (batch, length, {e}) or (length, batch, {e}) inputs, got {x}")
    return s[0], d[0]


def _mha_dec(b: Builder, i: list[str], a: Attrs, p: Params) -> str:
    q, k, v = i[:3]
    e, h = int(p["out_proj_weight"].shape[0]), int(a["num_heads"])
    if not a["batch_first"]:
        q, k, v = (b.op("transpose", [t], {"perm": (1, 0, 2)}) for t in (q, k, v))
    w, bias = np.asarray(p["in_proj_weight"]), p.get("in_proj_bias")

    def project(t: str, j: int) -> str:
        params = {"weight": w[j * e : (j + 1) * e]} | ({} if bias is None else {"bias": np.asarray(bias)[j * e : (j + 1) * e]})
        lin = b.op("linear", [t], {"in_features": e, "out_features": e}, params)
        return b.op("transpose", [b.op("reshape", [lin], {"shape": (0, 0, h, e // h)})], {"perm": (0, 2, 1, 3)})

    ctx = b.op("scaled_dot_product_attention", [project(q, 0), project(k, 1), project(v, 2)] + list(i[3:]))
    merged = b.op("reshape", [b.op("transpose", [ctx], {"perm": (0, 2, 1, 3)})], {"shape": (0, 0, e)})
    out_params = {"weight": p["out_proj_weight"]} | ({} if p.get("out_proj_bias") is None else {"bias": p["out_proj_bias"]})
    out = b.op("linear", [merged], {"in_features": e, "out_features": e}, out_params)
    return out if a["batch_first"] else b.op("transpose", [out], {"perm": (1, 0, 2)})


def _mha_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    q, k, v = x[:3]
    if not a["batch_first"]:
        q, k, v = (t.transpose(1, 0, 2) for t in (q, k, v))
    e, h = int(p["out_proj_weight"].shape[0]), int(a["num_heads"])
    w, bias = p["in_proj_weight"].astype(q.dtype), p.get("in_proj_bias")

    def project(t: np.ndarray, j: int) -> np.ndarray:
        out = t @ w[j * e : (j + 1) * e].T
        if bias is not None:
            out = out + bias[j * e : (j + 1) * e].astype(q.dtype)
        return out.reshape(t.shape[0], t.shape[1], h, e // h).transpose(0, 2, 1, 3)

    ctx = _sdpa_ref({"scale": None, "is_causal": False}, [project(q, 0), project(k, 1), project(v, 2)] + list(x[3:]), {})
    merged = ctx.transpose(0, 2, 1, 3).reshape(q.shape[0], q.shape[1], e)
    ob = p.get("out_proj_bias")
    out = K.linear(merged, p["out_proj_weight"].astype(q.dtype), None if ob is None else ob.astype(q.dtype))
    return out if a["batch_first"] else out.transpose(1, 0, 2)


def _mha_flops(a: Attrs, s: list[Shape], out: Shape, p: Params) -> int:
    e = int(p["out_proj_weight"].shape[0])
    n, lq, lk = _numel(s[0][:-1]), s[0][1] if a["batch_first"] else s[0][0], s[1][1] if a["batch_first"] else s[1][0]
    return 2 * n * e * e * 4 + 4 * n * lk * e + 0 * lq


_def("multihead_attention", "attention", "PyTorch nn.MultiheadAttention at inference (q, k, v; optional mask as in sdpa)",
     ("q", "k", "v", "mask?"), _mha_rule, _mha_ref, attrs={"embed_dim": None, "num_heads": REQUIRED, "batch_first": False},
     params=("in_proj_weight", "in_proj_bias?", "out_proj_weight", "out_proj_bias?"), decompose=_mha_dec, flops=_mha_flops)


COMPOSITES: Final = frozenset(name for name, d in OPSET.items() if d.composite)


# ----------------------------------------------------------------------------- entry points
def infer(op: str, attrs: Attrs, shapes: list[Shape], dtypes: list[str], params: Params) -> tuple[Shape, str]:
    """Output (shape, dtype) of one node; raises ValueError explaining a mismatch."""
    d = OPSET[op]
    required = sum(1 for i in d.inputs if not i.endswith(("?", "*")))
    variadic = any(i.endswith("*") for i in d.inputs)
    if len(shapes) < required or (not variadic and len(shapes) > len(d.inputs)):
        raise ValueError(f"takes inputs {list(d.inputs)}, got {len(shapes)}")
    return d.infer(attrs_of(op, attrs), shapes, dtypes, params)


def evaluate(op: str, attrs: Attrs, inputs: Arrays, params: Params) -> np.ndarray:
    """The op's reference semantics on NumPy arrays (float precision follows the inputs)."""
    return np.asarray(OPSET[op].ref(attrs_of(op, attrs), inputs, params))


def markdown_table() -> str:
    """The opset as a Markdown table (docs/models.md embeds it; a test keeps it current)."""
    rows = ["| op | kind | inputs | attributes (default) | params | semantics |", "|---|---|---|---|---|---|"]
    for name in sorted(OPSET, key=lambda n: (OPSET[n].category, n)):
        d = OPSET[name]
        attrs = ", ".join(f"{k}={v!r}" for k, v in d.attrs.items()) or "-"
        kind = f"{d.category}, composite" if d.composite else d.category
        rows.append(f"| `{name}` | {kind} | {', '.join(d.inputs) or '-'} | {attrs} | {', '.join(d.params) or '-'} | {d.doc.replace('|', '/')} |")
    return "\n".join(rows) + "\n"
