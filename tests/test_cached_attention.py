"""split_cached_attention: a few-query attention over ``concat(past, new)`` keys and values computed
from the two parts (the rewrite every per-shape compilation applies), checked value for value
against the graph as imported on the reference interpreter, and on a language model's step graph."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from neurenix_core.graph.ir import Graph, Node, TensorSpec
from neurenix_core.graph.ir.cached_attention import MAX_QUERIES, split_cached_attention
from neurenix_core.graph.reference.run import run_graph

B, H, D = 2, 3, 8
_BIG = 2**62  # "to the end", as torch.export writes an open slice


def _graph(length: int, past: int, new: int, mask: str | None = "float", *, causal: bool = False, views: bool = True) -> Graph:
    """q (B, H, L, D) attending over cat([past, new], -2) keys and values, through the unit-axis
    views torch.export leaves of transformers' repeat_kv; outputs the attention and the new keys
    sliced back out of the join (what the step returns for the cache)."""
    total = past + new
    inputs = [TensorSpec("q", (B, H, length, D))]
    nodes: list[Node] = []
    for kv in ("k", "v"):
        inputs += [TensorSpec(f"{kv}_past", (B, H, past, D)), TensorSpec(f"{kv}_new", (B, H, new, D))]
        nodes.append(Node(f"{kv}_cat", "concat", (f"{kv}_past", f"{kv}_new"), f"{kv}_cat", {"axis": -2}))
        if views:
            nodes += [Node(f"{kv}_one", "unsqueeze", (f"{kv}_cat",), f"{kv}_one", {"axes": (2,)}),
                      Node(f"{kv}_all", "slice", (f"{kv}_one",), f"{kv}_all", {"starts": (0,), "ends": (_BIG,), "axes": (3,), "steps": (1,)}),
                      Node(f"{kv}_heads", "reshape", (f"{kv}_all",), f"{kv}_heads", {"shape": (B, H, total, D)})]
    ins: tuple[str, ...] = ("q", "k_heads", "v_heads") if views else ("q", "k_cat", "v_cat")
    if mask is not None:
        inputs.append(TensorSpec("mask", (B, 1, length, total), "bool" if mask == "bool" else "float32"))
        ins += ("mask",)
    nodes.append(Node("attn", "scaled_dot_product_attention", ins, "y", {"scale": None, "is_causal": causal}))
    nodes.append(Node("k_present", "slice", ("k_cat",), "k_present", {"starts": (past,), "ends": (_BIG,), "axes": (2,), "steps": (1,)}))
    return Graph(tuple(inputs), tuple(nodes), ("y", "k_present"))


def _inputs(graph: Graph, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays: list[np.ndarray] = []
    for spec in graph.inputs:
        if spec.name != "mask":
            arrays.append(rng.standard_normal(spec.shape).astype(np.float32))
            continue
        keep = rng.random(spec.shape) < 0.7
        keep[..., -1] = True  # every query sees its own new slot, as the cache's mask guarantees
        arrays.append(keep if spec.dtype == "bool" else np.where(keep, np.float32(0), np.float32(np.finfo(np.float32).min)))
    return arrays


def _same(a: Graph, b: Graph) -> None:
    xs = _inputs(a)
    for got, want in zip(run_graph(b, *xs), run_graph(a, *xs), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("length", "past", "new", "mask"), [
    (1, 9, 1, "float"),   # a decode step
    (3, 7, 1, "float"),   # grouped-query stacking: rep queries per step
    (1, 9, 1, "bool"),
    (1, 9, 1, None),
    (4, 6, 4, "float"),   # a chunk of new tokens
], ids=["decode", "stacked-queries", "bool-mask", "no-mask", "chunk"])
def test_the_split_computes_the_same_attention_without_joining_the_cache(length: int, past: int, new: int, mask: str | None) -> None:
    graph = _graph(length, past, new, mask)
    split = split_cached_attention(graph)
    ops = {n.op for n in split.nodes}
    assert "scaled_dot_product_attention" not in ops
    assert not any(n.op == "concat" and "k_past" in n.inputs for n in split.nodes), "the key join is still computed"
    present = next(n for n in split.nodes if n.output == "k_present")
    assert present.inputs == ("k_new",)
    _same(graph, split)


def test_a_join_without_views_is_split_too() -> None:
    graph = _graph(1, 5, 1, views=False)
    split = split_cached_attention(graph)
    assert "scaled_dot_product_attention" not in {n.op for n in split.nodes}
    _same(graph, split)


@pytest.mark.parametrize(("sizes", "causal"), [
    ((1, 5, 1), True),               # is_causal counts the diagonal on the joined length
    ((MAX_QUERIES + 1, 5, 1), False),  # a prefill: the fused kernel
    ((1, 0, 1), False),              # no past: the join copies nothing
], ids=["causal", "many-queries", "empty-past"])
def test_what_the_split_leaves_as_imported(sizes: tuple[int, int, int], causal: bool) -> None:
    graph = _graph(*sizes, causal=causal)
    assert split_cached_attention(graph) is graph


def test_a_join_read_elsewhere_is_kept_and_the_values_stay() -> None:
    graph = _graph(1, 6, 1)
    extra = Node("also", "relu", ("v_cat",), "v_relu")
    graph = Graph(graph.inputs, (*graph.nodes, extra), (*graph.outputs, "v_relu"))
    split = split_cached_attention(graph)
    assert any(n.output == "v_cat" for n in split.nodes) and not any(n.output == "k_cat" for n in split.nodes)
    _same(graph, split)


def test_a_language_models_decode_step_attends_without_a_join() -> None:
    """The tiny Llama step graph (grouped-query attention) at a decode shape: no attention reads a
    joined cache after the two rewrites, and the logits and new keys are the imported graph's."""
    pytest.importorskip("transformers")
    from neurenix_core.generation.step import export_step, spec_of
    from neurenix_core.graph.ir.grouped_attention import fold_repeated_kv
    from neurenix_core.graph.ir.specialize import fold_size_constants
    from tests.support.hf_zoo import llama

    model = llama()[0].eval()
    spec = spec_of(model)
    graph = export_step(model, spec)._graph
    past = 12
    shapes = [(1, 1), (1, 1, 1, past + 1), (1, 1)] + [(1, spec.kv_heads, past, spec.head_dim)] * (2 * spec.layers)
    imported = fold_size_constants(graph.with_input_shapes(*shapes))
    split = split_cached_attention(fold_repeated_kv(imported))
    pasts = {s.name for s in split.inputs[3:]}
    assert not any(n.op == "concat" and pasts & set(n.inputs) for n in split.nodes)
    assert not any(n.op == "scaled_dot_product_attention" for n in split.nodes)
    rng = np.random.default_rng(1)
    xs = [np.array([[7]]), np.zeros((1, 1, 1, past + 1), np.float32), np.array([[past]])]
    xs += [rng.standard_normal(s).astype(np.float32) for s in shapes[3:]]
    for got, want in zip(run_graph(split, *xs), run_graph(imported, *xs), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


def test_a_reversing_slice_between_the_join_and_the_attention_is_not_a_view() -> None:
    """A slice with a step of -1 keeps the shape but reverses the keys: the attention then reads
    other keys at other positions, so the split must not see through it."""
    graph = _graph(1, 5, 1)
    nodes = tuple(replace(n, attrs={**n.attrs, "starts": (-1,), "ends": (-_BIG,), "axes": (3,), "steps": (-1,)})
                  if n.name == "k_all" else n for n in graph.nodes)
    reversed_keys = Graph(graph.inputs, nodes, graph.outputs)
    split = split_cached_attention(reversed_keys)
    attention = [n for n in split.nodes if n.op == "scaled_dot_product_attention"]
    assert attention, "the attention over reversed keys was rewritten as if over the join"
    _same(reversed_keys, split)
