"""Searching, sorting and set functions."""

from __future__ import annotations

import numpy as np

import neurenix_core as nx
from neurenix_core.testing.reference import assert_close, on_device

V = np.array([[3.0, 1.0, 2.0, 1.0], [0.5, 4.0, 4.0, -1.0]])


def test_argmax_argmin_where_nonzero(nx_device: nx.Device) -> None:
    x = on_device(V, "float32", nx_device)
    assert_close(nx.argmax(x, axis=1), np.argmax(V, axis=1), nx_device, check_dtype=False)
    assert_close(nx.argmin(x, axis=0), np.argmin(V, axis=0), nx_device, check_dtype=False)
    assert int(nx.argmax(x)) == int(np.argmax(V))
    assert_close(nx.where(x > 1.0, x, 0.0), np.where(V > 1.0, V, 0.0), nx_device, "float32")
    assert_close(nx.where(x > 1.0, x, -x), np.where(V > 1.0, V, -V), nx_device, "float32")
    rows, cols = nx.nonzero(x > 1.5)
    er, ec = np.nonzero(V > 1.5)
    assert_close(rows, er, nx_device, check_dtype=False)
    assert_close(cols, ec, nx_device, check_dtype=False)
    assert int(nx.count_nonzero(x > 1.5)) == int(np.count_nonzero(V > 1.5))


def test_sort_argsort(nx_device: nx.Device) -> None:
    x = on_device(V, "float32", nx_device)
    assert_close(nx.sort(x, axis=1), np.sort(V, axis=1), nx_device, "float32")
    assert_close(nx.sort(x, axis=1, descending=True), -np.sort(-V, axis=1), nx_device, "float32")
    assert_close(nx.argsort(x, axis=1, stable=True), np.argsort(V, axis=1, kind="stable"), nx_device, check_dtype=False)
    sorted_ = on_device(np.array([1.0, 2.0, 2.0, 5.0]), "float32", nx_device)
    probe = on_device(np.array([2.0, 0.0, 6.0]), "float32", nx_device)
    assert_close(nx.searchsorted(sorted_, probe), np.searchsorted([1.0, 2.0, 2.0, 5.0], [2.0, 0.0, 6.0]), nx_device, check_dtype=False)
    assert_close(nx.searchsorted(sorted_, probe, side="right"), np.searchsorted([1.0, 2.0, 2.0, 5.0], [2.0, 0.0, 6.0], side="right"), nx_device, check_dtype=False)


def test_unique_named_tuples(nx_device: nx.Device) -> None:
    data = np.array([3.0, 1.0, 3.0, 2.0, 1.0, 3.0])
    x = on_device(data, "float32", nx_device)
    values, counts = nx.unique_counts(x)
    assert_close(values, [1.0, 2.0, 3.0], nx_device, "float32")
    assert_close(counts, [2, 1, 3], nx_device, check_dtype=False)
    result = nx.unique_all(x)
    assert tuple(type(result)._fields) == ("values", "indices", "inverse_indices", "counts")
    assert_close(result.values[result.inverse_indices], data, nx_device, "float32")
    assert_close(x[result.indices], [1.0, 2.0, 3.0], nx_device, "float32")
    inv = nx.unique_inverse(x)
    assert_close(inv.inverse_indices, [2, 0, 2, 1, 0, 2], nx_device, check_dtype=False)
    assert_close(nx.unique_values(x), [1.0, 2.0, 3.0], nx_device, "float32")


def test_take(nx_device: nx.Device) -> None:
    x = on_device(V, "float32", nx_device)
    idx = on_device(np.array([3, 0]), "int64" if nx.backend(nx_device).supports_dtype(nx.int64) else "int32", nx_device)
    assert_close(nx.take(x, idx, axis=1), np.take(V, [3, 0], axis=1), nx_device, "float32")
    order = nx.argsort(x, axis=1)
    assert_close(nx.take_along_axis(x, order, axis=1), np.sort(V, axis=1), nx_device, "float32")
