"""Shape buckets (nx.compile(..., buckets=...)): the number of compilations stays at the number of
buckets, padded results equal unpadded ones, and padding that could change a result is refused
(neurenix_core.graph.compile.buckets, docs/shape-buckets.md)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.errors import CompilationError, ShapeError
from neurenix_core.graph.compile.buckets import PaddingRefusedError, pow2_bucket
from neurenix_core.graph.ir import Graph, Node, TensorSpec

DEVICES = ["cuda:0", "tpu:0", "npu:0", "edgetpu:0"]


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _graph(nodes: list[Node], inputs: list[TensorSpec], out: str) -> Graph:
    return Graph(tuple(inputs), tuple(nodes), (out,))


def _x(b: int, f: int = 8, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed + b).standard_normal((b, f)).astype(np.float32)


def test_mlp_compiles_once_per_bucket_over_50_shapes() -> None:
    model = _mlp()
    bucketed = nx.compile(model, device="cpu", buckets=True)
    exact = nx.compile(model, device="cpu")
    batches = np.random.default_rng(1).integers(1, 65, 50).tolist()
    for b in batches:
        x = _x(b)
        got, want = bucketed(x).numpy(), exact(x).numpy()
        assert got.shape == want.shape == (b, 4)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    expected = sorted({pow2_bucket(b) for b in batches})
    assert sorted(s[0][0] for s in bucketed.compiled_shapes) == expected
    assert len(bucketed.compiled_shapes) <= 7  # 1, 2, 4 ... 64
    summary = bucketed.summary
    padded = sum(1 for b in batches if pow2_bucket(b) != b)
    assert f"{len(expected)} compiled shape(s)" in summary
    assert sum(int(part.split(" padded")[0].rsplit(", ", 1)[1]) for part in summary.split("call(s)")[1:]) == padded


def test_user_buckets_and_the_shape_above_the_largest() -> None:
    compiled = nx.compile(_mlp(), device="cpu", buckets=[4, 16])
    for b in (1, 3, 4, 9, 16):
        assert compiled(_x(b)).shape == (b, 4)
    assert compiled.compiled_shapes == [((4, 8),), ((16, 8),)]
    with pytest.raises(ShapeError, match=r"input 'input' axis 0 has size 17, above its largest bucket: buckets \[4, 16\]"):
        compiled(_x(17))


def test_bad_requests_are_refused() -> None:
    model = _mlp()
    with pytest.raises(CompilationError, match="pad_values= is for bucketed models"):
        nx.compile(model, device="cpu", pad_values={"input": 1})
    with pytest.raises(CompilationError, match="names no input of the model"):
        nx.compile(model, device="cpu", buckets={"ids": {0: [2]}})
    with pytest.raises(CompilationError, match="sizes must be positive ints"):
        nx.compile(model, device="cpu", buckets={"input": {0: [0, 2]}})
    with pytest.raises(CompilationError, match="must be a finite number"):
        nx.compile(model, device="cpu", buckets=True, pad_values={"input": float("nan")})


@pytest.mark.parametrize("node, reason", [
    (Node("average", "reduce_mean", ("x",), "y", {"axes": (0,), "keepdims": True}), "reduces or mixes positions along this padded axis"),
    (Node("probs", "softmax", ("x",), "y", {"axis": 0}), "reduces or mixes positions along this padded axis"),
    (Node("flat", "flatten", ("x",), "y", {"start_dim": 0, "end_dim": -1}), "flatten merges this padded axis"),
    (Node("running", "cumsum", ("x",), "y", {"axis": 0, "reverse": True}), "reduces or mixes"),
])
def test_padding_that_mixes_the_axis_is_refused(node: Node, reason: str) -> None:
    graph = _graph([node], [TensorSpec("x", (4, 3), dynamic=(0,))], "y")
    with pytest.raises(PaddingRefusedError, match=rf"node '{node.name}' \(op {node.op}\) along axis 0 of its input: .*{reason}"):
        nx.compile(graph, device="cpu", buckets=True)  # refused at compile time: the example shape is known
    # A plain sum over zero padding is exact (it is kept); padded with 1 it is refused.
    total = _graph([Node("total", "reduce_sum", ("x",), "y", {"axes": (0,)})], [TensorSpec("x", (4, 3), dynamic=(0,))], "y")
    np.testing.assert_allclose(nx.compile(total, device="cpu", buckets=True)(np.ones((3, 3), np.float32)).numpy(), np.full((1, 3), 3.0))
    with pytest.raises(PaddingRefusedError, match=r"node 'total' \(op reduce_sum\).*padded positions hold 1"):
        nx.compile(total, device="cpu", buckets=True, pad_values={"x": 1})
    # Without buckets the same graph compiles per shape as before.
    assert nx.compile(graph, device="cpu")(np.ones((3, 3), np.float32)).shape[-1] in (3, 9)


def test_a_masked_sum_and_a_forward_cumsum_over_the_padded_axis_are_kept() -> None:
    """sum(x * mask) over the batch: the padded rows are 0 (x and mask padded with 0) and add nothing."""
    nodes = [
        Node("m2", "unsqueeze", ("mask",), "m2", {"axes": (1,)}),
        Node("masked", "mul", ("x", "m2"), "masked"),
        Node("total", "reduce_sum", ("masked",), "total", {"axes": (0,), "keepdims": False}),
        Node("running", "cumsum", ("x",), "running", {"axis": 0}),
    ]
    graph = Graph((TensorSpec("x", (4, 3), dynamic=(0,)), TensorSpec("mask", (4,), dynamic=(0,))), tuple(nodes), ("total", "running"))
    compiled = nx.compile(graph, device="cpu", buckets=True)
    rng = np.random.default_rng(0)
    for b in (3, 5, 6):
        x, mask = rng.standard_normal((b, 3)).astype(np.float32), (rng.random(b) > 0.3).astype(np.float32)
        total, running = compiled(x, mask)
        np.testing.assert_allclose(total.numpy(), (x * mask[:, None]).sum(0), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(running.numpy(), np.cumsum(x, 0), rtol=1e-6, atol=1e-6)
    assert compiled.compiled_shapes == [((4, 3), (4,)), ((8, 3), (8,))]
    # x padded with 1 is still masked out by a mask padded with 0; with the mask padded with 1 too
    # the padded rows would be counted: refused.
    nx.compile(graph, device="cpu", buckets=True, pad_values={"x": 1})
    with pytest.raises(PaddingRefusedError, match="node 'total' \\(op reduce_sum\\)"):
        nx.compile(graph, device="cpu", buckets=True, pad_values={"x": 1, "mask": 1})


def test_causal_attention_pads_its_length_and_full_attention_does_not() -> None:
    def graph(causal: bool) -> Graph:
        node = Node("attn", "scaled_dot_product_attention", ("x", "x", "x"), "y", {"is_causal": causal})
        return _graph([node], [TensorSpec("x", (2, 4, 8), dynamic=(0, 1))], "y")

    compiled = nx.compile(graph(True), device="cpu", buckets={"x": {1: [8, 16]}})
    exact = nx.compile(graph(True), device="cpu")
    for s in (3, 7, 11):
        x = np.random.default_rng(s).standard_normal((2, s, 8)).astype(np.float32)
        np.testing.assert_allclose(compiled(x).numpy(), exact(x).numpy(), rtol=0, atol=1e-6)
    assert compiled.compiled_shapes == [((2, 8, 8),), ((2, 16, 8),)]
    with pytest.raises(PaddingRefusedError, match="attention sums over the padded keys and no mask"):
        nx.compile(graph(False), device="cpu", buckets={"x": {1: [8, 16]}})


@pytest.mark.parametrize("device", DEVICES)
def test_buckets_on_each_emulated_device(device: str) -> None:
    if device not in [str(d) for d in nx.devices()]:
        pytest.skip(f"{device} is not available (tests emulate it with NEURENIX_EMULATE=cuda,tpu,npu,edgetpu JAX_PLATFORMS=cpu)")
    model = _mlp()
    bucketed = nx.compile(model, device=device, precision="fp32", buckets=[2, 8], outputs="host")
    exact = nx.compile(model, device=device, precision="fp32", outputs="host")
    for b in (1, 3, 5, 8):
        got, want = bucketed(_x(b)), exact(_x(b))
        assert got.shape == (b, 4)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)
    assert bucketed.compiled_shapes == [((2, 8),), ((8, 8),)]


# ---------------------------------------------------------------------------- a masked transformer
@pytest.fixture(scope="module")
def bert() -> tuple[Any, Any, Any]:
    pytest.importorskip("transformers")
    import hf_zoo as hz

    model, inputs = hz.build("bert")
    return model, inputs, nx.nn.from_torch(model, inputs(2, 16))


BERT_BUCKETS = {name: {0: [2, 4], 1: [8, 16, 32]} for name in ("input_ids", "attention_mask")}


def test_bert_compiles_once_per_bucket_and_padding_the_mask_changes_nothing(bert: tuple[Any, Any, Any]) -> None:
    _, inputs, imported = bert
    bucketed = nx.compile(imported, device="cpu", buckets=BERT_BUCKETS)
    exact = nx.compile(imported, device="cpu")
    rng = np.random.default_rng(2)
    shapes = [(int(b), int(s)) for b, s in zip(rng.integers(1, 5, 50), rng.integers(2, 33, 50))]
    for b, s in shapes:
        ex = inputs(b, s)  # the first sequence's tail is masked out (attention_mask 0) when b > 1
        ids, mask = ex["input_ids"].numpy(), ex["attention_mask"].numpy()
        for got, want in zip(bucketed(ids, mask), exact(ids, mask)):
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)  # measured: 7.2e-7 at most
    buckets = {((2 if b <= 2 else 4, next(k for k in (8, 16, 32) if k >= s)),) * 2 for b, s in shapes}
    assert set(bucketed.compiled_shapes) == buckets and len(bucketed.compiled_shapes) <= 6
    assert "padded" in bucketed.summary


def test_bert_padded_sequence_equals_torch(bert: tuple[Any, Any, Any]) -> None:
    import hf_zoo as hz
    import torch

    model, inputs, imported = bert
    bucketed = nx.compile(imported, device="cpu", buckets={"input_ids": {1: [16]}, "attention_mask": {1: [16]}})
    ex = inputs(2, 11)
    got = bucketed(ex["input_ids"].numpy(), ex["attention_mask"].numpy())
    with torch.no_grad():
        want = hz.outputs(model(**ex))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w, rtol=0, atol=1e-5)
    assert bucketed.compiled_shapes == [((2, 16), (2, 16))]


def test_bert_with_the_mask_padded_by_1_is_refused(bert: tuple[Any, Any, Any]) -> None:
    _, _, imported = bert
    with pytest.raises(PaddingRefusedError, match=r"node 'scaled_dot_product_attention' \(op scaled_dot_product_attention\).*padded keys"):
        nx.compile(imported, device="cpu", buckets=BERT_BUCKETS, pad_values={"attention_mask": 1})


def test_bert_with_a_pad_token_outside_the_vocabulary_is_refused(bert: tuple[Any, Any, Any]) -> None:
    _, _, imported = bert  # 128 tokens: id 500 would read past the embedding table at the padded positions
    with pytest.raises(PaddingRefusedError, match="may hold inf/NaN at padded keys"):
        nx.compile(imported, device="cpu", buckets=BERT_BUCKETS, pad_values={"input_ids": 500})
    nx.compile(imported, device="cpu", buckets=BERT_BUCKETS, pad_values={"input_ids": 1})  # a real token id pads fine


def test_a_causal_mask_built_from_positions_pads_the_length() -> None:
    """mask = positions[None, :] <= positions[:, None]: a real row i < n never sees a padded column j >= n."""
    from neurenix_core.graph.ir.symbolic import SymDim

    nodes = [
        Node("positions.const", "constant", (), "positions.const", {}, {"value": np.arange(64, dtype=np.int64)}),
        Node("positions", "slice", ("positions.const",), "positions", {"starts": (0,), "ends": (SymDim("d0_1"),), "axes": (0,)}),
        Node("cols", "unsqueeze", ("positions",), "cols", {"axes": (0,)}),
        Node("rows", "unsqueeze", ("positions",), "rows", {"axes": (1,)}),
        Node("causal", "less_equal", ("cols", "rows"), "causal"),
        Node("attn", "scaled_dot_product_attention", ("x", "x", "x", "causal"), "y"),
    ]
    graph = _graph(nodes, [TensorSpec("x", (2, 4, 8), dynamic=(0, 1))], "y")
    compiled, exact = nx.compile(graph, device="cpu", buckets={"x": {1: [8, 16]}}), nx.compile(graph, device="cpu")
    for s in (3, 11):
        x = np.random.default_rng(s).standard_normal((2, s, 8)).astype(np.float32)
        np.testing.assert_allclose(compiled(x).numpy(), exact(x).numpy(), rtol=0, atol=1e-6)
    assert compiled.compiled_shapes == [((2, 8, 8),), ((2, 16, 8),)]
    nodes[4] = Node("causal", "greater_equal", ("cols", "rows"), "causal")  # the upper triangle: later keys, refused
    with pytest.raises(PaddingRefusedError, match="attention sums over the padded keys"):
        nx.compile(_graph(nodes, [TensorSpec("x", (2, 4, 8), dynamic=(0, 1))], "y"), device="cpu", buckets={"x": {1: [8, 16]}})
