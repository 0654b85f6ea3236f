"""ONNX Conv / ConvTranspose with the weight and bias as graph inputs (``conv`` / ``conv_transpose``:
the convolutions of training graphs, whose weights are values) lowered into the tpu program with
jax.lax.conv_general_dilated, not placed on cpu:0, and equal to the core's float64 reference
within 1e-4 in fp32 (the cases: ``tests/support/conv_input_cases.py``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conv_input_cases import CASES, case_graph, chain_graph
from neurenix_tpu.optable import LOWERINGS
from neurenix_tpu.plugin import GRAPH_OPS, neurenix_manifest

import neurenix_core as nx
from neurenix_core.graph.ir import Graph
from neurenix_core.graph.reference.run import run_graph

TOL = 1e-4
BF16_TOL = 5e-2


def _check(got: Any, want: np.ndarray, what: str, tol: float = TOL) -> None:
    got = np.asarray(got)
    assert got.shape == want.shape and got.dtype == np.float32, f"{what}: {got.dtype} {got.shape} != float32 {want.shape}"
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=what)


def _on_tpu(graph: Graph, inputs: list[np.ndarray], precision: str = "fp32") -> np.ndarray:
    """Compiled for tpu:0; every node must run there (none placed on cpu:0), as one XLA program."""
    compiled = nx.compile(graph, device="tpu:0", precision=precision, outputs="host", progress=False)
    got = np.asarray(compiled(*inputs))
    placement = compiled.placement
    assert placement.off_device == () and placement.nodes.get("tpu:0") == len(graph.nodes), str(placement)
    assert "fused into one XLA program" in compiled.summary, compiled.summary
    return got


def test_conv_ops_are_declared_by_name() -> None:
    assert {"conv", "conv_transpose"} <= set(neurenix_manifest().capabilities.graph_ops) == set(GRAPH_OPS) == set(LOWERINGS)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_conv_with_weight_inputs_runs_on_tpu(tpu: Any, case: Any) -> None:
    graph, inputs = case_graph(case)
    _check(_on_tpu(graph, inputs), run_graph(graph, *inputs), case[0])


def test_training_style_chain_stays_on_tpu(tpu: Any) -> None:
    # The 2-D convolutions run NHWC; the computed weight reaches the last conv held NHWC (read as OHWI).
    graph, inputs = chain_graph()
    want = run_graph(graph, *inputs)
    _check(_on_tpu(graph, inputs), want, "conv chain")
    # The TPU default: bfloat16 operands (inputs and weights alike), float32 accumulation.
    scale = float(np.max(np.abs(want)))
    _check(_on_tpu(graph, inputs, precision="bf16") / scale, want / scale, "conv chain bf16", BF16_TOL)
