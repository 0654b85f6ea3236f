"""A quantized model's cpu:0 segments (layers a device leaves to the host) run on the host runtime
host_select measures against the integer reference, as a whole cpu:0 int8 model does; the integer
reference runs what no runtime takes (``runners.Lowering._host_fn``)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
import torch

import neurenix_core as nx
from neurenix_core.graph import quantization as Q
from neurenix_core.graph.reference.run import run_quantized

pytestmark = pytest.mark.skipif("edgetpu:0" not in {str(d) for d in nx.devices()}, reason="the edgetpu plugin (LiteRT) is not installed")


class _Block(torch.nn.Module):
    """A residual block whose first linear output and residual add stay in float (mixed
    precision): the Edge TPU computes int8 only, so that layer (268M FLOPs at batch 256) runs on
    cpu:0, and so do the add and the layer norm (2.4M FLOPs, a segment whose input is float)."""

    def __init__(self, width: int = 512) -> None:
        super().__init__()
        self.fc1, self.skip = torch.nn.Linear(width, 2 * width), torch.nn.Linear(width, 2 * width)
        self.norm, self.fc2 = torch.nn.LayerNorm(2 * width), torch.nn.Linear(2 * width, 10)

    def forward(self, x: Any) -> Any:
        return self.fc2(self.norm(self.fc1(x) + self.skip(x)))


@pytest.fixture(scope="module")
def block() -> tuple[Any, Any, list[np.ndarray], str]:
    """(graph, mixed plan with fc1's output and the add in float, calibration batches, fc1's node name)."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    calibration = [rng.standard_normal((256, 512)).astype(np.float32) for _ in range(4)]
    graph = nx.nn.from_torch(_Block().eval(), (torch.from_numpy(calibration[0]),)).to_graph()
    plan = Q.calibrate(graph, calibration, progress=False)
    fc1 = next(n for n in graph.nodes if n.op == "linear")
    add = next(n for n in graph.nodes if n.op == "add")
    mixed = dataclasses.replace(plan, activations={k: v for k, v in plan.activations.items() if k not in (fc1.output, add.output)})
    return graph, mixed, calibration, fc1.name


def _compile(block: tuple[Any, Any, list[np.ndarray], str], **kw: Any) -> Any:
    graph, mixed, calibration, _ = block
    with nx.fallback_policy("allow"):
        return nx.compile(graph, device="edgetpu:0", quantize=mixed, calibration=calibration, progress=False, outputs="host", **kw)


def _segment_line(compiled: Any, node: str) -> str:
    lines = [part for part in compiled.placement.host_runtime.split("; segment ") if f"'{node}' on cpu:0" in part]
    assert lines, compiled.placement.host_runtime
    return lines[0]


def test_a_large_cpu0_segment_runs_on_a_measured_int8_runtime(block: tuple[Any, Any, list[np.ndarray], str]) -> None:
    graph, mixed, calibration, fc1 = block
    compiled = _compile(block)
    assert fc1 in {o.node for o in compiled.placement.off_device}
    line = _segment_line(compiled, fc1)
    # Timed against the integer reference, which loses by orders of magnitude at 268M FLOPs.
    assert "measured" in line and not line.split("(")[0].strip().endswith("runtime numpy"), line
    # The add and layer norm read a value the plan leaves in float: measured too, checked
    # against the integer reference run with float inputs.
    norm = _segment_line(compiled, next(n.name for n in graph.nodes if n.op == "add"))
    assert "measured" in norm, norm
    x = calibration[2]
    step = float(mixed.activations[graph.outputs[0]].scale[0])
    assert np.abs(np.asarray(compiled(x)) - run_quantized(graph, mixed, x)).max() <= 2 * step


def test_runtime_numpy_keeps_the_segments_on_the_integer_reference(block: tuple[Any, Any, list[np.ndarray], str]) -> None:
    graph, mixed, calibration, fc1 = block
    compiled = _compile(block, runtime="numpy")
    assert "runtime numpy" in _segment_line(compiled, fc1)
    x = calibration[3]
    step = float(mixed.activations[graph.outputs[0]].scale[0])
    assert np.abs(np.asarray(compiled(x)) - run_quantized(graph, mixed, x)).max() <= 2 * step


def test_a_float_output_is_checked_at_float32_tolerance_not_skipped() -> None:
    """A runtime's result for a value the plan leaves in float (a segment's float-output linear)
    is held to the integer reference within float32 rounding plus twice the plan's own error: a
    runtime that drops the bias fails, one that matches passes."""
    from neurenix_core.graph.quantization import verify as V

    torch.manual_seed(1)
    linear = torch.nn.Linear(32, 16).eval()
    with torch.no_grad():
        linear.bias[:] = 3.0
    rng = np.random.default_rng(1)
    batch = rng.standard_normal((8, 32)).astype(np.float32)
    graph = nx.nn.from_torch(linear, (torch.from_numpy(batch),)).to_graph()
    plan = Q.calibrate(graph, [batch], progress=False)
    out = graph.outputs[0]
    floats = dataclasses.replace(plan, activations={k: v for k, v in plan.activations.items() if k != out})
    refs = V.references(graph, floats, (batch,))
    right = V.agreement(graph, floats, [((batch,), [np.asarray(refs[1][0], np.float32)])], refs=[refs])
    no_bias = V.agreement(graph, floats, [((batch,), [np.asarray(refs[1][0]) - 3.0])], refs=[refs])
    assert right.within_bound and right.device_relative < 1e-6, right
    assert not no_bias.within_bound, no_bias
