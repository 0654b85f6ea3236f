"""What a dynamic graph becomes at one input shape, beyond its resolved SymDims.

An import with dynamic axes cannot fold what depends on a size (the slice of the position ids up
to the sequence length, the index grids of an attention mask): those stay nodes. Once
``Graph.with_input_shapes`` has resolved the sizes they are constants again, and this pass folds
them, so a backend receives the same graph a static import would give it (the ops it declared,
no index arithmetic that could push nodes off the device):

- a node whose inputs are all constants is evaluated (opset reference semantics) and becomes a
  ``constant`` node when it is exact: integer/bool arithmetic, or data movement (shape and
  indexing ops) of any dtype; float arithmetic is left to the backend;
- ``gather_nd`` with constant indices becomes ``reshape`` + ``gather`` on flat indices (what
  the static importer emits for constant advanced indexing);
- constants no node reads any more are dropped.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from neurenix_core.errors import ShapeError
from neurenix_core.graph import opset

if TYPE_CHECKING:
    from neurenix_core.graph.ir import Graph, Node

__all__ = ["fold_size_constants"]


def _foldable(op: str, arrays: list[np.ndarray]) -> bool:
    """Integer/bool computations (sizes, indices, masks), and data movement of any constant
    (an expand of the class token to the batch): exact, so folding changes no number."""
    return all(a.dtype.kind in "iub" for a in arrays) or opset.OPSET[op].category in ("shape", "indexing")


def fold_size_constants(graph: Graph) -> Graph:
    from neurenix_core.graph.ir import Node
    from neurenix_core.graph.ir.shapes import infer_shapes

    consts: dict[str, np.ndarray] = {}
    nodes: list[Node] = []
    shapes = None
    for n in graph.nodes:
        if n.op == "constant":
            consts[n.output] = np.asarray(n.params["value"])
            nodes.append(n)
            continue
        ins = [consts.get(i) for i in n.inputs]
        if n.inputs and all(a is not None for a in ins) and _foldable(n.op, ins) and not n.params:  # type: ignore[arg-type]
            try:
                value = np.asarray(opset.evaluate(n.op, n.attrs, ins, {}))  # type: ignore[arg-type]
            except (ValueError, IndexError) as exc:  # the input shapes do not fit the model
                raise ShapeError(f"layer {n.name!r} ({n.op}) got input shape(s) {[a.shape for a in ins]}: {exc}") from None  # type: ignore[union-attr]
            consts[n.output] = value
            nodes.append(Node(n.name, "constant", (), n.output, {}, {"value": value}))
            continue
        if n.op == "gather_nd" and n.inputs[1] in consts and int(n.attrs.get("batch_dims", 0)) == 0:
            if shapes is None:
                shapes = infer_shapes(graph)
            taken = {m.name for m in graph.nodes} | {m.output for m in graph.nodes}
            nodes.extend(_flat_gather(n, consts[n.inputs[1]], shapes[n.inputs[0]], taken))
            continue
        nodes.append(n)
    used = {i for n in nodes for i in n.inputs} | set(graph.outputs)
    kept = tuple(n for n in nodes if n.op != "constant" or n.output in used)
    return replace(graph, nodes=kept)


def _flat_gather(n: Node, indices: np.ndarray, data_shape: tuple[int, ...], taken: set[str]) -> list[Node]:
    from neurenix_core.graph.ir import Node, fresh_name

    k = indices.shape[-1]
    dims = np.asarray(data_shape[:k], np.int64)
    idx = np.where(indices < 0, indices + dims, indices).astype(np.int64)
    flat = np.ravel_multi_index(tuple(np.moveaxis(idx, -1, 0)), tuple(int(d) for d in dims)).astype(np.int64)
    out: list[Node] = []
    source = n.inputs[0]
    if k != 1:
        merged = fresh_name(f"{n.name}.flat", taken)
        out.append(Node(merged, "reshape", (source,), merged, {"shape": (-1,) + tuple(data_shape[k:])}))
        source = merged
    where = fresh_name(f"{n.name}.flat_indices", taken)
    out.append(Node(where, "constant", (), where, {}, {"value": flat}))
    out.append(Node(n.name, "gather", (source, where), n.output, {"axis": 0}))
    return out
