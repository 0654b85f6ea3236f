"""fold_repeated_kv: grouped-query attention computed on the unrepeated key/value heads (the
rewrite every per-shape compilation applies), checked value for value against the graph as
imported, on the reference interpreter and on a language model's greedy tokens."""

from __future__ import annotations

import numpy as np
import pytest

from neurenix_core.graph.ir import Graph, Node, TensorSpec
from neurenix_core.graph.ir.grouped_attention import fold_repeated_kv
from neurenix_core.graph.reference.run import run_graph

B, HKV, REP, D = 2, 2, 3, 8


def _graph(length: int, past: int, mask: tuple[int, ...] | None, causal: bool = False) -> Graph:
    """q (B, H, L, D) attending over k/v (B, HKV, S, D) repeated REP times as transformers' repeat_kv does."""
    h, s = HKV * REP, past
    inputs = [TensorSpec("q", (B, h, length, D)), TensorSpec("k", (B, HKV, s, D)), TensorSpec("v", (B, HKV, s, D))]
    nodes = []
    for kv in ("k", "v"):
        nodes += [Node(f"{kv}_one", "unsqueeze", (kv,), f"{kv}_one", {"axes": (2,)}),
                  Node(f"{kv}_rep", "expand", (f"{kv}_one",), f"{kv}_rep", {"shape": (B, HKV, REP, s, D)}),
                  Node(f"{kv}_flat", "reshape", (f"{kv}_rep",), f"{kv}_flat", {"shape": (B, h, s, D)})]
    ins = ("q", "k_flat", "v_flat")
    if mask is not None:
        inputs.append(TensorSpec("mask", mask))
        ins += ("mask",)
    nodes.append(Node("attn", "scaled_dot_product_attention", ins, "y", {"scale": None, "is_causal": causal}))
    nodes.append(Node("after", "relu", ("y",), "out"))
    return Graph(tuple(inputs), tuple(nodes), ("out",))


def _inputs(graph: Graph, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s.shape).astype(np.float32) for s in graph.inputs]
    if len(arrays) > 3:  # an additive mask with whole rows and columns masked, as a left-padded cache has
        arrays[3] = np.where(rng.random(graph.inputs[3].shape) < 0.3, np.float32(np.finfo(np.float32).min), np.float32(0))
    return arrays


@pytest.mark.parametrize(("length", "past", "mask"), [
    (1, 9, (B, 1, 1, 9)),          # a decode step: one mask row serves every query
    (4, 9, (B, 1, 4, 9)),          # a prefill: the mask repeated along the stacked queries
    (4, 9, (1, HKV * REP, 4, 9)),  # one mask per head: regrouped
    (1, 9, None),
    (3, 7, (B, 1, 3, 7)),
], ids=["decode", "prefill", "per-head-mask", "no-mask", "batch-1-mask"])
def test_the_rewrite_computes_the_same_attention_without_the_repeats(length: int, past: int, mask: tuple[int, ...] | None) -> None:
    graph = _graph(length, past, mask)
    folded = fold_repeated_kv(graph)
    assert not any(n.op == "expand" and n.name.startswith(("k_", "v_")) for n in folded.nodes)
    attn = [n for n in folded.nodes if n.op == "scaled_dot_product_attention"]
    assert len(attn) == 1 and attn[0].inputs[1] != "k_flat"
    xs = _inputs(graph)
    np.testing.assert_allclose(run_graph(folded, *xs), run_graph(graph, *xs), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("length", [1, 4])
def test_causal_attention_is_left_as_imported(length: int) -> None:
    """is_causal counts the diagonal from the first query (query i sees keys <= i): stacked
    queries would see other keys."""
    graph = _graph(length, 4, None, causal=True)
    assert fold_repeated_kv(graph) is graph


def test_a_repeat_read_elsewhere_stays() -> None:
    graph = _graph(1, 5, None)
    extra = Node("also", "relu", ("k_flat",), "k_relu")
    graph = Graph(graph.inputs, (*graph.nodes, extra), ("out", "k_relu"))
    folded = fold_repeated_kv(graph)
    assert any(n.output == "k_flat" for n in folded.nodes) and not any(n.output == "v_flat" for n in folded.nodes)
    xs = _inputs(graph)
    for got, want in zip(run_graph(folded, *xs), run_graph(graph, *xs), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
