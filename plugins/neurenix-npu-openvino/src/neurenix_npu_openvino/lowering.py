"""The core's model graph (neurenix_core.graph.ir.Graph) -> an ``openvino.Model`` built with opset16.

No PyTorch and no ONNX in between: each node becomes a few opset nodes, weights become
constants, and a QuantizationPlan becomes FakeQuantize nodes on the values and weights it names
(quantize.py). Shapes are static (the core compiles per input shape), so every layer is checked
here and a mismatch names the layer instead of surfacing as an OpenVINO validation error.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Final

import numpy as np

from neurenix_core.errors import ShapeError, UnsupportedOperationError
from neurenix_core.graph.ir import Graph, Node, QuantizationPlan
from neurenix_npu_openvino.quantize import activation_bounds, fake_quantize, weight_bounds

__all__ = ["lower_graph", "LOWERED_OPS"]

Handler = Callable[["_Lowering", Node, list[Any]], Any]


def lower_graph(graph: Graph, plan: QuantizationPlan | None = None, *, device: str = "npu:0") -> Any:
    """Build the OpenVINO model of ``graph``; ``plan`` adds FakeQuantize nodes (int8/int16)."""
    return _Lowering(graph, plan, device).build()


class _Lowering:
    def __init__(self, graph: Graph, plan: QuantizationPlan | None, device: str) -> None:
        import openvino as ov
        import openvino.opset16 as opset

        self.ov = ov
        self.op = opset
        self.graph = graph
        self.plan = plan
        self.device = device
        self.values: dict[str, Any] = {}

    # ------------------------------------------------------------------ driver
    def build(self) -> Any:
        params = []
        for spec in self.graph.inputs:
            param = self.op.parameter(list(spec.shape), self.ov.Type(np.dtype(spec.dtype)), name=spec.name)
            param.output(0).set_names({spec.name})
            params.append(param)
            self.values[spec.name] = self._quantize_value(spec.name, param.output(0))
        for node in self.graph.nodes:
            handler = _HANDLERS.get(node.op)
            if handler is None:
                raise UnsupportedOperationError(
                    f"layer {node.name!r} ({node.op}) has no OpenVINO lowering in neurenix-npu-openvino; "
                    f"lowered ops: {', '.join(sorted(_HANDLERS))}. Run the model eagerly or on device='cpu'."
                )
            missing = [n for n in node.inputs if n not in self.values]
            if missing:
                raise UnsupportedOperationError(f"layer {node.name!r} reads {missing}, which no earlier node or graph input produces")
            out = handler(self, node, [self.values[n] for n in node.inputs])
            self.values[node.output] = self._quantize_value(node.output, _output(out))
        results = []
        for name in self.graph.outputs:
            result = self.op.result(self.values[name])
            result.output(0).set_names({name})
            results.append(result)
        return self.ov.Model(results, params, "neurenix")

    def _quantize_value(self, name: str, value: Any) -> Any:
        plan = self.plan
        if plan is None or plan.dynamic or name not in plan.activations:
            return value
        low, high, levels = activation_bounds(plan.activations[name])
        return _output(fake_quantize(self.op, value, low, high, levels))

    # ------------------------------------------------------------------ helpers
    def const(self, array: Any, dtype: Any = np.float32) -> Any:
        return self.op.constant(np.ascontiguousarray(np.asarray(array, dtype=dtype)))

    def shape(self, value: Any) -> tuple[int, ...]:
        return tuple(int(d) for d in _output(value).get_partial_shape().to_shape())

    def weight(self, node: Node) -> Any:
        """The node's weight as a constant, quantized when the plan names the node."""
        w = np.asarray(node.params["weight"], np.float32)
        plan = self.plan
        if plan is None or node.name not in plan.weights:
            return self.const(w)
        q = plan.weights[node.name]
        if plan.dynamic:
            return self._compressed_weight(w, q)
        low, high, levels = weight_bounds(q, w.ndim)
        return _output(fake_quantize(self.op, self.const(w), low, high, levels))

    def _compressed_weight(self, w: np.ndarray, q: Any) -> Any:
        # Integer weights + Convert + Multiply(scale): the pattern OpenVINO executes as an
        # int8-weight FullyConnected with activations quantized at run time.
        scale = np.asarray(q.scale, np.float32).reshape((-1,) + (1,) * (w.ndim - 1))
        ints = np.clip(np.rint(w / scale), q.qmin, q.qmax).astype(q.dtype)
        converted = self.op.convert(self.op.constant(ints), self.ov.Type.f32)
        return _output(self.op.multiply(converted, self.const(scale)))

    def bias(self, node: Node) -> np.ndarray | None:
        b = node.params.get("bias")
        return None if b is None else np.asarray(b, np.float32)

    def expect_rank(self, node: Node, value: Any, rank: int, what: str) -> tuple[int, ...]:
        shape = self.shape(value)
        if len(shape) != rank:
            self._shape_error(node, shape, what)
        return shape

    def expect(self, node: Node, value: Any, rank: int | None, axis: int, size: int, what: str) -> tuple[int, ...]:
        shape = self.shape(value)
        if (rank is not None and len(shape) != rank) or not shape or shape[axis] != size:
            self._shape_error(node, shape, what)
        return shape

    def _shape_error(self, node: Node, shape: tuple[int, ...], what: str) -> None:
        inputs = ", ".join(f"{s.name}{tuple(s.shape)}" for s in self.graph.inputs)
        raise ShapeError(
            f"{self.device}: layer {node.name!r} ({node.op}) expects {what} but receives shape {shape} "
            f"(model inputs: {inputs}); pass inputs of the shape the model was built for"
        )


def _output(node: Any) -> Any:
    return node.output(0) if hasattr(node, "output") and not hasattr(node, "get_node") else node


# ---------------------------------------------------------------------- layers
def _linear(lw: _Lowering, node: Node, x: list[Any]) -> Any:
    in_features = int(node.attrs.get("in_features", np.shape(node.params["weight"])[1]))
    lw.expect(node, x[0], None, -1, in_features, f"a last dimension of {in_features} (in_features)")
    out = lw.op.matmul(x[0], lw.weight(node), False, True)
    b = lw.bias(node)
    return out if b is None else lw.op.add(out, lw.const(b))


def _conv2d(lw: _Lowering, node: Node, x: list[Any]) -> Any:
    a = node.attrs
    groups = int(a.get("groups", 1))
    w_shape = np.shape(node.params["weight"])
    in_channels = int(a.get("in_channels", w_shape[1] * groups))
    lw.expect(node, x[0], 4, 1, in_channels, f"NCHW input with {in_channels} channels")
    stride, pad, dil = _pair(a.get("stride", 1)), _pair(a.get("padding", 0)), _pair(a.get("dilation", 1))
    w = lw.weight(node)
    if groups == 1:
        out = lw.op.convolution(x[0], w, stride, pad, pad, dil)
    else:
        grouped = lw.op.reshape(w, lw.const([groups, w_shape[0] // groups, *w_shape[1:]], np.int64), False)
        out = lw.op.group_convolution(x[0], grouped, stride, pad, pad, dil)
    b = lw.bias(node)
    return out if b is None else lw.op.add(out, lw.const(b.reshape(1, -1, 1, 1)))


def _activation(name: str) -> Handler:
    def lower(lw: _Lowering, node: Node, x: list[Any]) -> Any:
        return getattr(lw.op, name)(x[0])

    return lower


def _gelu(lw: _Lowering, node: Node, x: list[Any]) -> Any:
    return lw.op.gelu(x[0], "tanh" if node.attrs.get("approximate", "none") == "tanh" else "erf")


def _softmax(lw: _Lowering, node: Node, x: list[Any]) -> Any:
    return lw.op.softmax(x[0], int(node.attrs.get("axis", -1)))


def _pool_args(node: Node) -> tuple[list[int], list[int], list[int]]:
    k = _pair(node.attrs["kernel_size"])
    s = _pair(node.attrs.get("stride") or node.attrs["kernel_size"])
    return k, s, _pair(node.attrs.get("padding", 0))


def _max_pool2d(lw: _Lowering, node: Node, x: list[Any]) -> Any:
    lw.expect_rank(node, x[0], 4, "an NCHW input")
    k, s, p = _pool_args(node)
    return lw.op.max_pool(x[0], s, [1, 1], p, p, k, "floor").output(0)


def _avg_pool2d(lw: _Lowering, node: Node, x: list[Any]) -> Any:
    lw.expect_rank(node, x[0], 4, "an NCHW input")
    k, s, p = _pool_args(node)
    # opset16 AvgPool has dilations; leaving them None crashes OpenVINO 2026.4 at compile time.
    return lw.op.avg_pool(x[0], s, p, p, k, not bool(node.attrs.get("count_include_pad", True)), "floor", dilations=[1, 1])


def _adaptive_avg_pool2d(lw: _Lowering, node: Node, x: list[Any]) -> Any:
    lw.expect_rank(node, x[0], 4, "an NCHW input")
    return lw.op.adaptive_avg_pool(x[0], lw.const(_pair(node.attrs["output_size"]), np.int64))


def _flatten(lw: _Lowering, node: Node, x: list[Any]) -> Any:
    shape = lw.shape(x[0])
    start = _axis(int(node.attrs.get("start_dim", 1)), len(shape))
    end = _axis(int(node.attrs.get("end_dim", -1)), len(shape))
    target = [*shape[:start], int(np.prod(shape[start : end + 1], dtype=np.int64)), *shape[end + 1 :]]
    return lw.op.reshape(x[0], lw.const(target, np.int64), False)


def _batch_norm2d(lw: _Lowering, node: Node, x: list[Any]) -> Any:
    c = int(node.attrs.get("num_features", np.shape(node.params["running_mean"])[0]))
    lw.expect(node, x[0], None, 1, c, f"{c} channels on axis 1 (num_features)")
    p = node.params
    gamma = p.get("weight")
    beta = p.get("bias")
    return lw.op.batch_norm_inference(
        x[0],
        lw.const(np.ones(c) if gamma is None else gamma),
        lw.const(np.zeros(c) if beta is None else beta),
        lw.const(p["running_mean"]),
        lw.const(p["running_var"]),
        float(node.attrs.get("eps", 1e-5)),
    )


def _layer_norm(lw: _Lowering, node: Node, x: list[Any]) -> Any:
    shape = tuple(int(d) for d in node.attrs["normalized_shape"])
    got = lw.shape(x[0])
    if got[len(got) - len(shape) :] != shape:
        lw._shape_error(node, got, f"trailing dimensions {shape} (normalized_shape)")
    axes = lw.const(np.arange(-len(shape), 0), np.int64)
    out = lw.op.mvn(x[0], axes, True, float(node.attrs.get("eps", 1e-5)), "inside_sqrt")
    if node.params.get("weight") is not None:
        out = lw.op.multiply(out, lw.const(node.params["weight"]))
    if node.params.get("bias") is not None:
        out = lw.op.add(out, lw.const(node.params["bias"]))
    return out


def _dropout(lw: _Lowering, node: Node, x: list[Any]) -> Any:
    return x[0]  # identity at inference


def _binary(name: str) -> Handler:
    def lower(lw: _Lowering, node: Node, x: list[Any]) -> Any:
        if len(x) != 2:
            raise UnsupportedOperationError(f"layer {node.name!r} ({node.op}) needs 2 inputs, has {len(x)}")
        return getattr(lw.op, name)(x[0], x[1])

    return lower


def _multihead_attention(lw: _Lowering, node: Node, x: list[Any]) -> Any:
    a, p, op = node.attrs, node.params, lw.op
    e, h = int(a["embed_dim"]), int(a["num_heads"])
    q_in, k_in, v_in = (x[0], x[0], x[0]) if len(x) == 1 else (x[0], x[1], x[2])
    for value in (q_in, k_in, v_in):
        lw.expect(node, value, 3, -1, e, f"3-D inputs with embed_dim={e} last")
    if not a.get("batch_first", False):  # (L, N, E) -> (N, L, E)
        q_in, k_in, v_in = (op.transpose(v, lw.const([1, 0, 2], np.int64)) for v in (q_in, k_in, v_in))
    w, b = np.asarray(p["in_proj_weight"], np.float32), np.asarray(p["in_proj_bias"], np.float32)
    heads = [_heads(lw, op.add(op.matmul(v, lw.const(w[i * e : (i + 1) * e]), False, True), lw.const(b[i * e : (i + 1) * e])), h, e)
             for i, v in enumerate((q_in, k_in, v_in))]
    scores = op.multiply(op.matmul(heads[0], heads[1], False, True), lw.const(1.0 / math.sqrt(e // h)))
    ctx = op.matmul(op.softmax(scores, -1), heads[2], False, False)  # (N, H, L, D)
    n, length = lw.shape(ctx)[0], lw.shape(ctx)[2]
    merged = op.reshape(op.transpose(ctx, lw.const([0, 2, 1, 3], np.int64)), lw.const([n, length, e], np.int64), False)
    out = op.add(op.matmul(merged, lw.const(p["out_proj_weight"]), False, True), lw.const(p["out_proj_bias"]))
    if not a.get("batch_first", False):
        out = op.transpose(out, lw.const([1, 0, 2], np.int64))
    return out


def _heads(lw: _Lowering, value: Any, heads: int, embed: int) -> Any:
    n, length, _ = lw.shape(_output(value))
    split = lw.op.reshape(value, lw.const([n, length, heads, embed // heads], np.int64), False)
    return lw.op.transpose(split, lw.const([0, 2, 1, 3], np.int64))


def _pair(value: Any) -> list[int]:
    if isinstance(value, (int, np.integer)):
        return [int(value), int(value)]
    return [int(v) for v in value]


def _axis(axis: int, ndim: int) -> int:
    return axis + ndim if axis < 0 else axis


_HANDLERS: Final[Mapping[str, Handler]] = {
    "linear": _linear,
    "conv2d": _conv2d,
    "relu": _activation("relu"),
    "sigmoid": _activation("sigmoid"),
    "tanh": _activation("tanh"),
    "gelu": _gelu,
    "softmax": _softmax,
    "max_pool2d": _max_pool2d,
    "avg_pool2d": _avg_pool2d,
    "adaptive_avg_pool2d": _adaptive_avg_pool2d,
    "flatten": _flatten,
    "batch_norm2d": _batch_norm2d,
    "layer_norm": _layer_norm,
    "dropout": _dropout,
    "multihead_attention": _multihead_attention,
    "add": _binary("add"),
    "mul": _binary("multiply"),
}
LOWERED_OPS: Final = frozenset(_HANDLERS)
