"""ONNX Runtime's CPU provider as a cpu:0 host runtime: a third party offering its runtime (API 1.2)."""

from __future__ import annotations

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.graph.compile import host_select
from neurenix_core.graph.ir import Graph, Node, TensorSpec
from neurenix_core.graph.reference.run import run_graph


def _graph() -> Graph:
    rng = np.random.default_rng(0)
    conv = {"in_channels": 3, "out_channels": 8, "kernel_size": (3, 3), "padding": (1, 1)}
    return Graph((TensorSpec("x", (4, 3, 16, 16)),), (
        Node("conv", "conv2d", ("x",), "c", conv, {"weight": rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3,
                                                    "bias": rng.standard_normal(8).astype(np.float32) * 0.1}),
        Node("act", "relu", ("c",), "r"),
        Node("pool", "adaptive_avg_pool2d", ("r",), "p", {"output_size": (1, 1)}),
        Node("flat", "flatten", ("p",), "f", {"start_dim": 1}),
    ), ("f",))


def test_onnxruntime_is_offered_and_matches_the_reference() -> None:
    assert not isinstance(host_select.host_runtimes().get("onnxruntime"), (str, type(None)))
    graph = _graph()
    x = np.random.default_rng(1).standard_normal((4, 3, 16, 16)).astype(np.float32)
    compiled = nx.compile(graph, device="cpu", runtime="onnxruntime", threads=1)
    got = compiled(x).numpy()
    want = run_graph(graph, x)
    assert float(np.abs(got - want).max() / np.abs(want).max()) <= 1e-5
    assert "ONNX Runtime" in compiled.summary and "1 intra-op thread(s)" in compiled.summary
    assert compiled.native().threads == 1


def test_a_graph_onnxruntime_rejects_is_a_typed_error() -> None:
    graph = Graph((TensorSpec("x", (2, 3)),), (Node("s", "reshape", ("x",), "y", {"shape": (4, 2)}),), ("y",))  # 6 elements into 8
    with pytest.raises(nx.NeurenixError):
        nx.compile(graph, device="cpu", runtime="onnxruntime")(np.ones((2, 3), np.float32))
