"""Bad input gets a clear NeurenixError naming the device; nothing is lost."""

from __future__ import annotations

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.tensor.dtypes import DTYPES
from neurenix_core.testing.reference import on_device


def test_shape_mismatch(nx_device: nx.Device) -> None:
    a = on_device(np.ones((2, 3)), "float32", nx_device)
    b = on_device(np.ones((4, 5)), "float32", nx_device)
    with pytest.raises(nx.ShapeError, match=str(nx_device)):
        a + b
    with pytest.raises(nx.ShapeError, match=str(nx_device)):
        a @ b
    np.testing.assert_array_equal(a.numpy(), np.ones((2, 3)))


def test_mixed_devices(nx_device: nx.Device) -> None:
    others = [d for d in nx.devices() if d != nx_device]
    if not others:
        pytest.skip("only one device is available: mixing devices cannot be tried")
    a = on_device(np.ones(3), "float32", nx_device)
    b = nx.asarray(np.ones(3, dtype=np.float32), device=others[0])
    with pytest.raises(nx.DeviceMismatchError, match=r"\.to\("):
        a + b
    with pytest.raises(nx.DeviceMismatchError):
        nx.concat([a, b])
    with pytest.raises(nx.DeviceMismatchError):
        a[b > 0.0]


def test_unsupported_dtype(nx_device: nx.Device) -> None:
    backend = nx.backend(nx_device)
    missing = [dt for dt in DTYPES.values() if not backend.supports_dtype(dt)]
    if not missing:
        pytest.skip(f"{nx_device} supports every neurenix dtype")
    with pytest.raises(nx.UnsupportedDTypeError, match=str(nx_device)):
        nx.zeros((2,), dtype=missing[0], device=nx_device)
    x = on_device(np.ones(2), "float32", nx_device)
    with pytest.raises(nx.UnsupportedDTypeError, match=str(nx_device)):
        nx.astype(x, missing[0])


def test_unknown_and_out_of_range_devices(nx_device: nx.Device) -> None:
    with pytest.raises(nx.InvalidDeviceError):
        nx.zeros((2,), device="not a device")
    with pytest.raises(nx.NeurenixError):
        nx.zeros((2,), device="nosuchtype:0")
    with pytest.raises(nx.DeviceNotFoundError, match=str(nx_device.type)):
        nx.zeros((2,), device=f"{nx_device.type}:99")
