"""Run a Graph eagerly on a device, node by node, through the functional forms (and so through
the device's op table and the fallback policy). Used by ``nx.compile`` for backends that do not
compile whole models, the CPU backend included."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from neurenix_core.device import Device
from neurenix_core.errors import NeurenixError, ShapeError, UnsupportedOperationError
from neurenix_core.graph.ir import Graph, Node
from neurenix_core.nn import functional as F
from neurenix_core.tensor.tensor import Tensor

__all__ = ["EAGER_OPS", "EagerGraph"]

Params = Mapping[str, Tensor]


def _p(params: Params, key: str) -> Tensor | None:
    return params.get(key)


_RUN: dict[str, Callable[[Node, list[Tensor], Params], Tensor]] = {
    "linear": lambda n, x, p: F.linear(x[0], p["weight"], _p(p, "bias")),
    "conv2d": lambda n, x, p: F.conv2d(x[0], p["weight"], _p(p, "bias"), n.attrs["stride"], n.attrs["padding"], n.attrs["dilation"], n.attrs["groups"]),
    "relu": lambda n, x, p: F.relu(x[0]),
    "gelu": lambda n, x, p: F.gelu(x[0], n.attrs.get("approximate", "none")),
    "sigmoid": lambda n, x, p: F.sigmoid(x[0]),
    "tanh": lambda n, x, p: F.tanh(x[0]),
    "softmax": lambda n, x, p: F.softmax(x[0], n.attrs["axis"]),
    "max_pool2d": lambda n, x, p: F.max_pool2d(x[0], n.attrs["kernel_size"], n.attrs["stride"], n.attrs["padding"]),
    "avg_pool2d": lambda n, x, p: F.avg_pool2d(x[0], n.attrs["kernel_size"], n.attrs["stride"], n.attrs["padding"], n.attrs.get("count_include_pad", True)),
    "adaptive_avg_pool2d": lambda n, x, p: F.adaptive_avg_pool2d(x[0], n.attrs["output_size"]),
    "flatten": lambda n, x, p: F.flatten(x[0], n.attrs["start_dim"], n.attrs["end_dim"]),
    "batch_norm2d": lambda n, x, p: F.batch_norm(x[0], p["running_mean"], p["running_var"], _p(p, "weight"), _p(p, "bias"), n.attrs["eps"]),
    "layer_norm": lambda n, x, p: F.layer_norm(x[0], n.attrs["normalized_shape"], _p(p, "weight"), _p(p, "bias"), n.attrs["eps"]),
    "dropout": lambda n, x, p: x[0],
    "multihead_attention": lambda n, x, p: F.multi_head_attention(
        x[0], x[1], x[2], n.attrs["num_heads"], p["in_proj_weight"], _p(p, "in_proj_bias"), p["out_proj_weight"],
        _p(p, "out_proj_bias"), n.attrs.get("batch_first", False)),
    "add": lambda n, x, p: x[0] + x[1],
    "mul": lambda n, x, p: x[0] * x[1],
}


#: The ops a device without a compile hook runs through its op table; others go to the CPU.
EAGER_OPS = frozenset(_RUN)


class EagerGraph:
    """A graph whose weights were placed on ``device`` once; call it with Tensors on that device."""

    def __init__(self, graph: Graph, device: Device) -> None:
        from neurenix_core.tensor.creation import asarray

        missing = [f"{n.name!r} ({n.op})" for n in graph.nodes if n.op not in _RUN]
        if missing:
            # Callers place such nodes on the CPU (graph.placement); reaching here is a refusal, not a crash.
            raise UnsupportedOperationError(
                f"{device}: node(s) {', '.join(missing)} have no eager form through the device's op table "
                f"(eager ops: {', '.join(sorted(_RUN))}); compile for 'cpu' or a device whose plugin lowers them"
            )
        self.graph = graph
        self.device = device
        self.params: dict[str, dict[str, Tensor]] = {
            node.name: {k: asarray(v, device=device) for k, v in node.params.items()} for node in graph.nodes
        }

    def __call__(self, *inputs: Tensor) -> tuple[Tensor, ...]:
        values: dict[str, Any] = {spec.name: x for spec, x in zip(self.graph.inputs, inputs)}
        for node in self.graph.nodes:
            args = [values[i] for i in node.inputs]
            try:
                values[node.output] = _RUN[node.op](node, args, self.params[node.name])
            except ShapeError as exc:
                raise ShapeError(f"layer {node.name!r} ({node.op}): {exc}") from exc
            except NeurenixError:
                raise
        return tuple(values[o] for o in self.graph.outputs)
