"""Which of the core's planned activations cpu:0's OpenVINO runtime rounds (issue #44).

OpenVINO's CPU device fuses conv/FC -> activation -> FakeQuantize into one kernel's post-ops, so a
FakeQuantize on a value that only such activations read is one more rounding inside that chain,
never an int8 tensor in memory: ``quantize.cpu_placement`` leaves those out (MobileNetV3-Small
int8 0.91x the time, docs/cpu.md); an add's or mul's operands keep theirs. The device then rounds less than the integer reference, so it
must stay nearer float than the reference is, and within the verification's bound.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from neurenix_npu_openvino.quantize import cpu_placement

import neurenix_core as nx
from neurenix_core.graph.ir import Graph, Node, TensorSpec
from neurenix_core.graph.quantization import calibrate, dynamic_plan
from neurenix_core.graph.reference.run import run_graph, run_quantized


def _linear(name: str, src: str, fin: int, fout: int, rng: np.random.Generator) -> Node:
    params = {"weight": (rng.standard_normal((fout, fin)) / np.sqrt(fin)).astype(np.float32),
              "bias": (0.1 * rng.standard_normal(fout)).astype(np.float32)}
    return Node(name, "linear", (src,), name, {"in_features": fin, "out_features": fout}, params)


def _gated(outputs: tuple[str, ...] = ("fc2",)) -> Graph:
    """x -> fc0 -> hardswish -> fc1 -> sigmoid -> mul(h, gate) -> fc2: a squeeze-excite's shape."""
    rng = np.random.default_rng(0)
    nodes = (
        _linear("fc0", "x", 32, 64, rng), Node("h", "hardswish", ("fc0",), "h"),
        _linear("fc1", "h", 64, 64, rng), Node("g", "sigmoid", ("fc1",), "g"),
        Node("m", "mul", ("h", "g"), "m"), _linear("fc2", "m", 64, 10, rng),
    )
    return Graph((TensorSpec("x", (16, 32)),), nodes, outputs)


def _batches(n: int, seed: int) -> list[np.ndarray]:
    return [np.random.default_rng(seed + i).standard_normal((16, 32)).astype(np.float32) for i in range(n)]


def test_values_only_fused_activations_read_are_left_unrounded() -> None:
    graph = _gated()
    plan = calibrate(graph, _batches(4, 0), bits=8, progress=False)
    lowered = cpu_placement(graph, plan)
    # fc0 (read by hardswish) and fc1 (by sigmoid) sit inside fused chains; the input, h (read by
    # fc1), the gate (an operand of mul: a tensor in memory), m and the graph output keep theirs.
    assert set(plan.activations) - set(lowered.activations) == {"fc0", "fc1"}
    assert set(lowered.activations) == {"x", "h", "g", "m", "fc2"}
    assert lowered.weights == plan.weights and lowered.bits == plan.bits


def test_a_graph_output_keeps_its_rounding_and_a_dynamic_plan_is_unchanged() -> None:
    graph = _gated(outputs=("fc2", "fc0"))
    plan = calibrate(graph, _batches(4, 0), bits=8, progress=False)
    assert "fc0" in cpu_placement(graph, plan).activations
    dynamic = dynamic_plan(graph)
    assert cpu_placement(graph, dynamic) is dynamic


@pytest.fixture
def state(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A fresh state folder (runtime choices and compiled-model cache)."""
    from neurenix_core.plugins.state import registry

    monkeypatch.setattr(registry().config, "state_dir", str(tmp_path))
    return tmp_path


def test_cpu_int8_on_openvino_rounds_less_and_stays_nearer_float_than_the_reference(state: Any) -> None:
    graph = _gated()
    calibration = _batches(4, 0)
    compiled = nx.compile(graph, device="cpu", quantize="int8", calibration=calibration, runtime="openvino", progress=False)
    x = _batches(1, seed=50)[0]
    got = np.asarray(compiled(x).numpy(), np.float64)
    summary = compiled.summary
    assert "3/3 conv/FC layers in integer precision" in summary, summary
    assert "FakeQuantize on 5 of 7 planned activations, 2 read only by fused activations kept in f32" in summary, summary
    assert compiled.verification is not None and compiled.verification.within_bound, summary
    assert compiled.plan is not None
    exact = np.asarray(run_graph(graph, x), np.float64)
    integer = np.asarray(run_quantized(graph, compiled.plan, x), np.float64)
    # The roundings left out are ones float does not make: the device is no farther from float
    # than the integer reference is.
    assert np.linalg.norm(got - exact) <= np.linalg.norm(integer - exact)
