"""Byte accounting: owners charged once, views free, release on free, limits refuse cleanly."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import neurenix_core as nx


@pytest.fixture(autouse=True)
def _clean() -> None:
    gc.collect()
    yield
    nx.set_memory_limit("cpu", None)


def used() -> int:
    gc.collect()
    return nx.memory_stats("cpu").in_use


def test_views_do_not_double_count_and_keep_the_buffer() -> None:
    base = used()
    x = nx.zeros((100, 10))
    assert used() - base == 4000
    views = [x[1:5], x.T, nx.reshape(x, (1000,)), x[..., 0], nx.astype(x, nx.float32, copy=False)]
    assert used() - base == 4000, "views share the owner's buffer"
    del x
    assert used() - base == 4000, "the buffer lives while a view uses it"
    del views
    assert used() == base


def test_copies_are_charged_and_released() -> None:
    base = used()
    x = nx.ones((10, 10))
    y = x.to("cpu")
    z = x[x > 0.0]  # boolean indexing copies
    assert used() - base == 400 + 400 + 400
    del x, y, z
    assert used() == base


def test_peak_and_live_counts() -> None:
    base = nx.memory_stats("cpu")
    x = nx.zeros(1000)
    stats = nx.memory_stats("cpu")
    assert stats.peak >= base.in_use + 4000
    assert stats.allocations == base.allocations + 1
    del x
    gc.collect()
    assert nx.memory_stats("cpu").allocations == base.allocations


def test_limit_refuses_and_names_everything() -> None:
    keep = nx.arange(100, dtype=nx.float32)
    now = used()
    nx.set_memory_limit("cpu", now + 1000)
    with pytest.raises(nx.OutOfMemoryError) as info:
        nx.zeros((1000,))
    err = info.value
    assert (err.device, err.limit, err.in_use, err.requested) == ("cpu:0", now + 1000, now, 4000)
    assert "cpu:0" in str(err) and str(now + 1000) in str(err) and "4000" in str(err)
    with pytest.raises(nx.OutOfMemoryError):
        nx.concat([keep] * 20)  # an op result past the limit
    with pytest.raises(nx.OutOfMemoryError):
        nx.asarray(np.zeros(2000))
    assert used() == now
    np.testing.assert_array_equal(keep.numpy(), np.arange(100, dtype=np.float32))
    assert nx.memory_stats("cpu").limit == now + 1000
    nx.set_memory_limit("cpu", None)
    assert nx.zeros((1000,)).shape == (1000,)


def test_bad_limits_and_devices() -> None:
    with pytest.raises(nx.ConfigurationError):
        nx.set_memory_limit("cpu", -5)
    with pytest.raises(nx.DeviceNotFoundError):
        nx.set_memory_limit("cpu:3", 100)
    with pytest.raises(nx.InvalidDeviceError):
        nx.memory_stats("cpu:x")


def test_accounting_is_exact_under_threads() -> None:
    base = used()

    def work() -> None:
        a = nx.ones((8, 8))
        for _ in range(2000):
            a = a + 1.0
            b = a[:4]
            del b

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert used() == base


def test_copy_deepcopy_pickle_go_through_the_accounting() -> None:
    import copy
    import pickle

    base = used()
    x = nx.arange(10, dtype=nx.float32)
    clones = [copy.copy(x), copy.deepcopy(x), pickle.loads(pickle.dumps(x))]
    assert used() - base == 4 * 40
    for c in clones:
        assert c.device == x.device and c.tolist() == x.tolist()
        assert not np.shares_memory(c.native, x.native)
    del x, clones, c
    assert used() == base
