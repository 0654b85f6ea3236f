"""Static shape inference over a Graph: every value's shape from the input shapes.

``nx.compile`` runs it on each new input shape before handing the graph to a backend, so a
wrong input fails with the layer's name and the shape it expected, not deep inside a runtime.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from neurenix_core.errors import ShapeError
from neurenix_core.graph.ir import Graph, Node

__all__ = ["infer_shapes"]

Shape = tuple[int, ...]


def _fail(node: Node, shape: Shape, wanted: str) -> ShapeError:
    return ShapeError(f"layer {node.name!r} ({node.op}) got an input of shape {shape} but expects {wanted}")


def _linear(node: Node, s: list[Shape]) -> Shape:
    x = s[0]
    n = node.attrs["in_features"]
    if not x or x[-1] != n:
        raise _fail(node, x, f"last dimension {n}")
    return x[:-1] + (node.attrs["out_features"],)


def _window(size: int, k: int, st: int, p: int, d: int) -> int:
    return (size + 2 * p - d * (k - 1) - 1) // st + 1


def _spatial(node: Node, x: Shape, dilation: tuple[int, int]) -> Shape:
    k, st, p = node.attrs["kernel_size"], node.attrs["stride"], node.attrs["padding"]
    out = tuple(_window(x[2 + i], k[i], st[i], p[i], dilation[i]) for i in range(2))
    if min(out) < 1:
        raise _fail(node, x, f"a spatial size of at least the kernel extent {tuple(dilation[i] * (k[i] - 1) + 1 for i in range(2))}")
    return out


def _conv(node: Node, s: list[Shape]) -> Shape:
    x = s[0]
    c = node.attrs["in_channels"]
    if len(x) != 4 or x[1] != c:
        raise _fail(node, x, f"NCHW with {c} channels")
    return (x[0], node.attrs["out_channels"]) + _spatial(node, x, tuple(node.attrs["dilation"]))


def _pool(node: Node, s: list[Shape]) -> Shape:
    x = s[0]
    if len(x) != 4:
        raise _fail(node, x, "a 4-D NCHW input")
    return x[:2] + _spatial(node, x, (1, 1))


def _adaptive(node: Node, s: list[Shape]) -> Shape:
    x = s[0]
    if len(x) != 4:
        raise _fail(node, x, "a 4-D NCHW input")
    return x[:2] + tuple(node.attrs["output_size"])


def _flatten(node: Node, s: list[Shape]) -> Shape:
    x = s[0]
    n = len(x)
    if n == 0:
        raise _fail(node, x, "at least one dimension")
    a, b = node.attrs["start_dim"] % n, node.attrs["end_dim"] % n
    return x[:a] + (math.prod(x[a : b + 1]),) + x[b + 1 :]


def _batch_norm(node: Node, s: list[Shape]) -> Shape:
    x = s[0]
    if len(x) != 4 or x[1] != node.attrs["num_features"]:
        raise _fail(node, x, f"NCHW with {node.attrs['num_features']} channels")
    return x


def _layer_norm(node: Node, s: list[Shape]) -> Shape:
    x, dims = s[0], tuple(node.attrs["normalized_shape"])
    if x[len(x) - len(dims):] != dims:
        raise _fail(node, x, f"trailing dimensions {dims}")
    return x


def _attention(node: Node, s: list[Shape]) -> Shape:
    e = node.attrs["embed_dim"]
    for x in s:
        if len(x) != 3 or x[-1] != e:
            raise _fail(node, x, f"3-D (batch, length, {e}) or (length, batch, {e})")
    return s[0]


def _broadcast(node: Node, s: list[Shape]) -> Shape:
    import numpy as np

    try:
        return tuple(np.broadcast_shapes(*s))
    except ValueError:
        raise ShapeError(f"layer {node.name!r} ({node.op}) cannot broadcast shapes {s[0]} and {s[1]}") from None


def _same(node: Node, s: list[Shape]) -> Shape:
    return s[0]


_RULES: dict[str, Callable[[Node, list[Shape]], Shape]] = {
    "linear": _linear, "conv2d": _conv, "max_pool2d": _pool, "avg_pool2d": _pool,
    "adaptive_avg_pool2d": _adaptive, "flatten": _flatten, "batch_norm2d": _batch_norm,
    "layer_norm": _layer_norm, "multihead_attention": _attention, "add": _broadcast, "mul": _broadcast,
    "relu": _same, "gelu": _same, "sigmoid": _same, "tanh": _same, "softmax": _same, "dropout": _same,
}


def infer_shapes(graph: Graph) -> dict[str, Shape]:
    """Shapes of every value; raises ShapeError naming the first layer the shapes do not fit."""
    shapes: dict[str, Any] = {spec.name: tuple(spec.shape) for spec in graph.inputs}
    for node in graph.nodes:
        shapes[node.output] = _RULES[node.op](node, [shapes[i] for i in node.inputs])
    return shapes
