"""Copies between the device and the host; DLPack where the backend declares it."""

from __future__ import annotations

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.testing.reference import assert_close, on_device


def test_to_cpu_and_back_is_a_real_copy(nx_device: nx.Device) -> None:
    x = on_device(np.arange(6.0).reshape(2, 3), "float32", nx_device)
    host = x.to("cpu")
    assert host.device == nx.Device("cpu:0")
    back = host.to(nx_device)
    assert back.device == nx_device and back is not x
    host[0, 0] = 42.0  # the source is untouched by writes to the copy
    assert_close(x, np.arange(6.0).reshape(2, 3), nx_device, "float32")
    assert_close(back, np.arange(6.0).reshape(2, 3), nx_device, "float32")


def test_numpy_and_array_protocol(nx_device: nx.Device) -> None:
    x = on_device(np.arange(4.0), "float32", nx_device)
    out = x.numpy()
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(x), np.arange(4.0, dtype=np.float32))
    assert x.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_dlpack_roundtrip(nx_device: nx.Device) -> None:
    manifest = nx.backend(nx_device).manifest
    if manifest is None or not manifest.capabilities.dlpack:
        pytest.skip(f"{nx_device}: backend does not declare DLPack (Capabilities.dlpack=False)")
    x = on_device(np.arange(6.0).reshape(2, 3), "float32", nx_device)
    kind, _ = x.__dlpack_device__()
    if kind == 1:  # host memory: NumPy can import it
        np.testing.assert_array_equal(np.from_dlpack(x), np.arange(6.0).reshape(2, 3))
    y = nx.from_dlpack(x, device=nx_device)
    assert_close(y, np.arange(6.0).reshape(2, 3), nx_device, "float32")
