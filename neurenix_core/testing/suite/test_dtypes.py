"""Declared dtypes round-trip; casts and type promotion follow the array API tables."""

from __future__ import annotations

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.tensor.dtypes import DTYPES
from neurenix_core.testing.reference import assert_close, on_device, require_dtype

VALUES = np.array([0, 1, 2, 3, 5, 7])


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_declared_dtype_roundtrip(nx_device: nx.Device, dtype: str) -> None:
    dt = require_dtype(nx_device, dtype)
    host = VALUES.astype(dt)
    t = nx.asarray(host, device=nx_device)
    assert t.dtype == dt and t.device == nx_device
    np.testing.assert_array_equal(t.numpy(), host)
    assert t.numpy().dtype == dt


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int8", "int32", "float64"])
def test_astype(nx_device: nx.Device, dtype: str) -> None:
    dt = require_dtype(nx_device, dtype)
    x = on_device(np.array([0.0, 1.0, 2.5, -3.0, 100.0]), "float32", nx_device)
    out = nx.astype(x, dt)
    assert out.device == nx_device and out.dtype == dt
    np.testing.assert_array_equal(out.numpy(), np.array([0.0, 1.0, 2.5, -3.0, 100.0], dtype=np.float32).astype(dt))


PROMOTIONS = [
    ("int8", "int16", "int16"), ("int32", "int64", "int64"), ("uint8", "int16", "int16"),
    ("float16", "float32", "float32"), ("float32", "float64", "float64"), ("uint8", "uint16", "uint16"),
    ("bool", "bool", "bool"), ("int8", "uint8", "int16"),
]


@pytest.mark.parametrize(("a", "b", "want"), PROMOTIONS, ids=[f"{a}+{b}" for a, b, _ in PROMOTIONS])
def test_promotion_table(nx_device: nx.Device, a: str, b: str, want: str) -> None:
    for dt in (a, b, want):
        require_dtype(nx_device, dt)
    x = on_device(np.array([1, 0, 1]), a, nx_device)
    y = on_device(np.array([1, 1, 0]), b, nx_device)
    name = "logical_or" if want == "bool" else "add"
    out = getattr(nx, name)(x, y)
    assert out.dtype == nx.result_type(x, y) == DTYPES[want]
    assert_close(out, np.array([1, 1, 1]) if want == "bool" else np.array([2, 1, 1]), nx_device, want)


def test_namespace_info_matches_backend(nx_device: nx.Device) -> None:
    info = nx.__array_namespace_info__()
    declared = info.dtypes(device=nx_device)
    backend = nx.backend(nx_device)
    assert declared, f"{nx_device} declares no dtypes"
    for name, dt in declared.items():
        assert backend.supports_dtype(dt), name
    defaults = info.default_dtypes(device=nx_device)
    assert defaults["real floating"] in declared.values()
    caps = info.capabilities(device=nx_device)
    assert caps["neurenix"]["backend"] == backend.name
    assert nx_device in info.devices()
