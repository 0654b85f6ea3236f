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
    """A residual block whose first linear output stays in float (mixed precision): the Edge TPU
    computes int8 only, so that layer (67M FLOPs at batch 64) runs on cpu:0."""

    def __init__(self, width: int = 512) -> None:
        super().__init__()
        self.fc1, self.skip = torch.nn.Linear(width, 2 * width), torch.nn.Linear(width, 2 * width)
        self.norm, self.fc2 = torch.nn.LayerNorm(2 * width), torch.nn.Linear(2 * width, 10)

    def forward(self, x: Any) -> Any:
        return self.fc2(self.norm(self.fc1(x) + self.skip(x)))


@pytest.fixture(scope="module")
def block() -> tuple[Any, Any, list[np.ndarray], str]:
    """(graph, mixed plan with fc1's output in float, calibration batches, fc1's node name)."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    calibration = [rng.standard_normal((64, 512)).astype(np.float32) for _ in range(4)]
    graph = nx.nn.from_torch(_Block().eval(), (torch.from_numpy(calibration[0]),)).to_graph()
    plan = Q.calibrate(graph, calibration, progress=False)
    fc1 = next(n for n in graph.nodes if n.op == "linear")
    mixed = dataclasses.replace(plan, activations={k: v for k, v in plan.activations.items() if k != fc1.output})
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
    # Timed against the integer reference, which loses by orders of magnitude at 67M FLOPs.
    assert "measured" in line and not line.split("(")[0].strip().endswith("runtime numpy"), line
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
