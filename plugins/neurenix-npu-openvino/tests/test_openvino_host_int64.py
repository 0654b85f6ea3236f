"""OpenVINO as cpu:0's host runtime holds 64-bit integers as 32-bit ones: it must not take a graph
whose int64 values are more than indices, or the answer is silently wrong beyond 2**31."""

from __future__ import annotations

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.errors import UnsupportedOperationError
from neurenix_core.graph.ir import Graph, Node, TensorSpec
from neurenix_core.graph.reference.run import run_graph

pytest.importorskip("openvino")


def _div() -> Graph:
    return Graph((TensorSpec("x", (1,), "int64"), TensorSpec("y", (1,), "int64")),
                 (Node("d", "div", ("x", "y"), "q"),), ("q",))


def test_openvino_itself_truncates_int64_the_reason_for_the_rule() -> None:
    """What the rule guards against, on OpenVINO directly (its lowering, compiled for CPU)."""
    from neurenix_npu_openvino.host import OpenVINOHostRuntime

    from neurenix_core.graph.ir.host import HostOptions

    x, y = np.array([2**62 + 1], np.int64), np.array([3], np.int64)
    runtime = OpenVINOHostRuntime(("float32", "int64"))
    assert runtime.covers(_div()) is not None  # the rule; compiled anyway, to show why
    assert runtime.compile(_div(), HostOptions())(x, y)[0].tolist() != [(2**62 + 1) // 3]


def test_int64_arithmetic_is_refused_with_the_reason_and_runs_exactly_elsewhere() -> None:
    x, y = np.array([2**62 + 1], np.int64), np.array([3], np.int64)
    with pytest.raises(UnsupportedOperationError, match=r"openvino holds 64-bit integers as 32-bit ones: layer 'd' \(div\)"):
        nx.compile(_div(), device="cpu", runtime="openvino")(x, y)
    assert nx.compile(_div(), device="cpu")(x, y).numpy().tolist() == [(2**62 + 1) // 3]


def test_int64_indices_are_taken() -> None:
    """Token ids into an embedding (BERT's only int64 values): exact as int32, so OpenVINO runs them."""
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((50, 8)).astype(np.float32)
    graph = Graph((TensorSpec("ids", (2, 5), "int64"),), (Node("e", "embedding", ("ids",), "h", {}, {"weight": weight}),), ("h",))
    ids = rng.integers(0, 50, (2, 5)).astype(np.int64)
    compiled = nx.compile(graph, device="cpu", runtime="openvino")
    np.testing.assert_array_equal(compiled(ids).numpy(), run_graph(graph, ids))
    assert "runtime openvino" in compiled.summary
