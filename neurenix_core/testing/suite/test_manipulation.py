"""Manipulation functions: values, shapes and the device of the result."""

from __future__ import annotations

import numpy as np

import neurenix_core as nx
from neurenix_core.testing.reference import assert_close, on_device

A = np.arange(24, dtype=np.float64).reshape(2, 3, 4)


def _x(device: nx.Device) -> nx.Tensor:
    return on_device(A, "float32", device)


def test_reshape_permute_expand_squeeze(nx_device: nx.Device) -> None:
    x = _x(nx_device)
    assert_close(nx.reshape(x, (6, 4)), A.reshape(6, 4), nx_device, "float32")
    assert_close(nx.reshape(x, (-1,)), A.reshape(-1), nx_device, "float32")
    assert_close(nx.permute_dims(x, (2, 0, 1)), A.transpose(2, 0, 1), nx_device, "float32")
    assert_close(nx.expand_dims(x, axis=1), A[:, None], nx_device, "float32")
    assert_close(nx.squeeze(nx.expand_dims(x, axis=0), axis=0), A, nx_device, "float32")
    assert_close(nx.moveaxis(x, 0, -1), np.moveaxis(A, 0, -1), nx_device, "float32")


def test_flip_roll_tile_repeat_broadcast(nx_device: nx.Device) -> None:
    x = _x(nx_device)
    assert_close(nx.flip(x, axis=1), np.flip(A, axis=1), nx_device, "float32")
    assert_close(nx.flip(x), np.flip(A), nx_device, "float32")
    assert_close(nx.roll(x, 2, axis=2), np.roll(A, 2, axis=2), nx_device, "float32")
    assert_close(nx.tile(x, (1, 2, 1)), np.tile(A, (1, 2, 1)), nx_device, "float32")
    assert_close(nx.repeat(x, 2, axis=0), np.repeat(A, 2, axis=0), nx_device, "float32")
    row = on_device(np.arange(4.0), "float32", nx_device)
    assert_close(nx.broadcast_to(row, (3, 4)), np.broadcast_to(np.arange(4.0), (3, 4)), nx_device, "float32")
    p, q = nx.broadcast_arrays(on_device(np.ones((3, 1)), "float32", nx_device), row)
    assert p.shape == q.shape == (3, 4)


def test_concat_stack_unstack(nx_device: nx.Device) -> None:
    x = _x(nx_device)
    assert_close(nx.concat([x, x], axis=1), np.concatenate([A, A], axis=1), nx_device, "float32")
    assert_close(nx.concat((x, x), axis=None), np.concatenate([A.ravel(), A.ravel()]), nx_device, "float32")
    assert_close(nx.stack([x, x, x], axis=-1), np.stack([A, A, A], axis=-1), nx_device, "float32")
    parts = nx.unstack(x, axis=1)
    assert len(parts) == 3
    for i, part in enumerate(parts):
        assert_close(part, A[:, i], nx_device, "float32")


def test_tril_triu_meshgrid(nx_device: nx.Device) -> None:
    m = on_device(np.arange(9.0).reshape(3, 3), "float32", nx_device)
    assert_close(nx.tril(m), np.tril(np.arange(9.0).reshape(3, 3)), nx_device, "float32")
    assert_close(nx.triu(m, k=1), np.triu(np.arange(9.0).reshape(3, 3), k=1), nx_device, "float32")
    gx, gy = nx.meshgrid(on_device(np.arange(3.0), "float32", nx_device), on_device(np.arange(2.0), "float32", nx_device))
    ex, ey = np.meshgrid(np.arange(3.0), np.arange(2.0))
    assert_close(gx, ex, nx_device, "float32")
    assert_close(gy, ey, nx_device, "float32")
