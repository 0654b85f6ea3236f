"""Indexing, boolean masks, assignment and in-place operators stay on the device."""

from __future__ import annotations

import numpy as np

import neurenix_core as nx
from neurenix_core.testing.reference import assert_close, on_device

A = np.arange(12, dtype=np.float64).reshape(3, 4)


def test_basic_and_boolean_indexing(nx_device: nx.Device) -> None:
    x = on_device(A, "float32", nx_device)
    assert_close(x[1, ...], A[1], nx_device, "float32")
    assert_close(x[:, 1:3], A[:, 1:3], nx_device, "float32")
    assert_close(x[::2, 1::2], A[::2, 1::2], nx_device, "float32")
    assert_close(x[None, ..., 0], A[None, ..., 0], nx_device, "float32")
    assert_close(x[x > 5.0], A[A > 5.0], nx_device, "float32")
    assert float(x[2, 3]) == 11.0


def test_negative_step_slices(nx_device: nx.Device) -> None:
    x = on_device(A, "float32", nx_device)
    assert_close(x[::-1, :], A[::-1], nx_device, "float32")
    assert_close(x[:, ::-2], A[:, ::-2], nx_device, "float32")


def test_setitem_and_inplace(nx_device: nx.Device) -> None:
    x = on_device(A, "float32", nx_device)
    x[0, 0] = 100.0
    x[1, :] = on_device(np.full(4, -1.0), "float32", nx_device)
    x[x > 9.0] = 0.0
    expected = A.copy()
    expected[0, 0] = 100.0
    expected[1] = -1.0
    expected[expected > 9.0] = 0.0
    assert_close(x, expected, nx_device, "float32")
    before = x
    x += 1.0
    x *= on_device(np.full(4, 2.0), "float32", nx_device)
    assert x is before and x.device == nx_device
    assert_close(x, (expected + 1.0) * 2.0, nx_device, "float32")
