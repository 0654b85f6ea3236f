"""Core ``Graph`` -> ``torch.nn.Module`` (the ``neurenix_compile`` hook of the cuda backend).

Each node becomes a real PyTorch layer (``nn.Linear``, ``nn.Conv2d``, ``nn.MultiheadAttention``
...) holding the graph's weights, so every PyTorch tool applies to the result: dtype conversion,
``channels_last``, ``torch.compile``, the Tensor Core validator and the padding pass. A
QuantizationPlan is lowered as fake quantization (weights rounded per channel once, activations
per tensor at run time) with the plan's own parameters: the backend never recomputes them.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Any

import numpy as np

from neurenix_core.errors import CompilationError, ShapeError, UnsupportedOperationError


if TYPE_CHECKING:
    import torch

    from neurenix_core.graph.ir import Graph, Node, QuantizationPlan, QuantParams

__all__ = ["lower_graph", "graph_module_classes", "module_key"]

_ACTIVATIONS = {"relu": "ReLU", "sigmoid": "Sigmoid", "tanh": "Tanh"}


def module_key(node_name: str) -> str:
    """A ModuleDict key for a node name (``features.3`` -> ``features_3``)."""
    return re.sub(r"\W", "_", node_name) or "node"


def _t(array: np.ndarray) -> torch.Tensor:
    import torch

    return torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32)).clone()


def _param(node: Node, key: str, shape: tuple[int, ...]) -> np.ndarray:
    value = node.params.get(key)
    if value is None:
        raise CompilationError(f"cuda-tc: node {node.name!r} ({node.op}) has no parameter {key!r}; the graph is incomplete")
    if tuple(value.shape) != shape:
        raise CompilationError(f"cuda-tc: node {node.name!r} ({node.op}) parameter {key!r} has shape {tuple(value.shape)}, expected {shape}")
    return value


def _linear(node: Node) -> torch.nn.Module:
    import torch

    a = node.attrs
    m = torch.nn.Linear(int(a["in_features"]), int(a["out_features"]), bias="bias" in node.params)
    with torch.no_grad():
        m.weight.copy_(_t(_param(node, "weight", (m.out_features, m.in_features))))
        if m.bias is not None:
            m.bias.copy_(_t(_param(node, "bias", (m.out_features,))))
    return m


def _conv2d(node: Node) -> torch.nn.Module:
    import torch

    a = node.attrs
    groups = int(a.get("groups", 1))
    m = torch.nn.Conv2d(
        int(a["in_channels"]), int(a["out_channels"]), tuple(a["kernel_size"]), stride=tuple(a.get("stride", (1, 1))),
        padding=tuple(a.get("padding", (0, 0))), dilation=tuple(a.get("dilation", (1, 1))), groups=groups, bias="bias" in node.params,
    )
    with torch.no_grad():
        m.weight.copy_(_t(_param(node, "weight", tuple(m.weight.shape))))
        if m.bias is not None:
            m.bias.copy_(_t(_param(node, "bias", (m.out_channels,))))
    return m


def _batch_norm(node: Node) -> torch.nn.Module:
    import torch

    n = int(node.attrs["num_features"])
    m = torch.nn.BatchNorm2d(n, eps=float(node.attrs.get("eps", 1e-5)))
    with torch.no_grad():
        for key in ("weight", "bias", "running_mean", "running_var"):
            getattr(m, key).copy_(_t(_param(node, key, (n,))))
    return m.eval()


def _layer_norm(node: Node) -> torch.nn.Module:
    import torch

    shape = tuple(int(d) for d in node.attrs["normalized_shape"])
    affine = "weight" in node.params
    m = torch.nn.LayerNorm(shape, eps=float(node.attrs.get("eps", 1e-5)), elementwise_affine=affine, bias="bias" in node.params)
    with torch.no_grad():
        if affine:
            m.weight.copy_(_t(_param(node, "weight", shape)))
        if m.bias is not None:
            m.bias.copy_(_t(_param(node, "bias", shape)))
    return m


def _attention(node: Node) -> torch.nn.Module:
    import torch

    e, h = int(node.attrs["embed_dim"]), int(node.attrs["num_heads"])
    if e % h:
        raise CompilationError(f"cuda-tc: node {node.name!r}: embed_dim {e} is not divisible by num_heads {h}")
    m = torch.nn.MultiheadAttention(e, h, batch_first=bool(node.attrs.get("batch_first", True)))
    with torch.no_grad():
        m.in_proj_weight.copy_(_t(_param(node, "in_proj_weight", (3 * e, e))))
        m.in_proj_bias.copy_(_t(_param(node, "in_proj_bias", (3 * e,))))
        m.out_proj.weight.copy_(_t(_param(node, "out_proj_weight", (e, e))))
        m.out_proj.bias.copy_(_t(_param(node, "out_proj_bias", (e,))))
    return m.eval()


def _simple(node: Node) -> torch.nn.Module:
    import torch

    a = node.attrs
    if node.op in _ACTIVATIONS:
        return getattr(torch.nn, _ACTIVATIONS[node.op])()
    if node.op == "gelu":
        return torch.nn.GELU(approximate=str(a.get("approximate", "none")))
    if node.op == "softmax":
        return torch.nn.Softmax(dim=int(a.get("axis", -1)))
    if node.op == "max_pool2d":
        return torch.nn.MaxPool2d(tuple(a["kernel_size"]), tuple(a.get("stride") or a["kernel_size"]), tuple(a.get("padding", (0, 0))))
    if node.op == "avg_pool2d":
        return torch.nn.AvgPool2d(tuple(a["kernel_size"]), tuple(a.get("stride") or a["kernel_size"]), tuple(a.get("padding", (0, 0))),
                                  count_include_pad=bool(a.get("count_include_pad", True)))
    if node.op == "adaptive_avg_pool2d":
        return torch.nn.AdaptiveAvgPool2d(tuple(a["output_size"]))
    if node.op == "flatten":
        return torch.nn.Flatten(int(a.get("start_dim", 1)), int(a.get("end_dim", -1)))
    if node.op == "dropout":
        return torch.nn.Identity()  # inference: dropout is the identity
    raise UnsupportedOperationError(f"cuda-tc cannot lower node {node.name!r}: op {node.op!r} has no PyTorch lowering")


_BUILDERS = {"linear": _linear, "conv2d": _conv2d, "batch_norm2d": _batch_norm, "layer_norm": _layer_norm,
             "multihead_attention": _attention}


def build_layer(node: Node) -> torch.nn.Module | None:
    """The PyTorch layer for one node (None for add/mul, which are functions)."""
    if node.op in ("add", "mul"):
        return None
    try:
        return _BUILDERS.get(node.op, _simple)(node)
    except KeyError as exc:
        raise CompilationError(f"cuda-tc: node {node.name!r} ({node.op}) lacks attribute {exc.args[0]!r}") from exc


def _fake_quant(x: torch.Tensor, q: QuantParams) -> torch.Tensor:
    """Per-tensor fake quantization with the core's rounding (half away from zero, as TFLite)."""
    import torch

    scale = float(np.asarray(q.scale, np.float32).reshape(-1)[0])
    zp = float(np.asarray(q.zero_point).reshape(-1)[0])
    v = x / scale
    rounded = torch.sign(v) * torch.floor(torch.abs(v) + 0.5)
    return (torch.clamp(rounded + zp, q.qmin, q.qmax) - zp) * scale


def _with_quantized_weights(node: Node, plan: QuantizationPlan | None) -> Node:
    from dataclasses import replace

    from neurenix_core.graph import quantization as Q  # noqa: N812

    if plan is None or node.name not in plan.weights or "weight" not in node.params:
        return node
    params = dict(node.params)
    # The core's own math: the plan's parameters are applied, never recomputed.
    params["weight"] = Q.fake_quantize(np.asarray(params["weight"]), plan.weights[node.name]).astype(np.float32)
    return replace(node, params=params)


@functools.cache
def graph_module_classes() -> tuple[type, type]:
    """The ``torch.nn.Module`` subclasses of lowered graphs (any inputs; one input) (defined on first use: torch loads lazily)."""
    import torch

    class _GraphModule(torch.nn.Module):
        """Runs a core Graph's nodes in order; layers live in ``self.layers`` (keys from node names)."""

        def __init__(self, graph: Graph, plan: QuantizationPlan | None = None) -> None:
            super().__init__()
            self.layers = torch.nn.ModuleDict()
            self.node_names: dict[str, str] = {}
            self._steps: list[tuple[str, str, tuple[str, ...], str]] = []
            for node in graph.nodes:
                node = _with_quantized_weights(node, plan)
                layer = build_layer(node)
                key = module_key(node.name)
                if layer is not None:
                    if key in self.layers:
                        raise CompilationError(f"cuda-tc: two nodes map to the layer name {key!r}; rename node {node.name!r}")
                    self.layers[key] = layer
                    self.node_names[key] = node.name
                self._steps.append((node.op, key, tuple(node.inputs), node.output))
            self._inputs = tuple(s.name for s in graph.inputs)
            self._outputs = tuple(graph.outputs)
            self._act = dict(plan.activations) if plan is not None and not plan.dynamic else {}

        def _q(self, name: str, x: torch.Tensor) -> torch.Tensor:
            q = self._act.get(name)
            return x if q is None else _fake_quant(x, q)

        def forward(self, *inputs: torch.Tensor) -> Any:
            if len(inputs) != len(self._inputs):
                raise ShapeError(f"cuda-tc model takes {len(self._inputs)} input(s) ({', '.join(self._inputs)}), got {len(inputs)}")
            return self._forward(inputs)

        def _forward(self, inputs: tuple[torch.Tensor, ...]) -> Any:
            values = {n: self._q(n, x) for n, x in zip(self._inputs, inputs)}
            for op, key, ins, out in self._steps:
                args = [values[i] for i in ins]
                if op == "add":
                    y = args[0] + args[1]
                elif op == "mul":
                    y = args[0] * args[1]
                elif op == "multihead_attention":
                    q, k, v = (args * 3)[:3] if len(args) == 1 else args
                    y = self.layers[key](q, k, v, need_weights=False)[0]
                else:
                    y = self.layers[key](*args)
                values[out] = self._q(out, y)
            outs = tuple(values[o] for o in self._outputs)
            return outs[0] if len(outs) == 1 else outs

    class _SingleInputGraphModule(_GraphModule):
        """One named input, so torch.fx (align_model) can trace the forward."""

        def forward(self, x: torch.Tensor) -> Any:  # type: ignore[override]
            return self._forward((x,))

    return _GraphModule, _SingleInputGraphModule


def lower_graph(graph: Graph, plan: QuantizationPlan | None = None) -> torch.nn.Module:
    """A ``torch.nn.Module`` (float32, eval mode, on the CPU) computing ``graph``."""
    generic, single = graph_module_classes()
    return (single if len(graph.inputs) == 1 else generic)(graph, plan).eval()
