"""Ops a backend does not run natively go through the fallback policy and come back to the device."""

from __future__ import annotations

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.plugins.backend import ARRAY_API_FUNCTIONS
from neurenix_core.testing.reference import assert_close, on_device

_CANDIDATES = ("cumulative_sum", "sort", "flip", "sum", "exp", "negative")


def _missing(device: nx.Device) -> str:
    ops = nx.backend(device).ops
    for name in _CANDIDATES:
        if name in ARRAY_API_FUNCTIONS and name not in ops:
            return name
    pytest.skip(f"{device}: backend {nx.backend(device).name} runs {', '.join(_CANDIDATES)} natively; no fallback to try")


def test_fallback_stays_on_device_and_is_counted(nx_device: nx.Device) -> None:
    name = _missing(nx_device)
    backend = nx.backend(nx_device).name
    a = np.array([[3.0, 1.0, 2.0]])
    x = on_device(a, "float32", nx_device)
    before = nx.fallback_stats().get(backend, {}).get(name, 0)
    out = getattr(nx, name)(x, axis=-1) if name in ("cumulative_sum", "sort", "flip", "sum") else getattr(nx, name)(x)
    assert out.device == nx_device
    ref = {"cumulative_sum": np.cumsum(a, axis=-1), "sort": np.sort(a, axis=-1), "flip": np.flip(a, axis=-1),
           "sum": a.sum(axis=-1), "exp": np.exp(a), "negative": -a}.get(name)
    if ref is not None:
        assert_close(out, ref, nx_device, "float32", scale=20)
    assert nx.fallback_stats()[backend][name] == before + 1


def test_fallback_policy_error(nx_device: nx.Device) -> None:
    name = _missing(nx_device)
    x = on_device(np.array([[3.0, 1.0, 2.0]]), "float32", nx_device)
    with nx.fallback_policy("error"), pytest.raises(nx.FallbackError, match=str(nx_device)):
        getattr(nx, name)(x)
