"""Apply the opset's decompositions: composite nodes a backend does not declare become primitives.

``legalize(graph, keep)`` replaces every composite node for which ``keep(node)`` is false by its
decomposition, recursively (a decomposition may emit other composites: multihead_attention emits
linear). The replacement's last node writes the composite's output value, so consumers and graph
outputs are untouched; new nodes are named ``"<composite name>/<op>_<k>"``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from neurenix_core.graph import opset
from neurenix_core.graph.ir import Graph, Node

__all__ = ["decompose_node", "legalize", "makes_new_values"]


class _NodeBuilder:
    """The :class:`opset.Builder` a decomposition writes into."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.nodes: list[Node] = []

    def op(self, op: str, inputs: Sequence[str], attrs: Mapping[str, Any] | None = None,
           params: Mapping[str, np.ndarray] | None = None) -> str:
        name = f"{self.prefix}/{op}_{len(self.nodes)}"
        self.nodes.append(Node(name, op, tuple(inputs), name, dict(attrs or {}), dict(params or {})))
        return name

    def const(self, value: np.ndarray) -> str:
        arr = np.asarray(value)
        # Graph weights are float32 (nn and both importers store them so); a float64 parameter
        # must not turn a float32 model's values into float64 after decomposition.
        return self.op("constant", (), {}, {"value": arr.astype(np.float32) if arr.dtype.kind == "f" else arr})


def _rename(nodes: list[Node], old: str, new: str) -> list[Node]:
    out = []
    for n in nodes:
        inputs = tuple(new if i == old else i for i in n.inputs)
        output = new if n.output == old else n.output
        out.append(Node(n.name, n.op, inputs, output, n.attrs, n.params))
    return out


def decompose_node(node: Node) -> list[Node]:
    """The primitives (one level) that compute ``node``; its output value keeps its name."""
    d = opset.OPSET[node.op]
    if d.decompose is None:
        raise ValueError(f"op {node.op!r} is a primitive; it has no decomposition")
    b = _NodeBuilder(node.name)
    params = {k: v for k, v in node.params.items() if v is not None}
    out = d.decompose(b, list(node.inputs), opset.attrs_of(node.op, node.attrs), params)
    if out in node.inputs or not b.nodes:
        b.op("identity", (out,))
        out = b.nodes[-1].output
    return _rename(b.nodes, out, node.output)


def legalize(graph: Graph, keep: Callable[[Node], bool]) -> Graph:
    """``graph`` with every composite node that ``keep`` refuses decomposed into primitives."""
    pending = list(graph.nodes)
    out: list[Node] = []
    changed = False
    while pending:
        node = pending.pop(0)
        if opset.OPSET[node.op].composite and not keep(node):
            pending[:0] = decompose_node(node)
            changed = True
        else:
            out.append(node)
    return graph if not changed else Graph(graph.inputs, tuple(out), graph.outputs)


def makes_new_values(node: Node) -> bool:
    """Whether decomposing ``node`` creates values it did not have: more than one node (a constant
    or an intermediate). One that becomes a single primitive writing the same output
    (``global_avg_pool`` -> ``reduce_mean``) can be decomposed in a quantized graph: the plan's
    parameters, named by value, still cover every value."""
    return len(decompose_node(node)) > 1
