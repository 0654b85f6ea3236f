"""Eager tensors on the (emulated) TPU: JAX arrays committed to one device, jax.numpy ops, transfers."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.device import Device, DeviceType


def test_tensors_are_committed_jax_arrays(four_devices: Any) -> None:
    import jax

    t = nx.Tensor([1.0, 2.0, 3.0], device=Device(DeviceType.TPU, 2))
    assert isinstance(t.native, jax.Array)
    assert t.native.devices() == {four_devices.jax_devices[2]} and t.native.committed
    assert t.device == Device("tpu", 2) and t.dtype == nx.float32
    u = t * 2 + 1
    assert u.native.devices() == {four_devices.jax_devices[2]} and u.device == Device("tpu", 2)
    np.testing.assert_array_equal(u.numpy(), [3.0, 5.0, 7.0])


def test_seed_matmul(tpu: Any) -> None:
    dev = Device(DeviceType.TPU, 0)
    a = nx.Tensor([[1, 2], [3, 4]], device=dev)
    b = nx.Tensor([[5, 6], [7, 8]], device=dev)
    c = nx.matmul(a, b)
    np.testing.assert_array_equal(c.numpy(), [[19, 22], [43, 50]])
    assert c.dtype == nx.int64, "Python ints keep neurenix's int64 default on the TPU (no silent int32)"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float64", "int64", "int8", "bool", "complex64"])
def test_dtypes_round_trip_unchanged(tpu: Any, dtype: str) -> None:
    host = (np.arange(6).reshape(2, 3) % 2).astype(nx.float32).astype(np.dtype(getattr(nx, dtype)))
    t = nx.asarray(host, device="tpu:0")
    assert t.dtype == host.dtype
    back = t.numpy()
    assert back.dtype == host.dtype and np.array_equal(back, host)


def test_host_array_is_copied(tpu: Any) -> None:
    host = np.zeros(4, np.float32)
    t = nx.asarray(host, device="tpu:0")
    host[0] = 5
    assert t.numpy()[0] == 0


def test_setitem_is_functional_but_visible(tpu: Any) -> None:
    t = nx.zeros((2, 3), device="tpu:0")
    t[1, 2] = 7.0
    t[0] = nx.ones(3, device="tpu:0")
    np.testing.assert_array_equal(t.numpy(), [[1, 1, 1], [0, 0, 7]])


def test_transfers_copy_between_devices_and_host(four_devices: Any) -> None:
    a = nx.asarray(np.arange(4, dtype=np.float32), device="tpu:0")
    b = a.to("tpu:3")
    assert b.native.devices() == {four_devices.jax_devices[3]} and b.device == Device("tpu", 3)
    c = a.to("cpu")
    assert isinstance(c.native, np.ndarray)
    d = nx.from_dlpack(a.native, device="tpu:1")  # JAX exports DLPack; the core imports it
    assert d.device == Device("tpu", 1)
    for t in (b, c, d):
        np.testing.assert_array_equal(t.numpy(), [0, 1, 2, 3])
    host = np.from_dlpack(a)  # a neurenix tpu tensor is a DLPack producer
    np.testing.assert_array_equal(host, [0, 1, 2, 3])


def test_device_info(four_devices: Any) -> None:
    info = four_devices.device_info(1)
    assert info["device"] == "tpu:1" and info["emulated"] is True
    assert info["platform"] == "cpu" and "emulated" in info["chip_version"]
    assert info["cores"] == 1 and "jax" in info
    assert four_devices.device_count() == 4


def test_eager_nn_ops_match_numpy(tpu: Any) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 5)).astype(np.float32)
    w = rng.standard_normal((3, 5)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    ops = tpu.ops
    xt, wt, bt = (tpu._from_host(a, 0) for a in (x, w, b))
    np.testing.assert_allclose(np.asarray(ops["nn.linear"](xt, wt, bt)), x @ w.T + b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(ops["nn.relu"](xt)), np.maximum(x, 0))
    sm = np.asarray(ops["nn.softmax"](xt, 1))
    np.testing.assert_allclose(sm.sum(axis=1), 1.0, rtol=1e-6)
    img = rng.standard_normal((1, 2, 4, 4)).astype(np.float32)
    it = tpu._from_host(img, 0)
    mp = np.asarray(ops["nn.max_pool2d"](it, 2, 2, 0))
    np.testing.assert_array_equal(mp, img.reshape(1, 2, 2, 2, 2, 2).max(axis=(3, 5)))
    ap = np.asarray(ops["nn.adaptive_avg_pool2d"](it, (1, 1)))
    np.testing.assert_allclose(ap[..., 0, 0], img.mean(axis=(2, 3)), rtol=1e-6)
    k = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    conv = np.asarray(ops["nn.conv2d"](it, tpu._from_host(k, 0), None, 1, 1, 1, 1))
    direct = np.zeros((1, 3, 4, 4))
    padded = np.pad(img, ((0, 0), (0, 0), (1, 1), (1, 1)))
    for i in range(4):
        for j in range(4):
            direct[0, :, i, j] = np.einsum("chw,ochw->o", padded[0, :, i:i + 3, j:j + 3], k)
    np.testing.assert_allclose(conv, direct, rtol=1e-4, atol=1e-4)


def test_seed_api(tpu: Any) -> None:
    from neurenix_tpu.api import TPUBackend, is_tpu_available, is_tpu_emulated

    assert is_tpu_available() and is_tpu_emulated()
    assert not is_tpu_available(allow_emulated=False)
    backend = TPUBackend()
    assert backend.initialize() is True
    assert backend.emulated and backend.device_count() == tpu.device_count()
    assert backend.device_info(0)["device"] == "tpu:0"
    assert Device(DeviceType.TPU, 0).is_available()


def test_device_to_device_copy_is_a_new_buffer(four_devices: Any) -> None:
    a = nx.asarray(np.arange(8, dtype=np.float32), device="tpu:1")
    base = nx.memory_stats("tpu:1").in_use
    same = a.to("tpu:1")  # a copy on the same device is a new buffer, charged once more
    assert same.native is not a.native and nx.memory_stats("tpu:1").in_use == base + 32
    moved = four_devices._copy_from_device(a.native, 2)
    assert moved.devices() == {four_devices.jax_devices[2]}
    np.testing.assert_array_equal(np.asarray(moved), np.arange(8))


def test_from_dlpack_of_a_jax_array_stays_on_device(four_devices: Any) -> None:
    import jax

    src = jax.device_put(np.arange(6, dtype=np.float32), four_devices.jax_devices[0])
    t = nx.from_dlpack(src, device="tpu:3")
    assert t.native.devices() == {four_devices.jax_devices[3]}
    shared = nx.from_dlpack(src, device="tpu:0")
    assert shared.native is src  # immutable: sharing the buffer is safe
    copied = nx.from_dlpack(src, device="tpu:0", copy=True)
    assert copied.native is not src
    with pytest.raises(nx.TransferError, match="copy=False"):
        nx.from_dlpack(src, device="tpu:2", copy=False)
    for x in (t, shared, copied):
        np.testing.assert_array_equal(x.numpy(), np.arange(6))


def test_nbytes_answers_per_array_with_its_last_answer_kept(tpu: Any) -> None:
    """The backend keeps its last ``_nbytes_of`` answer per aval object (jit gives every result of
    a program the same one): arrays of other shapes and dtypes, in any order, still get theirs."""
    import jax.numpy as jnp

    backend = nx.backend("tpu:0")
    arrays = [jnp.ones((1, 10), jnp.float32), jnp.ones((3, 7), jnp.bfloat16), jnp.ones((1, 10), jnp.float32), jnp.ones((5,), jnp.int64)]
    for a in [*arrays, *reversed(arrays), arrays[1], arrays[1]]:
        assert backend._nbytes_of(a) == a.nbytes
