"""Grouped-query attention without the repeated keys and values (a rewrite of static graphs).

A model with fewer key/value heads than query heads (Llama, Qwen2, Mistral ...) repeats each key
and value head for its group of query heads before the attention (transformers' ``repeat_kv``:
``expand`` to ``(B, Hkv, rep, S, D)`` then ``reshape`` to ``(B, H, S, D)``). That is a copy of the
whole key/value cache per layer and per step, ``rep`` times its size: at 1,280 cached positions a
135M-parameter model writes 177 MB per decode step for nothing but this.

Query head ``h`` reads key/value head ``h // rep``, so the same attention is computed by stacking
each group's queries along the query axis: ``q (B, H, L, D)`` reshaped to ``(B, Hkv, rep * L, D)``
attends over the unrepeated ``(B, Hkv, S, D)`` keys and values, and the result reshaped back to
``(B, H, L, D)`` is the original output, value for value (each row is the same softmax of the same
dot products). The mask follows the queries: a mask of one query row (the decode step's) or one
head broadcasts unchanged or is repeated ``rep`` times along the query axis (a ``(B, 1, L, S)``
mask, ``rep`` times smaller than the keys it saves). An ``is_causal`` attention is left as it is:
its diagonal is counted from the first query, and stacking would move it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from neurenix_core.graph.ir.core import fresh_name

if TYPE_CHECKING:
    from neurenix_core.graph.ir import Graph, Node
    from neurenix_core.graph.ir.shapes import Shape

__all__ = ["fold_repeated_kv", "without_unread"]

_SDPA = "scaled_dot_product_attention"


def fold_repeated_kv(graph: Graph) -> Graph:
    """``graph`` (static input shapes) with every repeated-key/value attention computed on the
    unrepeated heads; the repeats no other node reads are dropped. Unchanged when there is none."""
    from neurenix_core.graph.ir.shapes import infer_shapes

    if not any(n.op == _SDPA for n in graph.nodes):
        return graph
    shapes = infer_shapes(graph)
    producers = {n.output: n for n in graph.nodes}
    taken = {n.name for n in graph.nodes} | {n.output for n in graph.nodes} | {s.name for s in graph.inputs}
    nodes: list[Node] = []
    changed = False
    for n in graph.nodes:
        rewritten = _rewrite(n, shapes, producers, taken) if n.op == _SDPA else None
        nodes.extend(rewritten or (n,))
        changed = changed or rewritten is not None
    return without_unread(replace(graph, nodes=tuple(nodes))) if changed else graph


def _repeat_source(value: str, shapes: dict[str, Shape], producers: dict[str, Node]) -> tuple[str, int, int] | None:
    """``(source, Hkv, rep)`` when ``value`` is ``reshape(expand(source))`` repeating each of the
    ``Hkv`` heads of ``source (B, Hkv, 1, S, D)`` ``rep`` times, else None."""
    flat = producers.get(value)
    if flat is None or flat.op != "reshape":
        return None
    rep_node = producers.get(flat.inputs[0])
    if rep_node is None or rep_node.op != "expand":
        return None
    src, expanded, out = shapes[rep_node.inputs[0]], shapes[rep_node.output], shapes[value]
    if len(src) != 5 or len(expanded) != 5 or len(out) != 4 or src[2] != 1 or expanded[2] < 2:
        return None
    b, hkv, rep, s, d = expanded
    if src[1] != hkv or src[3:] != (s, d) or src[0] not in (1, b) or out != (b, hkv * rep, s, d):
        return None
    return rep_node.inputs[0], hkv, rep


def _rewrite(n: Node, shapes: dict[str, Shape], producers: dict[str, Node], taken: set[str]) -> list[Node] | None:
    from neurenix_core.graph.ir import Node

    keys, values = (_repeat_source(v, shapes, producers) for v in n.inputs[1:3])
    q = shapes[n.inputs[0]]
    if keys is None or values is None or keys[1:] != values[1:] or len(q) != 4:
        return None
    _, hkv, rep = keys
    b, h, length, d = q
    if h != hkv * rep or n.attrs.get("is_causal"):
        return None
    mask = _grouped_mask(n, shapes, hkv, rep, length, taken) if len(n.inputs) > 3 else ([], None)
    if mask is None:
        return None
    mask_nodes, mask_value = mask

    def new(suffix: str, op: str, inputs: tuple[str, ...], attrs: dict[str, object]) -> Node:
        name = fresh_name(f"{n.name}/{suffix}", taken)
        return Node(name, op, inputs, name, attrs)

    k_src, v_src = (new(f"{kind}_heads", "reshape", (source,), {"shape": (shapes[source][0], hkv, shapes[source][3], shapes[source][4])})
                    for kind, source in (("k", keys[0]), ("v", values[0])))
    q_grouped = new("q_grouped", "reshape", (n.inputs[0],), {"shape": (b, hkv, rep * length, d)})
    inputs = (q_grouped.output, k_src.output, v_src.output) + ((mask_value,) if mask_value is not None else ())
    grouped = new("grouped", _SDPA, inputs, dict(n.attrs))
    out_shape = (b, h, length, shapes[n.output][-1])
    back = Node(n.name, "reshape", (grouped.output,), n.output, {"shape": out_shape})
    return [*mask_nodes, k_src, v_src, q_grouped, grouped, back]


def _grouped_mask(n: Node, shapes: dict[str, Shape], hkv: int, rep: int, length: int, taken: set[str]) -> tuple[list[Node], str] | None:
    """The mask for the stacked queries: as it is where one row serves every query, else repeated
    ``rep`` times along the query axis (one mask head) or regrouped (one mask per head)."""
    from neurenix_core.graph.ir import Node

    mask, shape = n.inputs[3], shapes[n.inputs[3]]
    if len(shape) != 4:
        return None
    bm, hm, lm, s = shape
    if lm == 1 and hm == 1:
        return [], mask
    if lm != length:  # one row for several queries, one mask per head: no grouped form without a copy
        return None
    if hm == hkv * rep:
        name = fresh_name(f"{n.name}/mask_grouped", taken)
        return [Node(name, "reshape", (mask,), name, {"shape": (bm, hkv, rep * lm, s)})], name
    if hm != 1:
        return None
    names = [fresh_name(f"{n.name}/mask_{step}", taken) for step in ("one_group", "repeated", "grouped")]
    return [
        Node(names[0], "unsqueeze", (mask,), names[0], {"axes": (2,)}),
        Node(names[1], "expand", (names[0],), names[1], {"shape": (bm, 1, rep, lm, s)}),
        Node(names[2], "reshape", (names[1],), names[2], {"shape": (bm, 1, rep * lm, s)}),
    ], names[2]


def without_unread(graph: Graph) -> Graph:
    """``graph`` without the nodes whose output nothing reads (the repeats made dead)."""
    read = set(graph.outputs)
    kept: list[Node] = []
    for n in reversed(graph.nodes):
        if n.output in read:
            kept.append(n)
            read.update(n.inputs)
    return replace(graph, nodes=tuple(reversed(kept)))
