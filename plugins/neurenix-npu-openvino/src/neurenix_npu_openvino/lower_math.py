"""Elementwise, comparison, unary, activation, reduction, cast and constant ops -> opset16.

Operands of different dtypes are converted to the dtype the opset infers before the OpenVINO op
(OpenVINO's arithmetic takes one element type); the driver converts each result back to the
opset's output dtype, which is also all ``cast`` needs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import numpy as np

from neurenix_core.contract import Node
from neurenix_npu_openvino.lower_types import Handler, LoweringContext, axis_of

__all__ = ["HANDLERS"]

Attrs = Mapping[str, Any]


def _operands(lw: LoweringContext, node: Node, x: list[Any], dtype: str | None = None) -> list[Any]:
    """Inputs converted to one dtype: ``dtype``, else the node's output dtype."""
    target = dtype or lw.spec_of(node).dtype
    return [lw.to_dtype(v, target) for v in x]


def _common_dtype(lw: LoweringContext, node: Node) -> str:
    """The dtype comparisons compare in (floats win, else a shared integer type)."""
    dtypes = [lw.specs[i].dtype for i in node.inputs]
    if any(d.startswith(("float", "bfloat")) for d in dtypes):
        return "float32"
    if len(set(dtypes)) == 1:
        return dtypes[0]
    return "int64"


#: OpenVINO's arithmetic refuses boolean operands; on bools the opset's mul/minimum are "and" and
#: add/maximum "or" (PyTorch's and NumPy's results: isfinite is imported as a product of two masks).
_BOOL_BINARY: Final = {"multiply": "logical_and", "minimum": "logical_and", "add": "logical_or", "maximum": "logical_or"}


def _binary(name: str) -> Handler:
    def lower(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
        if lw.spec_of(node).dtype == "bool" and name in _BOOL_BINARY:
            return getattr(lw.op, _BOOL_BINARY[name])(*_operands(lw, node, x))
        return getattr(lw.op, name)(*_operands(lw, node, x))

    return lower


def _div(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
    num, den = _operands(lw, node, x)
    if lw.spec_of(node).dtype.startswith("float"):
        return lw.op.divide(num, den)
    # Integers truncate toward zero (ONNX, the opset); OpenVINO's integer Divide floors, which
    # agrees on magnitudes: trunc(a / b) = sign(a) * sign(b) * (|a| // |b|).
    quotient = lw.op.divide(lw.op.abs(num), lw.op.abs(den))
    return lw.op.multiply(quotient, lw.op.multiply(lw.op.sign(num), lw.op.sign(den)))


def _compare(name: str) -> Handler:
    def lower(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
        return getattr(lw.op, name)(*_operands(lw, node, x, _common_dtype(lw, node)))

    return lower


def _logical(name: str) -> Handler:
    def lower(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
        return getattr(lw.op, name)(*_operands(lw, node, x, "bool"))

    return lower


def _unary(name: str) -> Handler:
    def lower(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
        return getattr(lw.op, name)(x[0])

    return lower


def _rsqrt(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
    return lw.op.divide(lw.scalar_like(x[0], 1.0), lw.op.sqrt(x[0]))


def _reciprocal(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
    return lw.op.divide(lw.scalar_like(x[0], 1.0), x[0])


def _relu(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
    if lw.specs[node.inputs[0]].dtype.startswith("float"):
        return lw.op.relu(x[0])
    return lw.op.maximum(x[0], lw.scalar_like(x[0], 0))  # Relu is float-only in OpenVINO


def _identity(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
    return x[0]  # dropout at inference, identity


def _clip(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
    out = x[0]
    if a["min"] is not None:
        out = lw.op.maximum(out, lw.scalar_like(out, a["min"]))
    if a["max"] is not None:
        out = lw.op.minimum(out, lw.scalar_like(out, a["max"]))
    return out


def _leaky_relu(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
    return lw.op.prelu(x[0], lw.const([a["alpha"]]))


def _hardsigmoid(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
    alpha, beta = float(a["alpha"]), float(a["beta"])
    if abs(alpha - 1.0 / 6.0) < 1e-9 and beta == 0.5:
        # PyTorch's hardsigmoid is OpenVINO's HSigmoid, which the CPU plugin fuses with its
        # neighbours (HardSigmoid runs as a separate kernel with layout reorders around it).
        return lw.op.hsigmoid(x[0])
    scaled = lw.op.add(lw.op.multiply(x[0], lw.scalar_like(x[0], alpha)), lw.scalar_like(x[0], beta))
    return lw.op.clamp(scaled, 0.0, 1.0)


def _gelu(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
    return lw.op.gelu(x[0], "tanh" if a["approximate"] == "tanh" else "erf")


def _softmax(name: str) -> Handler:
    def lower(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
        return getattr(lw.op, name)(x[0], int(a["axis"]))

    return lower


#: The value reduce_max / reduce_min give when every element is it (or there is none): OpenVINO's
#: CPU kernels start from the lowest / highest finite float and return that for a row of -inf /
#: +inf, where ONNX (and NumPy) give -inf / +inf.
_EXTREMES: Final = {"reduce_max": -np.inf, "reduce_min": np.inf}


def _reduce(name: str) -> Handler:
    def lower(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
        ndim = len(lw.shape(x[0]))
        reduced = sorted(range(ndim) if a["axes"] is None else [axis_of(int(v), ndim) for v in a["axes"]])
        axes = lw.axes(reduced)
        keep, dtype = bool(a["keepdims"]), lw.specs[node.inputs[0]].dtype
        if name == "reduce_mean" and any(lw.shape(x[0])[i] == 0 for i in reduced):
            # The mean of no values is 0/0 = NaN (NumPy, PyTorch); OpenVINO's ReduceMean gives 0.
            spec = lw.spec_of(node)
            return lw.const(np.full(spec.shape, np.nan), lw.ov_type(spec.dtype).to_dtype())
        if dtype == "bool":  # OpenVINO reduces numbers only: max is "any", min is "all"
            logical = {"reduce_max": "reduce_logical_or", "reduce_min": "reduce_logical_and"}.get(name)
            if logical is not None:
                return getattr(lw.op, logical)(x[0], axes, keep)
            return lw.to_dtype(getattr(lw.op, name)(lw.to_dtype(x[0], "int64"), axes, keep), "bool")
        out = getattr(lw.op, name)(x[0], axes, keep)
        if name in _EXTREMES and dtype.startswith(("float", "bfloat")):
            extreme = lw.const(np.asarray(_EXTREMES[name], np.float32))
            every = lw.op.reduce_logical_and(lw.op.equal(x[0], extreme), axes, keep)
            out = lw.op.select(every, extreme, out)
        return out

    return lower


def _global(name: str) -> Handler:
    def lower(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
        return getattr(lw.op, name)(x[0], lw.axes([2, 3]), True)

    return lower


def _arg(mode: str) -> Handler:
    def lower(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
        if not lw.shape(x[0]):
            return lw.const(0, np.int64)  # a 0-d input's only index (OpenVINO's TopK refuses rank 0)
        axis = axis_of(int(a["axis"]), len(lw.shape(x[0])))
        # stable=True (which needs a sort mode): ties give the first index, as the opset's (NumPy's) argmax.
        indices = lw.op.topk(x[0], lw.const(1, np.int64), axis, mode, "value", "i64", True).output(1)
        return indices if a["keepdims"] else lw.op.squeeze(indices, lw.axes([axis]))

    return lower


def _cast(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
    if a["to"] == "bool" and lw.specs[node.inputs[0]].dtype != "bool":
        # Convert to boolean is "not equal to zero" (NumPy's astype(bool)), stated explicitly.
        return lw.op.not_equal(x[0], lw.scalar_like(x[0], 0))
    return x[0]  # the driver converts to the opset's output dtype


def _constant(lw: LoweringContext, node: Node, a: Attrs, x: list[Any]) -> Any:
    value = np.asarray(node.params["value"])
    return lw.op.constant(np.array(value, dtype=lw.ov_type(lw.spec_of(node).dtype).to_dtype(), order="C"))


_BINARY: Final = {"add": "add", "sub": "subtract", "mul": "multiply", "pow": "power", "maximum": "maximum", "minimum": "minimum"}
_COMPARE: Final = {"equal": "equal", "not_equal": "not_equal", "less": "less", "less_equal": "less_equal", "greater": "greater",
                   "greater_equal": "greater_equal"}
_UNARY: Final = {"exp": "exp", "log": "log", "sqrt": "sqrt", "sin": "sin", "cos": "cos", "erf": "erf", "tanh": "tanh",
                 "sigmoid": "sigmoid", "floor": "floor", "ceil": "ceiling", "neg": "negative", "abs": "abs", "sign": "sign",
                 "silu": "swish", "hardswish": "hswish", "isnan": "is_nan"}

HANDLERS: Final[dict[str, Handler]] = {
    **{op: _binary(ov) for op, ov in _BINARY.items()},
    "div": _div,
    **{op: _compare(ov) for op, ov in _COMPARE.items()},
    "logical_and": _logical("logical_and"),
    "logical_or": _logical("logical_or"),
    "logical_not": _logical("logical_not"),
    **{op: _unary(ov) for op, ov in _UNARY.items()},
    "rsqrt": _rsqrt,
    "reciprocal": _reciprocal,
    "relu": _relu,
    "identity": _identity,
    "dropout": _identity,
    "clip": _clip,
    "leaky_relu": _leaky_relu,
    "hardsigmoid": _hardsigmoid,
    "gelu": _gelu,
    "softmax": _softmax("softmax"),
    "log_softmax": _softmax("log_softmax"),
    **{f"reduce_{k}": _reduce(f"reduce_{k}") for k in ("sum", "mean", "max", "min", "prod")},
    "global_avg_pool": _global("reduce_mean"),
    "global_max_pool": _global("reduce_max"),
    "argmax": _arg("max"),
    "argmin": _arg("min"),
    "cast": _cast,
    "constant": _constant,
}
