"""ONNX import handlers: Quantization ops (ONNX's quantization family: QuantizeLinear, DequantizeLinear,
DynamicQuantizeLinear, QLinearMatMul, QLinearConv, MatMulInteger, ConvInteger).

Scales and zero points stay inputs (a model may compute or feed them). QuantizeLinear and
DequantizeLinear also take ONNX's low-precision storage types (float8, float4 e2m1, int4, int2 and
their unsigned forms; an e8m0 scale), which run on cpu:0 (``opset.quantization``); float6 and the
QLinear / *Integer ops beyond int8 / uint8 are refused, naming the type.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from neurenix_core.graph.importers.builder import Const, GraphBuilder, Value
from neurenix_core.graph.importers.onnx_common import Handler, OnnxNode, fail, outputs_used
from neurenix_core.graph.opset.quantization import QUANT_TYPES, SCALE_DTYPES

__all__ = ["HANDLERS"]

_INT8 = ("int8", "uint8")


def _onnx_dtype(b: GraphBuilder, n: OnnxNode, code: int) -> str:
    """The name of ONNX's TensorProto data type ``code`` as NumPy / ml_dtypes spells it."""
    from onnx import helper

    try:
        return str(np.dtype(helper.tensor_dtype_to_np_dtype(int(code))))
    except (KeyError, TypeError, ValueError) as exc:
        raise fail(b, n, f"names TensorProto type {code}, which has no NumPy dtype") from exc


def _require(b: GraphBuilder, n: OnnxNode, i: int, allowed: Sequence[str], what: str) -> str:
    dtype = b.spec(n.inputs[i]).dtype  # type: ignore[arg-type]
    if dtype not in allowed:
        raise fail(b, n, f"reads {what} of type {dtype}; neurenix quantized ops take {', '.join(allowed)}")
    return dtype


def _zero_or(b: GraphBuilder, n: OnnxNode, i: int, dtype: str) -> Value:
    """Input ``i`` (a zero point), or a scalar zero of ``dtype`` where the model leaves it out."""
    v = n.input(i)
    return Const(np.zeros((), dtype)) if v is None else v


# ----------------------------------------------------------------------------- QuantizeLinear / DequantizeLinear
def _quantize(b: GraphBuilder, n: OnnxNode) -> Value:
    _require(b, n, 0, ("float32", "float16", "bfloat16", "float64", "int32"), "x")
    _require(b, n, 1, SCALE_DTYPES, "the scale")
    zp = n.input(2)
    declared = n.attrs.get("output_dtype", 0)
    dtype = b.spec(zp).dtype if zp is not None else (_onnx_dtype(b, n, declared) if declared else "uint8")
    if declared and _onnx_dtype(b, n, declared) != dtype:
        raise fail(b, n, f"declares output_dtype {_onnx_dtype(b, n, declared)} but its zero point is {dtype}")
    if dtype not in QUANT_TYPES:
        raise fail(b, n, f"quantizes to {dtype}, which neurenix does not quantize to (supported: {', '.join(QUANT_TYPES)})")
    precision = n.attrs.get("precision", 0)
    attrs = {"axis": int(n.attrs.get("axis", 1)), "block_size": int(n.attrs.get("block_size", 0)), "dtype": dtype,
             "precision": _onnx_dtype(b, n, precision) if precision else None}
    if not int(n.attrs.get("saturate", 1)):
        attrs["saturate"] = 0  # float8 only: overflow gives inf / NaN as Cast's saturate=0 does
    return b.emit(n.name, "quantize_linear", [v for v in n.inputs[:3] if v is not None], attrs)


def _dequantize(b: GraphBuilder, n: OnnxNode) -> Value:
    x = _require(b, n, 0, (*QUANT_TYPES, "int32"), "x")
    _require(b, n, 1, SCALE_DTYPES, "the scale")
    if n.input(2) is not None:
        _require(b, n, 2, (x,), "a zero point")
    declared = n.attrs.get("output_dtype", 0)
    attrs = {"axis": int(n.attrs.get("axis", 1)), "block_size": int(n.attrs.get("block_size", 0)),
             "dtype": _onnx_dtype(b, n, declared) if declared else None}
    return b.emit(n.name, "dequantize_linear", [v for v in n.inputs[:3] if v is not None], attrs)


def _dynamic_quantize(b: GraphBuilder, n: OnnxNode) -> list[Value | None]:
    _require(b, n, 0, ("float32",), "x")
    return [b.emit(f"{n.name}.{k}" if k else n.name, "dynamic_quantize_linear", [n.inputs[0]], {"output": k}) if used else None  # type: ignore[list-item]
            for k, used in enumerate(outputs_used(n))]


# ----------------------------------------------------------------------------- integer matmul
def _matmul_integer(b: GraphBuilder, n: OnnxNode) -> Value:
    a, w = _require(b, n, 0, _INT8, "A"), _require(b, n, 1, _INT8, "B")
    inputs: list[Value] = [n.inputs[0], n.inputs[1]]  # type: ignore[list-item]
    if n.input(2) is not None or n.input(3) is not None:
        inputs += [_zero_or(b, n, 2, a), _zero_or(b, n, 3, w)]
    return b.emit(n.name, "matmul_integer", inputs)


def _qlinear_inputs(b: GraphBuilder, n: OnnxNode, first: str, second: str) -> list[Value]:
    """QLinearMatMul / QLinearConv's eight operands (x, scale, zero point for both inputs and the
    output), int8 or uint8, a left-out zero point as a zero of its tensor's dtype."""
    xd, wd = _require(b, n, 0, _INT8, first), _require(b, n, 3, _INT8, second)
    y = b.spec(n.inputs[7]).dtype if n.input(7) is not None else xd  # type: ignore[arg-type]
    if y not in _INT8:
        raise fail(b, n, f"writes {y}; neurenix quantized ops take int8, uint8")
    zeros = {2: xd, 5: wd, 7: y}
    return [_zero_or(b, n, i, zeros[i]) if i in zeros else n.inputs[i] for i in range(8)]  # type: ignore[misc]


def _qlinear_matmul(b: GraphBuilder, n: OnnxNode) -> Value:
    return b.emit(n.name, "qlinear_matmul", _qlinear_inputs(b, n, "a", "b"))


# ----------------------------------------------------------------------------- integer convolution
def _conv_attrs(b: GraphBuilder, n: OnnxNode, x: Value, w: Value) -> dict[str, Any]:
    """ONNX Conv attributes with auto_pad resolved into explicit pads (begins, then ends)."""
    xs, ws = b.spec(x).shape, b.spec(w).shape
    nd = len(xs) - 2
    if nd < 1 or len(ws) != len(xs):
        raise fail(b, n, f"convolves input {xs} with weight {ws}; both need N, C and at least one spatial axis")
    a = n.attrs
    strides = tuple(int(s) for s in a.get("strides", (1,) * nd))
    dil = tuple(int(d) for d in a.get("dilations", (1,) * nd))
    kernel = tuple(int(k) for k in a.get("kernel_shape", ws[2:]))
    if kernel != tuple(ws[2:]):
        raise fail(b, n, f"declares kernel_shape {kernel} but its weight is {ws}")
    auto = a.get("auto_pad", "NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    pads = [int(p) for p in a.get("pads", (0,) * 2 * nd)]
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        for i in range(nd):
            total = max(0, (math.ceil(xs[2 + i] / strides[i]) - 1) * strides[i] + dil[i] * (kernel[i] - 1) + 1 - xs[2 + i])
            small = total // 2
            pads[i], pads[nd + i] = (small, total - small) if auto == "SAME_UPPER" else (total - small, small)
    elif auto == "VALID":
        pads = [0] * 2 * nd
    elif auto != "NOTSET":
        raise fail(b, n, f"has auto_pad {auto!r}")
    return {"strides": strides, "pads": tuple(pads), "dilations": dil, "group": int(a.get("group", 1))}


def _conv_integer(b: GraphBuilder, n: OnnxNode) -> Value:
    xd, wd = _require(b, n, 0, _INT8, "x"), _require(b, n, 1, _INT8, "w")
    inputs: list[Value] = [n.inputs[0], n.inputs[1]]  # type: ignore[list-item]
    if n.input(2) is not None or n.input(3) is not None:
        inputs += [_zero_or(b, n, 2, xd), _zero_or(b, n, 3, wd)]
    return b.emit(n.name, "conv_integer", inputs, _conv_attrs(b, n, inputs[0], inputs[1]))


def _qlinear_conv(b: GraphBuilder, n: OnnxNode) -> Value:
    inputs = _qlinear_inputs(b, n, "x", "w")
    if n.input(8) is not None:
        _require(b, n, 8, ("int32",), "the bias")
        inputs.append(n.required(b, 8))
    return b.emit(n.name, "qlinear_conv", inputs, _conv_attrs(b, n, inputs[0], inputs[3]))


HANDLERS: dict[str, Handler] = {
    "QuantizeLinear": _quantize,
    "DequantizeLinear": _dequantize,
    "DynamicQuantizeLinear": _dynamic_quantize,
    "MatMulInteger": _matmul_integer,
    "QLinearMatMul": _qlinear_matmul,
    "ConvInteger": _conv_integer,
    "QLinearConv": _qlinear_conv,
}
