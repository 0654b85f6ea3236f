"""ONNX Conv / ConvTranspose with the weight and bias as graph inputs (``conv`` / ``conv_transpose``:
the convolutions of training graphs, whose weights are values) lowered by the cuda plugin to
F.conv*d / F.conv_transpose*d, not placed on cpu:0, and equal to the core's float64 reference
within 1e-4 (the cases: ``tests/support/conv_input_cases.py``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conv_input_cases import CASES, case_graph, chain_graph
from neurenix_cuda_tc.lowering import LOWERED_OPS, lower_graph
from neurenix_cuda_tc.plugin import GRAPH_OPS, neurenix_manifest

import neurenix_core as nx
from neurenix_core.graph.ir import Graph
from neurenix_core.graph.reference.run import run_graph

TOL = 1e-4


def _check(got: Any, want: np.ndarray, what: str) -> None:
    got = got.detach().numpy() if hasattr(got, "detach") else np.asarray(got)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL, err_msg=what)


def _on_cuda(graph: Graph, inputs: list[np.ndarray]) -> np.ndarray:
    """Compiled for cuda:0 in fp32; every node must run there (none placed on cpu:0)."""
    compiled = nx.compile(graph, device="cuda:0", precision="fp32", outputs="host", progress=False)
    got = np.asarray(compiled(*inputs))
    placement = compiled.placement
    assert placement.off_device == () and placement.nodes.get("cuda:0") == len(graph.nodes), str(placement)
    return got


def test_conv_ops_are_declared_by_name() -> None:
    assert {"conv", "conv_transpose"} <= set(neurenix_manifest().capabilities.graph_ops) == set(GRAPH_OPS) == set(LOWERED_OPS)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_conv_with_weight_inputs_runs_on_cuda(cuda: Any, case: Any) -> None:
    graph, inputs = case_graph(case)
    _check(_on_cuda(graph, inputs), run_graph(graph, *inputs), case[0])


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_conv_without_static_shapes_plans_at_run_time(case: Any) -> None:
    # A model lowered before its input shapes are known: the geometry is read from the tensors.
    graph, inputs = case_graph(case)
    dynamic, _ = case_graph(case, static=False)
    with torch.no_grad():
        got = lower_graph(dynamic)(*(torch.from_numpy(a) for a in inputs))
    _check(got, run_graph(graph, *inputs), case[0])


def test_training_style_chain_stays_on_cuda(cuda: Any) -> None:
    graph, inputs = chain_graph()
    _check(_on_cuda(graph, inputs), run_graph(graph, *inputs), "conv chain")
