"""Creation functions place data on the device asked for, with the right dtype and values."""

from __future__ import annotations

import numpy as np

import neurenix_core as nx
from neurenix_core.testing.reference import assert_close, on_device


def test_creation_functions(nx_device: nx.Device) -> None:
    d = nx_device
    assert_close(nx.zeros((2, 3), device=d), np.zeros((2, 3)), d, "float32")
    assert_close(nx.ones(4, device=d), np.ones(4), d, "float32")
    assert_close(nx.full((2, 2), 7.0, device=d), np.full((2, 2), 7.0), d, "float32")
    assert_close(nx.empty((3,), device=d), np.zeros(3), d, "float32")
    assert_close(nx.arange(0, 10, 3, dtype=nx.float32, device=d), np.arange(0, 10, 3), d, "float32")
    assert_close(nx.linspace(0.0, 1.0, 5, device=d), np.linspace(0.0, 1.0, 5), d, "float32")
    assert_close(nx.eye(3, 4, k=1, device=d), np.eye(3, 4, k=1), d, "float32")


def test_like_functions_and_tensor_spelling(nx_device: nx.Device) -> None:
    x = on_device(np.arange(6.0).reshape(2, 3), "float32", nx_device)
    assert_close(nx.zeros_like(x), np.zeros((2, 3)), nx_device, "float32")
    assert_close(nx.ones_like(x), np.ones((2, 3)), nx_device, "float32")
    assert_close(nx.full_like(x, 2.5), np.full((2, 3), 2.5), nx_device, "float32")
    assert_close(nx.empty_like(x), np.zeros((2, 3)), nx_device, "float32")
    seed_style = nx.Tensor([[1, 2], [3, 4]], device=nx_device)
    assert seed_style.device == nx_device
    assert seed_style.shape == (2, 2)
    np.testing.assert_array_equal(seed_style.numpy(), [[1, 2], [3, 4]])


def test_asarray_defaults_and_copy(nx_device: nx.Device) -> None:
    assert nx.asarray([1.0, 2.0], device=nx_device).dtype == nx.float32
    assert nx.asarray([True, False], device=nx_device).dtype == nx.bool
    source = np.arange(4.0, dtype=np.float32)
    t = nx.asarray(source, device=nx_device)
    source[0] = 100.0  # the tensor owns a copy: later writes to the caller's array do not leak in
    assert float(t[0]) == 0.0
    same = nx.asarray(t)
    assert same is t
    copied = nx.asarray(t, copy=True)
    assert copied is not t and copied.device == nx_device
    assert_close(copied, np.arange(4.0), nx_device, "float32")
