"""Statistical and cumulative functions against float64 NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.testing.reference import assert_close, on_device, require_dtype, rounded

AXES = [None, 0, 1, (0, 2), -1]


def _data(dtype: str) -> np.ndarray:
    return rounded(np.random.default_rng(21).uniform(0.5, 2.0, (3, 4, 5)), dtype)


@pytest.mark.parametrize("dtype", ("float32", "float16", "bfloat16"))
@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("name", ("sum", "mean", "max", "min", "prod"))
def test_reduction(nx_device: nx.Device, name: str, axis: int | tuple[int, ...] | None, dtype: str) -> None:
    require_dtype(nx_device, dtype)
    a = _data(dtype)
    out = getattr(nx, name)(on_device(a, dtype, nx_device), axis=axis)
    expected = getattr(np, name)(a, axis=axis)
    n = a.size if axis is None else int(np.prod([a.shape[i] for i in np.atleast_1d(axis)]))
    assert_close(out, expected, nx_device, dtype, scale=float(np.max(np.abs(expected))) * (1 + n / 16))


@pytest.mark.parametrize("correction", (0, 1))
def test_std_var(nx_device: nx.Device, correction: int) -> None:
    a = _data("float32")
    x = on_device(a, "float32", nx_device)
    assert_close(nx.var(x, axis=1, correction=correction), np.var(a, axis=1, ddof=correction), nx_device, "float32", scale=4)
    assert_close(nx.std(x, correction=correction), np.std(a, ddof=correction), nx_device, "float32", scale=4)


def test_keepdims_all_any_cumulative(nx_device: nx.Device) -> None:
    a = _data("float32")
    x = on_device(a, "float32", nx_device)
    assert_close(nx.sum(x, axis=1, keepdims=True), a.sum(axis=1, keepdims=True), nx_device, "float32", scale=8)
    assert bool(nx.all(x > 0.0)) is True
    assert bool(nx.any(x > 1.9)) == bool(np.any(a > 1.9))
    assert_close(nx.all(x > 1.0, axis=0), np.all(a > 1.0, axis=0), nx_device, "bool")
    assert_close(nx.cumulative_sum(x, axis=2), np.cumsum(a, axis=2), nx_device, "float32", scale=10)
    assert_close(nx.cumulative_prod(x, axis=0), np.cumprod(a, axis=0), nx_device, "float32", scale=8)
    assert_close(nx.diff(x, axis=-1), np.diff(a, axis=-1), nx_device, "float32", scale=2)


def test_integer_sum_dtype(nx_device: nx.Device) -> None:
    require_dtype(nx_device, "int32")
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    out = nx.sum(on_device(a, "int32", nx_device), axis=0)
    np.testing.assert_array_equal(out.numpy(), a.sum(axis=0))
    assert out.device == nx_device
    assert nx.isdtype(out.dtype, "integral")
