"""Static shape and dtype inference over a Graph, from the opset's rules.

``nx.compile`` runs it on each new input shape before handing the graph to a backend, so a
wrong input fails with the node's name and the shape it expected, not deep inside a runtime.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import final

from neurenix_core.errors import ShapeError
from neurenix_core.graph import opset
from neurenix_core.graph.ir import Graph, Node

__all__ = ["ValueSpec", "infer_shapes", "infer_values", "node_spec"]

Shape = tuple[int, ...]


@final
@dataclass(frozen=True, slots=True)
class ValueSpec:
    """A value's static shape and dtype name."""

    shape: Shape
    dtype: str


def node_spec(node: Node, inputs: list[ValueSpec]) -> ValueSpec:
    """The output of ``node`` for inputs of these specs; ShapeError names the node on a mismatch."""
    try:
        shape, dtype = opset.infer(node.op, node.attrs, [s.shape for s in inputs], [s.dtype for s in inputs], node.params)
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        shapes = [s.shape for s in inputs]
        raise ShapeError(f"layer {node.name!r} ({node.op}) got input shape(s) {shapes}: {exc}") from None
    return ValueSpec(tuple(int(d) for d in shape), dtype)


def infer_values(graph: Graph) -> dict[str, ValueSpec]:
    """Shape and dtype of every value, graph inputs first."""
    values = {spec.name: ValueSpec(tuple(spec.shape), spec.dtype) for spec in graph.inputs}
    for node in graph.nodes:
        missing = [i for i in node.inputs if i not in values]
        if missing:
            raise ShapeError(f"layer {node.name!r} ({node.op}) reads {missing}, which no earlier node or input defines")
        values[node.output] = node_spec(node, [values[i] for i in node.inputs])
    return values


def infer_shapes(graph: Graph) -> dict[str, Shape]:
    """Shapes of every value; raises ShapeError naming the first node the shapes do not fit."""
    return {name: spec.shape for name, spec in infer_values(graph).items()}
