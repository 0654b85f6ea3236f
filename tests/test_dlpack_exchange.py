"""DLPack: zero copy between neurenix (CPU) and NumPy, PyTorch and JAX; clear errors otherwise."""

from __future__ import annotations

import numpy as np
import pytest

import neurenix_core as nx


def test_numpy_zero_copy_both_ways() -> None:
    t = nx.arange(6, dtype=nx.float32)
    a = np.from_dlpack(t)
    assert np.shares_memory(a, t.native)
    src = np.arange(4, dtype=np.float64)
    u = nx.from_dlpack(src)
    assert np.shares_memory(u.native, src) and u.device == nx.Device("cpu:0")
    src[0] = 42.0
    assert float(u[0]) == 42.0
    c = nx.from_dlpack(src, copy=True)
    assert not np.shares_memory(c.native, src)


def test_torch_zero_copy_both_ways() -> None:
    torch = pytest.importorskip("torch")
    t = nx.asarray([[1.0, 2.0], [3.0, 4.0]])
    pt = torch.from_dlpack(t)
    assert pt.data_ptr() == t.native.ctypes.data
    pt[0, 0] = 10.0
    assert float(t[0, 0]) == 10.0
    back = nx.from_dlpack(torch.arange(3, dtype=torch.int32))
    assert back.dtype == nx.int32 and back.tolist() == [0, 1, 2]
    strided = torch.arange(12.0).reshape(3, 4)[:, ::2]  # non-contiguous but positive strides: fine
    np.testing.assert_array_equal(nx.from_dlpack(strided).numpy(), strided.numpy())


def test_jax_exchange() -> None:
    jnp = pytest.importorskip("jax.numpy")
    t = nx.asarray([1.0, 2.0, 3.0])
    j = jnp.from_dlpack(t)
    np.testing.assert_array_equal(np.asarray(j), [1.0, 2.0, 3.0])
    back = nx.from_dlpack(jnp.arange(4.0))
    assert back.device == nx.Device("cpu:0") and back.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_non_contiguous_dlpack_is_a_clear_error() -> None:
    flipped = nx.flip(nx.arange(5, dtype=nx.float32))
    assert flipped.native.strides[0] < 0, "NumPy's flip is a negative-stride view"
    with pytest.raises(nx.TransferError, match=r"cpu:0.*negative strides.*copy=True"):
        np.from_dlpack(flipped)
    torch = pytest.importorskip("torch")
    with pytest.raises(nx.TransferError, match="non-contiguous"):
        torch.from_dlpack(flipped)
    np.testing.assert_array_equal(flipped.numpy(), [4.0, 3.0, 2.0, 1.0, 0.0]), "nothing lost"
    copy = nx.asarray(flipped, copy=True)
    assert np.from_dlpack(copy).tolist() == [4.0, 3.0, 2.0, 1.0, 0.0]
    # Importing a negative-stride NumPy view works (zero copy) and reads the right values.
    reversed_ = np.arange(5.0)[::-1]
    np.testing.assert_array_equal(nx.from_dlpack(reversed_).numpy(), reversed_)


def test_from_dlpack_rejects_non_producers_and_same_device_shares() -> None:
    with pytest.raises(nx.TransferError, match="__dlpack__"):
        nx.from_dlpack([1, 2, 3])
    t = nx.ones(3)
    same = nx.from_dlpack(t)
    assert np.shares_memory(same.native, t.native)
    with pytest.raises(nx.TransferError):
        nx.asarray([1, 2], copy=False)
    shared = nx.asarray(np.ones(3, dtype=np.float32), copy=False)
    assert shared.dtype == nx.float32


def test_array_protocol_copies_unless_sharing_is_asked() -> None:
    t = nx.asarray([1.0, 2.0])
    copied = np.asarray(t)
    copied[0] = 5.0
    assert float(t[0]) == 1.0, "np.asarray(tensor) is a copy by default"
    shared = np.asarray(t, copy=False)
    assert np.shares_memory(shared, t.native)
    assert np.asarray(t, dtype=np.float64).dtype == np.float64
