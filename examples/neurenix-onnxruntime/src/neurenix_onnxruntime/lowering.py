"""Core ``Graph`` -> ONNX ``ModelProto`` with the onnx helper API (no PyTorch, no exporter).

Precisions: ``fp32`` (default), ``fp16`` (float16 weights and activations, float32 at the model
boundary), ``int8`` (a QDQ model: QuantizeLinear/DequantizeLinear pairs on every activation the
core's QuantizationPlan names, int8 per-channel weights, int32 biases; ONNX Runtime fuses the
patterns into QLinearConv/QLinearMatMul). Scales and zero points come from the plan unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from neurenix_core.errors import CompilationError, UnsupportedOperationError
from neurenix_core.graph.ir import Graph, Node, QuantizationPlan, QuantParams

from neurenix_onnxruntime.eager import OPSET

__all__ = ["PRECISIONS", "lower", "Lowered"]

PRECISIONS = ("fp32", "fp16", "int8")


@dataclass
class Lowered:
    """The ONNX model plus what the compiled model needs to describe itself."""

    model: onnx.ModelProto
    precision: str
    input_names: list[str]
    output_names: list[str]
    layers: int


@dataclass
class _Builder:
    """Mutable state of one lowering: nodes, initializers, value names and static shapes."""

    graph: Graph
    precision: str
    plan: QuantizationPlan | None
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    inits: list[onnx.TensorProto] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)  # graph value -> ONNX value consumers read
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)

    @property
    def float_type(self) -> np.dtype[Any]:
        return np.dtype(np.float16 if self.precision == "fp16" else np.float32)

    def const(self, name: str, array: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def weight(self, node: Node, key: str, array: np.ndarray) -> str:
        return self.const(f"{node.name}.{key}", np.asarray(array, dtype=self.float_type))

    def add(self, op: str, inputs: list[str], output: str, name: str, **attrs: Any) -> str:
        self.nodes.append(helper.make_node(op, inputs, [output], name=name, **attrs))
        return output

    def read(self, value: str) -> str:
        return self.names[value]


def _pair(value: Any) -> list[int]:
    return [int(value), int(value)] if isinstance(value, int) else [int(v) for v in value]


def _conv_out(size: int, k: int, s: int, p: int, d: int = 1) -> int:
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


# ----------------------------------------------------------------------------- quantization
def _q_consts(b: _Builder, prefix: str, qp: QuantParams) -> tuple[str, str]:
    per_tensor = qp.axis is None
    scale = np.asarray(qp.scale, dtype=np.float32)
    zp = np.asarray(qp.zero_point).astype(qp.dtype)
    if per_tensor:
        scale, zp = scale.reshape(()), zp.reshape(())
    return b.const(f"{prefix}.scale", scale), b.const(f"{prefix}.zero_point", zp)


def _qdq_activation(b: _Builder, value: str) -> None:
    """Q -> DQ after ``value`` when the plan quantizes it; consumers then read the DQ output."""
    if b.plan is None or value not in b.plan.activations:
        return
    qp = b.plan.activations[value]
    s, z = _q_consts(b, f"{value}.act", qp)
    q = b.add("QuantizeLinear", [b.read(value), s, z], f"{value}.q", f"{value}/quantize")
    b.names[value] = b.add("DequantizeLinear", [q, s, z], f"{value}.dq", f"{value}/dequantize")


def _quantized_weight(b: _Builder, node: Node, weight: np.ndarray, transpose: bool) -> str:
    """int8 per-channel weight initializer + DequantizeLinear (axis follows the layout)."""
    assert b.plan is not None
    qp = b.plan.weights[node.name]
    scale = np.asarray(qp.scale, dtype=np.float32).reshape(-1)
    shape = (-1,) + (1,) * (weight.ndim - 1)
    q = np.clip(np.round(weight / scale.reshape(shape)), qp.qmin, qp.qmax).astype(qp.dtype)
    axis = 0
    if transpose:
        q, axis = q.T, 1
    w = b.const(f"{node.name}.weight.q", q)
    s = b.const(f"{node.name}.weight.scale", scale)
    z = b.const(f"{node.name}.weight.zero_point", np.zeros_like(scale, dtype=qp.dtype))
    return b.add("DequantizeLinear", [w, s, z], f"{node.name}.weight.dq", f"{node.name}/weight_dequantize", axis=axis)


def _bias(b: _Builder, node: Node) -> str | None:
    bias = node.params.get("bias")
    if bias is None:
        return None
    inp = node.inputs[0]
    if b.plan is None or node.name not in b.plan.weights or inp not in b.plan.activations:
        return b.weight(node, "bias", bias)
    # int32 bias at scale s_in * s_w (zero point 0), the layout QLinearConv/QLinearMatMul fuse.
    s_in = float(np.asarray(b.plan.activations[inp].scale).reshape(-1)[0])
    s_w = np.asarray(b.plan.weights[node.name].scale, dtype=np.float32).reshape(-1)
    scale = (s_in * s_w).astype(np.float32)
    q = np.clip(np.round(np.asarray(bias, np.float64) / scale), -(2**31), 2**31 - 1).astype(np.int32)
    args = [b.const(f"{node.name}.bias.q", q), b.const(f"{node.name}.bias.scale", scale), b.const(f"{node.name}.bias.zero_point", np.zeros_like(q))]
    return b.add("DequantizeLinear", args, f"{node.name}.bias.dq", f"{node.name}/bias_dequantize", axis=0)


def _weight(b: _Builder, node: Node, transpose: bool) -> str:
    w = np.asarray(node.params["weight"], dtype=np.float32)
    if b.plan is not None and node.name in b.plan.weights:
        return _quantized_weight(b, node, w, transpose)
    return b.weight(node, "weight", w.T if transpose else w)


# ----------------------------------------------------------------------------- layers
def _linear(b: _Builder, node: Node) -> tuple[int, ...]:
    x = b.read(node.inputs[0])
    y = b.add("MatMul", [x, _weight(b, node, transpose=True)], f"{node.output}.matmul", node.name)
    bias = _bias(b, node)
    if bias is not None:
        y = b.add("Add", [y, bias], f"{node.output}.biased", f"{node.name}/bias")
    b.names[node.output] = y
    return b.shapes[node.inputs[0]][:-1] + (int(node.attrs["out_features"]),)


def _conv2d(b: _Builder, node: Node) -> tuple[int, ...]:
    a = node.attrs
    k, s, p, d = _pair(a["kernel_size"]), _pair(a["stride"]), _pair(a["padding"]), _pair(a["dilation"])
    inputs = [b.read(node.inputs[0]), _weight(b, node, transpose=False)]
    bias = _bias(b, node)
    if bias is not None:
        inputs.append(bias)
    b.names[node.output] = b.add("Conv", inputs, node.output, node.name, kernel_shape=k, strides=s, pads=p + p, dilations=d, group=int(a["groups"]))
    n, _, h, w = b.shapes[node.inputs[0]]
    return (n, int(a["out_channels"]), _conv_out(h, k[0], s[0], p[0], d[0]), _conv_out(w, k[1], s[1], p[1], d[1]))


def _pool(b: _Builder, node: Node) -> tuple[int, ...]:
    a = node.attrs
    k = _pair(a["kernel_size"])
    s = _pair(a["stride"]) if a.get("stride") is not None else k
    p = _pair(a.get("padding", 0))
    attrs: dict[str, Any] = {"kernel_shape": k, "strides": s, "pads": p + p}
    if node.op == "avg_pool2d":
        attrs["count_include_pad"] = int(bool(a.get("count_include_pad", True)))
    op = "MaxPool" if node.op == "max_pool2d" else "AveragePool"
    b.names[node.output] = b.add(op, [b.read(node.inputs[0])], node.output, node.name, **attrs)
    n, c, h, w = b.shapes[node.inputs[0]]
    return (n, c, _conv_out(h, k[0], s[0], p[0]), _conv_out(w, k[1], s[1], p[1]))


def _adaptive_avg_pool2d(b: _Builder, node: Node) -> tuple[int, ...]:
    oh, ow = _pair(node.attrs["output_size"])
    n, c, h, w = b.shapes[node.inputs[0]]
    x = b.read(node.inputs[0])
    if (oh, ow) == (1, 1):
        b.names[node.output] = b.add("GlobalAveragePool", [x], node.output, node.name)
    elif h % oh == 0 and w % ow == 0:
        k = [h // oh, w // ow]
        b.names[node.output] = b.add("AveragePool", [x], node.output, node.name, kernel_shape=k, strides=k)
    else:
        raise UnsupportedOperationError(
            f"layer {node.name} (adaptive_avg_pool2d to {(oh, ow)} from {(h, w)}): ONNX has no adaptive pooling with uneven "
            "windows; the ort backend lowers output sizes that divide the input. Resize the input or run this model eagerly."
        )
    return (n, c, oh, ow)


def _flatten(b: _Builder, node: Node) -> tuple[int, ...]:
    shape = b.shapes[node.inputs[0]]
    start = int(node.attrs.get("start_dim", 1)) % len(shape)
    end = int(node.attrs.get("end_dim", -1)) % len(shape)
    out = shape[:start] + (int(np.prod(shape[start : end + 1])),) + shape[end + 1 :]
    target = b.const(f"{node.name}.shape", np.asarray(out, dtype=np.int64))
    b.names[node.output] = b.add("Reshape", [b.read(node.inputs[0]), target], node.output, node.name)
    return out


def _unary(op: str, **fixed: Any) -> Callable[[_Builder, Node], tuple[int, ...]]:
    def lower_one(b: _Builder, node: Node) -> tuple[int, ...]:
        attrs = dict(fixed)
        if node.op == "gelu":
            attrs["approximate"] = str(node.attrs.get("approximate", "none"))
        if node.op == "softmax":
            attrs["axis"] = int(node.attrs.get("axis", -1))
        b.names[node.output] = b.add(op, [b.read(node.inputs[0])], node.output, node.name, **attrs)
        return b.shapes[node.inputs[0]]

    return lower_one


def _binary(op: str) -> Callable[[_Builder, Node], tuple[int, ...]]:
    def lower_one(b: _Builder, node: Node) -> tuple[int, ...]:
        b.names[node.output] = b.add(op, [b.read(i) for i in node.inputs], node.output, node.name)
        return tuple(np.broadcast_shapes(*(b.shapes[i] for i in node.inputs)))

    return lower_one


def _batch_norm2d(b: _Builder, node: Node) -> tuple[int, ...]:
    keys = ("weight", "bias", "running_mean", "running_var")
    args = [b.read(node.inputs[0])] + [b.weight(node, k, node.params[k]) for k in keys]
    b.names[node.output] = b.add("BatchNormalization", args, node.output, node.name, epsilon=float(node.attrs["eps"]))
    return b.shapes[node.inputs[0]]


def _layer_norm(b: _Builder, node: Node) -> tuple[int, ...]:
    norm = tuple(int(d) for d in node.attrs["normalized_shape"])
    weight = node.params.get("weight", np.ones(norm, np.float32))
    bias = node.params.get("bias", np.zeros(norm, np.float32))
    args = [b.read(node.inputs[0]), b.weight(node, "weight", weight), b.weight(node, "bias", bias)]
    b.names[node.output] = b.add("LayerNormalization", args, node.output, node.name, axis=-len(norm), epsilon=float(node.attrs["eps"]))
    return b.shapes[node.inputs[0]]


def _dropout(b: _Builder, node: Node) -> tuple[int, ...]:
    b.names[node.output] = b.read(node.inputs[0])  # identity at inference
    return b.shapes[node.inputs[0]]


_LAYERS: dict[str, Callable[[_Builder, Node], tuple[int, ...]]] = {
    "linear": _linear,
    "conv2d": _conv2d,
    "max_pool2d": _pool,
    "avg_pool2d": _pool,
    "adaptive_avg_pool2d": _adaptive_avg_pool2d,
    "flatten": _flatten,
    "relu": _unary("Relu"),
    "sigmoid": _unary("Sigmoid"),
    "tanh": _unary("Tanh"),
    "gelu": _unary("Gelu"),
    "softmax": _unary("Softmax"),
    "batch_norm2d": _batch_norm2d,
    "layer_norm": _layer_norm,
    "dropout": _dropout,
    "add": _binary("Add"),
    "mul": _binary("Mul"),
}


# ----------------------------------------------------------------------------- driver
def _check(graph: Graph, precision: str, plan: QuantizationPlan | None) -> None:
    if precision not in PRECISIONS:
        raise CompilationError(
            f"ort (plugin onnxruntime) cannot compile precision {precision!r}: ONNX Runtime's providers here run "
            f"{', '.join(PRECISIONS)}. Pick one of them, or compile for another device."
        )
    if precision == "int8" and (plan is None or plan.bits != 8 or plan.dynamic):
        raise CompilationError(
            "ort (plugin onnxruntime): precision 'int8' needs a static 8-bit QuantizationPlan from the core's calibration "
            "(nx.compile(..., quantize='int8', calibration=...)); dynamic plans are not lowered."
        )
    for node in graph.nodes:
        if node.op not in _LAYERS:
            raise UnsupportedOperationError(
                f"layer {node.name} ({node.op}) has no ONNX lowering in the ort backend; run the model eagerly "
                "(nx.compile falls back under the fallback policy) or on another device."
            )


def _inputs(b: _Builder) -> list[onnx.ValueInfoProto]:
    infos = []
    for spec in b.graph.inputs:
        infos.append(helper.make_tensor_value_info(spec.name, TensorProto.FLOAT, list(spec.shape)))
        b.shapes[spec.name] = tuple(spec.shape)
        b.names[spec.name] = spec.name
        if b.precision == "fp16":  # float32 at the boundary, float16 inside
            b.names[spec.name] = b.add("Cast", [spec.name], f"{spec.name}.fp16", f"{spec.name}/to_fp16", to=TensorProto.FLOAT16)
        _qdq_activation(b, spec.name)
    return infos


def _outputs(b: _Builder) -> tuple[list[onnx.ValueInfoProto], list[str]]:
    infos, names = [], []
    for i, value in enumerate(b.graph.outputs):
        name = f"output_{i}"
        if b.precision == "fp16":
            b.add("Cast", [b.read(value)], name, f"{name}/to_fp32", to=TensorProto.FLOAT)
        else:
            b.add("Identity", [b.read(value)], name, f"{name}/identity")
        infos.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(b.shapes[value])))
        names.append(name)
    return infos, names


def lower(graph: Graph, precision: str = "fp32", plan: QuantizationPlan | None = None) -> Lowered:
    """Lower ``graph`` (static input shapes) to an ONNX model of opset ``OPSET``."""
    _check(graph, precision, plan)
    b = _Builder(graph, precision, plan if precision == "int8" else None)
    inputs = _inputs(b)
    for node in graph.nodes:
        b.shapes[node.output] = _LAYERS[node.op](b, node)
        _qdq_activation(b, node.output)
    outputs, out_names = _outputs(b)
    onnx_graph = helper.make_graph(b.nodes, "neurenix_model", inputs, outputs, initializer=b.inits)
    model = helper.make_model(onnx_graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="neurenix-onnxruntime")
    model.ir_version = 10
    return Lowered(model, precision, [s.name for s in graph.inputs], out_names, len(graph.nodes))
