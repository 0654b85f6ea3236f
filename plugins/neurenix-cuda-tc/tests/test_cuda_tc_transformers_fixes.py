"""Fixes found by the transformers sweep on cuda:0 (benchmarks/transformers_sweep.py, issue #41),
each on a graph as small as the failure."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from neurenix_cuda_tc.compiled import compile_graph
from neurenix_cuda_tc.lowering import lower_graph

import neurenix_core as nx
from neurenix_core.graph.ir import CompileOptions, Graph, Node


def _no_input_graph() -> Graph:
    """A graph of computed constants only: what the partitioner hands cuda:0 when a segment's
    values all come from constants (afmoe: the expert counts between cpu:0's topk and cumsum)."""
    value = np.arange(-3, 3, dtype=np.float32).reshape(2, 3)
    return Graph((), (Node("c", "constant", (), "c", {}, {"value": value}), Node("r", "relu", ("c",), "r")), ("r",))


def test_graph_without_inputs_traces_and_runs(cuda: Any) -> None:
    """A static graph with no inputs is traced by torch.fx like any other (it used to be the
    varargs module, whose len(inputs) fx refuses: RuntimeError 'len' is not supported)."""
    graph = _no_input_graph()
    traced = torch.fx.symbolic_trace(lower_graph(graph))
    want = np.maximum(graph.nodes[0].params["value"], 0)
    np.testing.assert_array_equal(traced().numpy(), want)
    model = compile_graph(cuda, graph, CompileOptions(device=nx.Device("cuda", 0)))
    assert "torch.fx GraphModule" in model.summary
    np.testing.assert_array_equal(np.asarray(model()), want)


def clamped_lookup() -> Any:
    """Ergo's router: expert ids clamped with ``clamp_max`` then used to index a table."""

    class Lookup(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.table = torch.nn.Parameter(torch.randn(4, 8, generator=torch.Generator().manual_seed(0)))

        def forward(self, ids: Any) -> Any:
            clamped = ids.clamp(max=3).clamp(min=0)
            return self.table[clamped], clamped

    return Lookup().eval()


def test_integer_clip_keeps_its_dtype() -> None:
    """clip of an int64 value stays int64 on cuda:0 (torch.clamp promotes it to float32 with the
    graph's float bounds, and the float index then raised IndexError)."""
    module = clamped_lookup()
    ids = torch.tensor([[0, 5, 2, 9], [-1, 3, 7, 1]])
    with torch.no_grad():
        want = [t.numpy() for t in module(ids)]
    compiled = nx.compile(nx.nn.from_torch(module, (ids,), static=True), device="cuda:0", progress=False)
    got = [np.asarray(t.numpy()) for t in compiled(ids.numpy())]
    assert not compiled.placement.off_device, compiled.placement.line()
    assert got[1].dtype == np.int64
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
