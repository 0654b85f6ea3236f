"""Shape buckets: one compilation per bucket instead of one per input shape.

    python examples/shape_buckets.py                  # the default device
    NEURENIX_EMULATE=npu python examples/shape_buckets.py --device npu:0

An MLP called at seven batch sizes compiles for five power-of-two buckets; a masked-attention
model called at several sequence lengths compiles for two user-given buckets, its attention
mask padded with 0 so the padded keys are masked out; a model that averages over the batch is
refused, because padding would change its result. See docs/shape-buckets.md.
"""

from __future__ import annotations

import argparse

import numpy as np

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.graph.compile.buckets import PaddingRefusedError
from neurenix_core.graph.ir import Graph, Node, TensorSpec


def mlp_buckets(device: str) -> None:
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    bucketed = nx.compile(model, device=device, buckets=True, outputs="host")
    exact = nx.compile(model, device=device, outputs="host")
    rng = np.random.default_rng(0)
    worst = 0.0
    for batch in (1, 3, 5, 6, 7, 12, 30):
        x = rng.standard_normal((batch, 16), dtype=np.float32)
        y = bucketed(x)
        worst = max(worst, float(np.abs(y - exact(x)).max()))
        assert y.shape == (batch, 4)
    print(f"mlp on {device}: 7 batch sizes, compiled_shapes = {bucketed.compiled_shapes}")
    print(f"mlp: max |bucketed - exact| = {worst:.2e}")
    print("mlp:", bucketed.summary.rsplit("; buckets", 1)[-1].strip())


def attention_model() -> Graph:
    """Self-attention over token features x (batch, length, 8) with a 0/1 mask (batch, length)."""
    nodes = (
        Node("keep", "cast", ("mask",), "keep", {"to": "bool"}),
        Node("keys", "unsqueeze", ("keep",), "keys", {"axes": (1, 2)}),  # (batch, 1, 1, length): one row per key
        Node("heads", "unsqueeze", ("x",), "heads", {"axes": (1,)}),  # (batch, 1, length, 8)
        Node("attn", "scaled_dot_product_attention", ("heads", "heads", "heads", "keys"), "attn"),
        Node("out", "squeeze", ("attn",), "out", {"axes": (1,)}),
    )
    inputs = (TensorSpec("x", (2, 8, 8), dynamic=(0, 1)), TensorSpec("mask", (2, 8), "int64", dynamic=(0, 1)))
    return Graph(inputs, nodes, ("out",))


def attention_buckets(device: str) -> None:
    graph = attention_model()
    buckets = {"x": {1: [8, 16]}, "mask": {1: [8, 16]}}  # the length axis of both inputs; the batch compiles exactly
    bucketed = nx.compile(graph, device=device, buckets=buckets, outputs="host")
    exact = nx.compile(graph, device=device, outputs="host")
    rng = np.random.default_rng(1)
    worst = 0.0
    for length in (5, 8, 11, 16, 3):
        x = rng.standard_normal((2, length, 8), dtype=np.float32)
        mask = np.ones((2, length), np.int64)
        mask[0, length // 2:] = 0  # the first sequence is shorter
        worst = max(worst, float(np.abs(bucketed(x, mask) - exact(x, mask)).max()))
    print(f"attention on {device}: lengths 5, 8, 11, 16, 3 -> compiled_shapes = {bucketed.compiled_shapes}")
    print(f"attention: max |bucketed - exact| = {worst:.2e}")


def refused(device: str) -> None:
    graph = Graph((TensorSpec("x", (4, 3), dynamic=(0,)),), (Node("average", "reduce_mean", ("x",), "y", {"axes": (0,)}),), ("y",))
    try:
        nx.compile(graph, device=device, buckets=True)
    except PaddingRefusedError as exc:
        print(f"refused: {exc}")
    else:
        raise SystemExit("a mean over the padded batch axis was not refused")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=str(nx.default_device()))
    device = parser.parse_args().device
    mlp_buckets(device)
    attention_buckets(device)
    refused(device)


if __name__ == "__main__":
    main()
