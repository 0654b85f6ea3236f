"""Attention over a key/value cache without joining the cache to the new keys (a rewrite of static graphs).

A decoder step attends over its past keys and values with the step's new ones appended:
transformers' cache update is ``cat([past, new], dim=-2)``, and the attention reads the joined
tensor. Joining writes a copy of the whole cache per layer and per step: at 1,280 cached positions
a 30-layer model with three key/value heads of 64 copies 59 MB per decode step into freshly
allocated memory, a quarter of a 135M-parameter model's decode step on one CPU thread (measured
with PyTorch's profiler on cpu:0), for nothing but the attention that reads it once.

Where the queries are few (a decode step: ``L`` at most ``MAX_QUERIES``), the same attention is
computed from the two parts as they are::

    scores = concat([q @ past_k^T, q @ new_k^T], -1) * scale + mask      # (..., L, S + n): small
    p = softmax(scores)
    out = p[..., :S] @ past_v + p[..., S:] @ new_v

which is the attention's own definition with its key and value products split at ``S``: one
softmax over every position, the cache read once by each product and never copied. A slice of the
joined tensor that takes exactly the new part (the step's present keys returned for the cache) reads
the new part directly, so the join is left unread and dropped. Longer query runs (a prefill) keep
the fused attention, whose blocked kernel is worth more than the copy there; so does an
``is_causal`` attention (its diagonal is counted on the joined length).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from neurenix_core.graph.ir.core import fresh_name
from neurenix_core.graph.ir.grouped_attention import without_unread

if TYPE_CHECKING:
    from neurenix_core.graph.ir import Graph, Node
    from neurenix_core.graph.ir.shapes import Shape

__all__ = ["MAX_QUERIES", "split_cached_attention"]

#: The query rows (after grouped-query stacking) up to which the split form runs: a decode step's
#: queries times the heads stacked on them; past this the scores matrix grows and the fused kernel wins.
MAX_QUERIES = 64

_SDPA = "scaled_dot_product_attention"
#: A slice end past any axis (torch.export's own "to the end").
_TO_END = 2**62
#: Nodes between the join and the attention that move no element: unit axes added or removed, or
#: a slice that keeps everything (what torch.export leaves of ``repeat_kv`` after grouping).
_VIEWS = ("reshape", "unsqueeze", "squeeze", "slice")


@dataclass(frozen=True, slots=True)
class _Join:
    """A ``concat(past, new)`` along the sequence axis of ``(B, H, S, D)`` keys or values."""

    node: Node
    past: str
    new: str
    past_length: int


def split_cached_attention(graph: Graph) -> Graph:
    """``graph`` (static input shapes) with each few-query attention over ``concat(past, new)``
    keys and values computed from the two parts; unchanged when there is none."""
    from neurenix_core.graph.ir.shapes import infer_values

    if not any(n.op == _SDPA for n in graph.nodes):
        return graph
    specs = infer_values(graph)
    shapes = {name: spec.shape for name, spec in specs.items()}
    dtypes = {name: spec.dtype for name, spec in specs.items()}
    producers = {n.output: n for n in graph.nodes}
    taken = {n.name for n in graph.nodes} | {n.output for n in graph.nodes} | {s.name for s in graph.inputs}
    joins: dict[str, _Join] = {}
    nodes: list[Node] = []
    for n in graph.nodes:
        rewritten = _rewrite(n, shapes, dtypes, producers, taken, joins) if n.op == _SDPA else None
        nodes.extend(rewritten or (n,))
    if not joins:
        return graph
    nodes = [_new_part_read(n, shapes, joins) for n in nodes]
    return without_unread(replace(graph, nodes=tuple(nodes)))


def _unit_free(shape: Shape) -> tuple[int, ...]:
    return tuple(d for d in shape if d != 1)


def _keeps_all(node: Node, before: Shape, shapes: dict[str, Shape]) -> bool:
    """Whether a slice takes every element in order (same shape, steps of 1: a step of -1 keeps
    the shape but reverses the axis)."""
    steps = tuple(node.attrs.get("steps") or ())
    return before == shapes[node.output] and all(int(step) == 1 for step in steps)


def _join_behind(value: str, shapes: dict[str, Shape], producers: dict[str, Node]) -> _Join | None:
    """The sequence-axis join ``value`` is, seen through nodes that move no element, else None."""
    target = shapes[value]
    node = producers.get(value)
    while node is not None and node.op in _VIEWS:
        before = shapes[node.inputs[0]]
        if _unit_free(before) != _unit_free(shapes[node.output]) or (node.op == "slice" and not _keeps_all(node, before, shapes)):
            return None
        node = producers.get(node.inputs[0])
    if node is None or node.op != "concat" or len(node.inputs) != 2 or shapes[node.output] != target or len(target) != 4:
        return None
    if int(node.attrs.get("axis", 0)) % 4 != 2:
        return None
    past = shapes[node.inputs[0]][2]
    return _Join(node, node.inputs[0], node.inputs[1], past) if past > 0 else None


def _rewrite(n: Node, shapes: dict[str, Shape], dtypes: dict[str, str], producers: dict[str, Node], taken: set[str],
             joins: dict[str, _Join]) -> list[Node] | None:
    from neurenix_core.graph.ir import Node

    q = shapes[n.inputs[0]]
    keys, values = (_join_behind(v, shapes, producers) for v in n.inputs[1:3])
    if (keys is None or values is None or keys.past_length != values.past_length or len(q) != 4 or q[-2] > MAX_QUERIES
            or n.attrs.get("is_causal") or dtypes[n.inputs[0]] != "float32"):
        return None
    scale = n.attrs.get("scale")
    scale = 1.0 / float(np.sqrt(q[-1])) if scale is None else float(scale)

    def new(suffix: str, op: str, inputs: tuple[str, ...], attrs: dict[str, object] | None = None,
            params: dict[str, np.ndarray] | None = None) -> Node:
        name = fresh_name(f"{n.name}/{suffix}", taken)
        return Node(name, op, inputs, name, attrs or {}, params or {})

    factor = new("scale", "constant", (), params={"value": np.asarray(scale, np.float32)})
    out: list[Node] = [factor]
    parts: list[str] = []
    for part, k in (("past", keys.past), ("new", keys.new)):
        k_t = new(f"{part}_keys_t", "transpose", (k,), {"perm": (0, 1, 3, 2)})
        product = new(f"{part}_scores", "matmul", (n.inputs[0], k_t.output))
        scaled = new(f"{part}_scaled", "mul", (product.output, factor.output))
        out += [k_t, product, scaled]
        parts.append(scaled.output)
    scores = new("scores", "concat", tuple(parts), {"axis": -1})
    out.append(scores)
    logits = scores.output
    if len(n.inputs) > 3:
        masked = _masked(new, logits, n.inputs[3], dtypes[n.inputs[3]] == "bool")
        out += masked
        logits = masked[-1].output
    weights = new("weights", "softmax", (logits,), {"axis": -1})
    # Split counted from the end (the new part is the last n positions): no bound holds the past
    # length, so the rewritten graph of every cache length differs only in its input shapes, and a
    # runtime can serve them all with one compiled model (the npu plugin's OpenVINO host runtime).
    fresh = shapes[keys.new][2]
    halves = [new(f"{part}_weights", "slice", (weights.output,), {"starts": (lo,), "ends": (hi,), "axes": (3,), "steps": (1,)})
              for part, lo, hi in (("past", 0, -fresh), ("new", -fresh, _TO_END))]
    products = [new(f"{part}_out", "matmul", (h.output, v)) for part, h, v in zip(("past", "new"), halves, (values.past, values.new), strict=True)]
    result = Node(n.name, "add", (products[0].output, products[1].output), n.output)
    joins.update({keys.node.output: keys, values.node.output: values})
    return [*out, weights, *halves, *products, result]


def _masked(new: Callable[..., Node], scores: str, mask: str, keeps: bool) -> list[Node]:
    """``scores`` with the attention's mask applied as the attention defines it: a float mask is
    added, a bool one (``keeps``) keeps the scores where True and -inf elsewhere."""
    if not keeps:
        return [new("masked", "add", (scores, mask))]
    hidden = new("hidden", "constant", (), params={"value": np.asarray(-np.inf, np.float32)})
    return [hidden, new("masked", "where", (mask, scores, hidden.output))]


def _new_part_read(n: Node, shapes: dict[str, Shape], joins: dict[str, _Join]) -> Node:
    """A slice of a split join that takes exactly its new part reads that part instead (a slice
    that keeps everything), so the join itself is left unread."""
    join = joins.get(n.inputs[0]) if n.op == "slice" and n.inputs else None
    if join is None:
        return n
    axes = tuple(int(a) % 4 for a in n.attrs.get("axes", ()))
    starts, ends, steps = (tuple(n.attrs.get(k, ())) for k in ("starts", "ends", "steps"))
    total = join.past_length + shapes[join.new][2]
    if axes != (2,) or starts != (join.past_length,) or int(ends[0]) < total or tuple(steps or (1,)) != (1,):
        return n
    return replace(n, inputs=(join.new,), attrs={**n.attrs, "starts": (0,)})
