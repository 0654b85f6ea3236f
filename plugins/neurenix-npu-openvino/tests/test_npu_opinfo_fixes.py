"""Fixes found by the OpInfo sweep on npu:0 (benchmarks/opinfo_sweep.py --device npu:0, issue
#41), each a one-op PyTorch module imported with ``nx.nn.from_torch``, compiled for npu:0 and
compared with eager PyTorch."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import neurenix_core as nx

torch = pytest.importorskip("torch")
pytest.importorskip("openvino")


def _on_npu(module: Any, *inputs: Any) -> tuple[list[np.ndarray], Any]:
    """``module`` imported and compiled for npu:0 (fp32), its outputs on ``inputs`` and its placement."""
    model = nx.nn.from_torch(module.eval(), tuple(inputs), static=True)
    compiled = nx.compile(model, device="npu:0", precision="fp32", progress=False, outputs="host")
    out = compiled(*[t.numpy() for t in inputs])
    return [np.asarray(o) for o in (out if isinstance(out, (list, tuple)) else [out])], compiled.placement


class _ExpandAs(torch.nn.Module):
    def forward(self, x: Any, other: Any) -> Any:
        return x.expand_as(other)


@pytest.mark.parametrize(("shape", "target"), [((), ()), ((1,), (3,)), ((2, 1), (2, 4))])
def test_expand_to_its_own_shape_runs_on_npu(npu: Any, shape: tuple[int, ...], target: tuple[int, ...]) -> None:
    """expand_as of two 0-d tensors: OpenVINO's Broadcast to an empty target shape segfaulted at
    the first inference (the sweep died there); an expand to the input's own shape is now no op."""
    x, other = torch.randn(shape), torch.randn(target)
    (got,), placement = _on_npu(_ExpandAs(), x, other)
    assert not placement.off_device, placement.line()
    np.testing.assert_array_equal(got, x.expand_as(other).numpy())
