"""Fixes found by the transformers sweep on edgetpu:0 (benchmarks/transformers_sweep.py, issue
#41), each on a module as small as the failure, edgetpu:0 against eager PyTorch."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import neurenix_core as nx


def empty_slices() -> Any:
    """DeepSeek-V4's rotary split on a tiny head: ``x[..., :-8]`` of an axis of 8 is empty, then
    joined again (an empty concat input), beside a non-empty slice and a split."""

    class EmptySlices(torch.nn.Module):
        def forward(self, x: Any) -> Any:
            y = x * 2
            empty = y[..., :-8]
            return empty, torch.cat([empty, y[..., :3]], dim=-1), y[:, 4:], torch.split(y, [8, 0], dim=-1)[1] + 1

    return EmptySlices().eval()


@pytest.mark.parametrize("kernels", ["xnnpack", "reference"])
def test_empty_slices_stay_empty(edgetpu: Any, kernels: str) -> None:
    """An empty slice's result has no elements on every LiteRT kernel set. XNNPACK (the default)
    read the size 0 of begin == end as "to the end" and returned the rest of the axis: silently
    (2, 4, 8, 8) for (2, 4, 8, 0), which only a shape check downstream noticed."""
    module = empty_slices()
    x = torch.randn(2, 4, 8, 8, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = [t.numpy() for t in module(x)]
    compiled = nx.compile(nx.nn.from_torch(module, (x,), static=True), device="edgetpu:0", progress=False, kernels=kernels)
    got = [np.asarray(t.numpy()) for t in compiled(x.numpy())]
    assert not compiled.placement.off_device, compiled.placement.line()  # every slice is in the TFLite model
    assert [g.shape for g in got] == [w.shape for w in want] == [(2, 4, 8, 0), (2, 4, 8, 3), (2, 0, 8, 8), (2, 4, 8, 0)]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def masked() -> Any:
    """GLM-5 Next's ``x * mask``: float arithmetic with a bool operand (PyTorch promotes it), the
    mask computed on cpu:0 (edgetpu:0 declares no comparison) and fed to the device segment."""

    class Masked(torch.nn.Module):
        def forward(self, x: Any) -> Any:
            mask = x > 0
            return x * mask, mask * x, x + mask, mask + 1

    return Masked().eval()


def test_bool_operand_of_float_arithmetic(edgetpu: Any) -> None:
    """A bool (or integer) operand of MUL/ADD is cast to the result's type in the TFLite model;
    LiteRT refused the model at prepare (``input1->type != input2->type (FLOAT32 != BOOL)``)."""
    module = masked()
    x = torch.randn(2, 4, 8, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = [t.numpy() for t in module(x)]
    compiled = nx.compile(nx.nn.from_torch(module, (x,), static=True), device="edgetpu:0", progress=False)
    got = [np.asarray(t.numpy()) for t in compiled(x.numpy())]
    placement = compiled.placement
    assert not placement.execution and [o.op for o in placement.off_device] == ["greater"], placement.line()
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
