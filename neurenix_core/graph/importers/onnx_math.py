"""ONNX import handlers: Math, logical and activation ops (ONNX's math and logical families).

Most ONNX ops here are one opset node with their attributes renamed; the others: ``Clip`` with
bounds computed at run time is ``maximum`` / ``minimum`` nodes (integer bounds too, which a float
``clip`` attribute would round), ``Mean`` is a sum chain divided by the count, ``Swish`` with
``alpha`` 1 is ``silu``, ``CumSum`` / ``CumProd`` read their axis as a constant.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from neurenix_core.graph.importers.builder import Const, GraphBuilder, Value
from neurenix_core.graph.importers.onnx_common import Handler, OnnxNode, const, fail, ints, simple, variadic
from neurenix_core.graph.opset.schema import _np_dtype

__all__ = ["HANDLERS"]


def _attrs(op: str, **names: tuple[str, Any]) -> Handler:
    """One ``op`` node; ``names`` maps each opset attribute to its ONNX name and default (the
    default's type converts the ONNX value)."""
    def run(b: GraphBuilder, n: OnnxNode) -> Value:
        attrs = {k: type(default)(n.attrs.get(onnx_name, default)) for k, (onnx_name, default) in names.items()}
        return b.emit(n.name, op, [v for v in n.inputs if v is not None], attrs)

    return run


def _is_float(b: GraphBuilder, v: Value) -> bool:
    return b.spec(v).dtype.startswith(("float", "bfloat"))


def _clip(b: GraphBuilder, n: OnnxNode) -> Value:
    x, lo, hi = n.inputs[0], *(None if isinstance(v, Const) and v.array.size == 0 else v for v in (n.input(1), n.input(2)))
    assert x is not None  # an empty constant bound is an absent one (exporters write both forms)
    bounds = [v for v in (lo, hi) if v is not None]
    if _is_float(b, x) and all(isinstance(v, Const) and v.array.size == 1 for v in bounds):
        # the opset's clip (what plugins lower as relu6 & co.): float bounds are exact as attributes
        attrs = {k: None if v is None else float(v.array.ravel()[0]) for k, v in (("min", lo), ("max", hi))}  # type: ignore[union-attr]
        return b.emit(n.name, "clip", [x], attrs)
    out: Value = x
    if lo is not None:
        out = b.emit(n.name if hi is None else n.name + ".min", "maximum", [out, lo])
    if hi is not None:
        out = b.emit(n.name, "minimum", [out, hi])
    return out


def _mean(b: GraphBuilder, n: OnnxNode) -> Value:
    if len(n.inputs) == 1:
        return n.inputs[0]  # type: ignore[return-value]
    total = n.inputs[0]
    for i, v in enumerate(n.inputs[1:]):
        total = b.emit(f"{n.name}.sum{i}", "add", [total, v])  # type: ignore[list-item]
    count = Const(np.asarray(len(n.inputs), _np_dtype(b.spec(total).dtype)))  # type: ignore[arg-type]
    return b.emit(n.name, "div", [total, count])  # type: ignore[list-item]


def _swish(b: GraphBuilder, n: OnnxNode) -> Value:
    x = n.inputs[0]
    assert x is not None
    alpha = float(n.attrs.get("alpha", 1.0))
    if alpha == 1.0:
        return b.emit(n.name, "silu", [x])
    scaled = b.emit(n.name + ".scaled", "mul", [x, Const(np.asarray(alpha, _np_dtype(b.spec(x).dtype)))])
    return b.emit(n.name, "mul", [x, b.emit(n.name + ".sigmoid", "sigmoid", [scaled])])


def _gemm(b: GraphBuilder, n: OnnxNode) -> Value:
    """``linear`` (what every plugin lowers) for a float Gemm with a constant weight, a bias row
    and unit alpha/beta; ``gemm`` otherwise."""
    a = n.attrs
    alpha, beta, ta, tb = float(a.get("alpha", 1.0)), float(a.get("beta", 1.0)), bool(a.get("transA", 0)), bool(a.get("transB", 0))
    x, w, c = n.inputs[0], n.input(1), n.input(2)
    assert x is not None and w is not None
    dtype = b.spec(x).dtype
    row = c is None or (isinstance(c, Const) and c.array.size in (1, b.spec(w).shape[0 if tb else 1]) and c.array.ndim <= 2
                        and (c.array.ndim < 2 or c.array.shape[0] == 1))
    if isinstance(w, Const) and _is_float(b, x) and b.spec(w).dtype == dtype and row and not ta and alpha == beta == 1.0:
        weight = w.array if tb else w.array.T
        bias = None if c is None else np.broadcast_to(c.array.reshape(-1), (weight.shape[0],)).astype(w.array.dtype)  # type: ignore[union-attr]
        return b.emit(n.name, "linear", [x], {"in_features": int(weight.shape[1]), "out_features": int(weight.shape[0])},
                      {"weight": np.ascontiguousarray(weight), "bias": bias})
    return b.emit(n.name, "gemm", [v for v in n.inputs if v is not None], {"alpha": alpha, "beta": beta, "trans_a": ta, "trans_b": tb})


def _cumulative(op: str) -> Handler:
    def run(b: GraphBuilder, n: OnnxNode) -> Value:
        axis = ints(const(b, n, 1, "axis"))
        if len(axis) != 1:
            raise fail(b, n, f"takes an axis of {len(axis)} values; ONNX asks for one")
        return b.emit(n.name, op, [n.inputs[0]], {"axis": axis[0], "exclusive": bool(n.attrs.get("exclusive", 0)),  # type: ignore[list-item]
                                                  "reverse": bool(n.attrs.get("reverse", 0))})

    return run


def _bit_shift(b: GraphBuilder, n: OnnxNode) -> Value:
    direction = str(n.attrs.get("direction", "")).lower()
    if direction not in ("left", "right"):
        raise fail(b, n, f"has direction {n.attrs.get('direction')!r}; ONNX asks for LEFT or RIGHT")
    return b.emit(n.name, "bit_shift", n.inputs[:2], {"direction": direction})  # type: ignore[arg-type]


HANDLERS: dict[str, Handler] = {
    # arithmetic
    "Add": simple("add"), "Sub": simple("sub"), "Mul": simple("mul"), "Div": simple("div"), "Pow": simple("pow"),
    "Mod": _attrs("mod", fmod=("fmod", False)),
    "Max": variadic("maximum"), "Min": variadic("minimum"), "Sum": variadic("add"), "Mean": _mean,
    # unary math
    "Neg": simple("neg"), "Abs": simple("abs"), "Sign": simple("sign"), "Reciprocal": simple("reciprocal"), "Sqrt": simple("sqrt"),
    "Exp": simple("exp"), "Log": simple("log"), "Floor": simple("floor"), "Ceil": simple("ceil"), "Round": simple("round"),
    "Erf": simple("erf"), "Sin": simple("sin"), "Cos": simple("cos"), "Tan": simple("tan"), "Asin": simple("asin"),
    "Acos": simple("acos"), "Atan": simple("atan"), "Sinh": simple("sinh"), "Cosh": simple("cosh"), "Asinh": simple("asinh"),
    "Acosh": simple("acosh"), "Atanh": simple("atanh"),
    "IsNaN": simple("isnan"),
    "IsInf": _attrs("isinf", detect_positive=("detect_positive", True), detect_negative=("detect_negative", True)),
    # logical and bitwise
    "Equal": simple("equal"), "Less": simple("less"), "LessOrEqual": simple("less_equal"), "Greater": simple("greater"),
    "GreaterOrEqual": simple("greater_equal"), "And": simple("logical_and"), "Or": simple("logical_or"),
    "Xor": simple("logical_xor"), "Not": simple("logical_not"),
    "BitwiseAnd": simple("bitwise_and"), "BitwiseOr": simple("bitwise_or"), "BitwiseXor": simple("bitwise_xor"),
    "BitwiseNot": simple("bitwise_not"), "BitShift": _bit_shift,
    # activations
    "Relu": simple("relu"), "Sigmoid": simple("sigmoid"), "Tanh": simple("tanh"),
    "LeakyRelu": _attrs("leaky_relu", alpha=("alpha", 0.01)), "PRelu": simple("prelu"),
    "Elu": _attrs("elu", alpha=("alpha", 1.0)),
    "Selu": _attrs("selu", alpha=("alpha", 1.67326319217681884765625), gamma=("gamma", 1.05070102214813232421875)),
    "Celu": _attrs("celu", alpha=("alpha", 1.0)), "ThresholdedRelu": _attrs("thresholded_relu", alpha=("alpha", 1.0)),
    "Softplus": simple("softplus"), "Softsign": simple("softsign"), "Mish": simple("mish"), "Swish": _swish,
    "HardSigmoid": _attrs("hardsigmoid", alpha=("alpha", 0.2), beta=("beta", 0.5)), "HardSwish": simple("hardswish"),
    "Gelu": _attrs("gelu", approximate=("approximate", "none")),
    "Shrink": _attrs("shrink", bias=("bias", 0.0), lambd=("lambd", 0.5)),
    # opset 13 semantics: one axis (default the last), not the flattened 2-D view of opset 1-12
    "Softmax": _attrs("softmax", axis=("axis", -1)), "LogSoftmax": _attrs("log_softmax", axis=("axis", -1)),
    "Hardmax": _attrs("hardmax", axis=("axis", -1)),
    "Clip": _clip,
    # matrix products and scans
    "MatMul": simple("matmul"), "Gemm": _gemm, "Einsum": _attrs("einsum", equation=("equation", "")), "Det": simple("det"),
    "CumSum": _cumulative("cumsum"), "CumProd": _cumulative("cumprod"),
}
