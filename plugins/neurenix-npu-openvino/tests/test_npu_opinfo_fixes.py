"""Fixes found by the OpInfo sweep on npu:0 (benchmarks/opinfo_sweep.py --device npu:0, issue
#41), each a one-op PyTorch module imported with ``nx.nn.from_torch``, compiled for npu:0 and
compared with eager PyTorch."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import neurenix_core as nx

torch = pytest.importorskip("torch")
from torch_eager import OpModule

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


def _eager(module: Any, *inputs: Any) -> list[np.ndarray]:
    with torch.no_grad():
        out = module(*inputs)
    return [t.numpy() for t in (out if isinstance(out, (list, tuple)) else [out])]


@pytest.mark.parametrize("fn", [torch.isfinite, lambda x: torch.isclose(x, x * 1.5), lambda x: torch.logaddexp(x, -x)],
                         ids=["isfinite", "isclose", "logaddexp"])
def test_boolean_products_and_sums_run_on_npu(npu: Any, fn: Any) -> None:
    """isfinite and friends are imported as mul/add of boolean masks, which OpenVINO's Multiply
    and Add refuse (a RuntimeError at lowering); on bools they are now logical and/or."""
    x = torch.tensor([0.0, 1.5, -2.0, float("inf"), float("-inf"), float("nan"), 3e38, -1e-30])
    module = OpModule(fn)
    got, placement = _on_npu(module, x)
    assert not placement.off_device, placement.line()
    for have, want in zip(got, _eager(module, x)):
        assert have.dtype.kind == want.dtype.kind
        np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("reduce", [torch.max, torch.min], ids=["max", "min"])
def test_max_with_dim_of_a_scalar_runs_on_npu(npu: Any, reduce: Any) -> None:
    """torch.max(x, dim=0) of a 0-d tensor: its index is argmax of a rank-0 value, which
    OpenVINO's TopK refuses (a RuntimeError at lowering); it is the index 0."""
    module = OpModule(lambda x: tuple(reduce(x, 0)))
    x = torch.tensor(-2.5)
    got, placement = _on_npu(module, x)
    assert not placement.off_device, placement.line()
    want = _eager(module, x)
    assert [g.shape for g in got] == [w.shape for w in want]
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize("mode", ["reflect", "circular", "replicate", "constant"])
def test_pad_of_an_empty_tensor_runs_on_npu(npu: Any, mode: str) -> None:
    """Padding a tensor with an empty axis: OpenVINO's reflect Pad refused it and the circular
    gather trapped (SIGFPE killed the process); an empty result is now an empty constant."""
    module = OpModule(lambda x: torch.nn.functional.pad(x, (1, 2), mode=mode))
    x = torch.randn(0, 3, 3)
    (got,), placement = _on_npu(module, x)
    (want,) = _eager(module, x)
    assert not placement.off_device, placement.line()
    assert got.shape == want.shape == (0, 3, 6)
    assert got.dtype == want.dtype


@pytest.mark.parametrize(("fn", "shapes", "out_shape"), [
    (torch.nn.functional.linear, [(0, 3), (4, 3), (4,)], (0, 4)),  # OpenVINO's MatMul would not compile
    (torch.nn.functional.pdist, [(1, 5)], (0,)),  # gathers of no rows: SIGFPE at the first inference
], ids=["linear", "pdist"])
def test_nodes_with_empty_results_run_on_npu(npu: Any, fn: Any, shapes: list[tuple[int, ...]], out_shape: tuple[int, ...]) -> None:
    """Any node whose result is empty is lowered as an empty constant of its shape and dtype."""
    module = OpModule(fn)
    inputs = [torch.randn(shape) for shape in shapes]
    (got,), placement = _on_npu(module, *inputs)
    (want,) = _eager(module, *inputs)
    assert not placement.off_device, placement.line()
    assert got.shape == want.shape == out_shape
    assert got.dtype == want.dtype


@pytest.mark.parametrize("fn", [lambda x: x.mean(0), lambda x: torch.std_mean(x, 0)], ids=["mean", "std_mean"])
def test_mean_over_an_empty_axis_is_nan_on_npu(npu: Any, fn: Any) -> None:
    """The mean of no values is NaN in PyTorch; OpenVINO's ReduceMean gave 0 (silently wrong)."""
    module = OpModule(fn)
    x = torch.randn(0, 3)
    got, placement = _on_npu(module, x)
    want = _eager(module, x)
    assert not placement.off_device, placement.line()
    assert len(got) == len(want)
    for have, expected in zip(got, want):
        assert np.isnan(expected).all()
        np.testing.assert_array_equal(have, expected)  # NaN where torch has NaN
