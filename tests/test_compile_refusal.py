"""A plugin that refuses a whole model at fp32: under 'allow' the model still runs (eager ops on the
device, the rest on cpu:0, reported); under 'error' the refusal is a CompilationError; eager
execution of an op with no eager form is a refusal, never a KeyError."""

from __future__ import annotations

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.device import Device
from neurenix_core.errors import CompilationError, UnsupportedOperationError
from neurenix_core.graph.compile.executor import EagerGraph
from neurenix_core.graph.ir import Graph, Node, TensorSpec
from neurenix_core.graph.reference.run import run_graph

# The edgetpu writer pads with a constant only: it refuses this graph as a whole.
GRAPH = Graph((TensorSpec("x", (1, 3, 4, 4), "float32"),),
              (Node("p", "pad", ("x",), "y", {"pads": ((0, 0), (0, 0), (1, 1), (1, 1)), "mode": "reflect"}),
               Node("r", "relu", ("y",), "z", {})), ("z",))


def _edgetpu() -> str:
    if "edgetpu" not in {d.type for d in nx.devices()}:
        pytest.skip("the edgetpu plugin is not installed or not emulated (NEURENIX_EMULATE=edgetpu)")
    return "edgetpu:0"


def test_refused_model_runs_partitioned_under_allow() -> None:
    device = _edgetpu()
    x = np.random.default_rng(0).standard_normal((1, 3, 4, 4)).astype(np.float32)
    with nx.fallback_policy("allow"):
        compiled = nx.compile(GRAPH, device=device, precision="fp32")
        got = compiled(x).to("cpu").numpy()
    np.testing.assert_allclose(got, run_graph(GRAPH, x), rtol=1e-6, atol=1e-6)
    assert "could not lower the model" in compiled.summary and "reflect" in compiled.summary
    assert [(o.node, o.op) for o in compiled.placement.off_device] == [("p", "pad")]
    # The plugin declares pad; what sent it to cpu:0 is that eager execution has no pad.
    assert compiled.placement.off_device[0].reason == "op has no eager form on edgetpu:0 (plugin edgetpu runs this model op by op)"


def test_refused_model_raises_under_error() -> None:
    device = _edgetpu()
    with nx.fallback_policy("error"), pytest.raises(CompilationError, match="pads with a constant only"):
        nx.compile(GRAPH, device=device, precision="fp32")(np.zeros((1, 3, 4, 4), np.float32))


def test_eager_graph_refuses_ops_without_an_eager_form() -> None:
    with pytest.raises(UnsupportedOperationError, match=r"'p' \(pad\)"):
        EagerGraph(GRAPH, Device("cpu", 0))
