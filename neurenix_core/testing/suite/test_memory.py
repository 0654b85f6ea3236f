"""Every backend accounts the bytes it holds; limits raise OutOfMemoryError and lose nothing."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.testing.reference import on_device


def test_allocation_is_charged_and_released(nx_device: nx.Device) -> None:
    gc.collect()
    base = nx.memory_stats(nx_device).in_use
    x = nx.zeros((64, 64), device=nx_device)
    assert nx.memory_stats(nx_device).in_use - base == 64 * 64 * 4
    view = x[:32, :]
    # A slice shares x's buffer (charged nothing) or, on backends without views (JAX), is a new
    # buffer charged exactly its own size: never the owner's bytes twice.
    sliced = nx.memory_stats(nx_device).in_use - base - 64 * 64 * 4
    assert sliced in (0, 32 * 64 * 4), f"a slice of 8192 bytes changed the accounting by {sliced} bytes"
    y = x + 1.0
    assert nx.memory_stats(nx_device).in_use - base == 2 * 64 * 64 * 4 + sliced
    del x, view, y
    gc.collect()
    assert nx.memory_stats(nx_device).in_use == base


def test_limit_raises_and_keeps_existing_tensors(nx_device: nx.Device) -> None:
    gc.collect()
    kept = on_device(np.arange(16.0), "float32", nx_device)
    used = nx.memory_stats(nx_device).in_use
    nx.set_memory_limit(nx_device, used + 1024)
    try:
        with pytest.raises(nx.OutOfMemoryError) as info:
            nx.ones((1024, 1024), device=nx_device)
        err = info.value
        assert err.device == str(nx_device) and err.limit == used + 1024 and err.requested == 1024 * 1024 * 4
        assert str(nx_device) in str(err) and "set_memory_limit" in str(err)
        with pytest.raises(nx.OutOfMemoryError):
            nx.concat([kept] * 64)  # an op result over the limit
        assert nx.memory_stats(nx_device).in_use == used
        np.testing.assert_array_equal(kept.numpy(), np.arange(16.0, dtype=np.float32))
        small = kept + 1.0  # still fits
        assert small.device == nx_device
    finally:
        nx.set_memory_limit(nx_device, None)
    assert nx.memory_stats(nx_device).limit is None
