"""The emulated cuda backend: torch tensors as native storage, dtypes, ops, memory, device info."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import neurenix_core as nx


def test_tensors_are_torch_tensors_on_the_emulated_device(cuda: Any) -> None:
    import torch

    x = nx.asarray([[1.0, 2.0], [3.0, 4.0]], device="cuda:0")
    assert isinstance(x.native, torch.Tensor) and x.native.device.type == "cpu"
    assert x.device == nx.Device("cuda", 0) and x.device.emulated
    np.testing.assert_array_equal((x @ x).numpy(), np.array([[7.0, 10.0], [15.0, 22.0]], np.float32))
    info = cuda.device_info(0)
    assert info["emulated"] is True and "emulated" in info["name"] and info["compute_capability"] == "8.0"
    assert "bf16" in info["tensor_core_precisions"]


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int8", "int64", "bool"])
def test_host_round_trip_keeps_dtype_and_values(cuda: Any, dtype: str) -> None:
    from neurenix_core.tensor.dtypes import DTYPES

    host = (np.arange(12).reshape(3, 4) % 5).astype(DTYPES[dtype])
    t = nx.asarray(host, device="cuda:0")
    assert t.dtype == host.dtype
    back = t.numpy()
    assert back.dtype == host.dtype
    np.testing.assert_array_equal(back.astype(np.float64), host.astype(np.float64))
    host[0, 0] = 3  # our copy: the tensor must not see later writes
    assert t.numpy()[0, 0] == 0


def test_transfers_are_real_copies(cuda: Any) -> None:
    a = nx.asarray(np.arange(6, dtype=np.float32), device="cpu")
    b = a.to("cuda:0")
    c = b.to("cpu")
    np.testing.assert_array_equal(c.numpy(), a.numpy())
    with pytest.raises(nx.DeviceMismatchError):
        a + b


def test_memory_is_accounted(cuda: Any) -> None:
    before = nx.memory_stats("cuda:0").in_use
    t = nx.zeros((256, 256), device="cuda:0")
    assert nx.memory_stats("cuda:0").in_use - before == 256 * 256 * 4
    del t
    assert nx.memory_stats("cuda:0").in_use == before


def test_nn_ops_match_numpy(cuda: Any) -> None:
    import torch

    rng = np.random.default_rng(0)
    x, w, b = rng.standard_normal((4, 8), np.float32), rng.standard_normal((3, 8), np.float32), rng.standard_normal(3, np.float32)
    out = cuda.ops["nn.linear"](torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b))
    np.testing.assert_allclose(out.numpy(), x @ w.T + b, rtol=1e-5, atol=1e-5)
    img = rng.standard_normal((1, 2, 5, 5), np.float32)
    pooled = cuda.ops["nn.avg_pool2d"](torch.from_numpy(img), (2, 2), (1, 1), (0, 0), True)
    assert tuple(pooled.shape) == (1, 2, 4, 4)


def test_bf16_matmul_through_the_tensor_core_api(tc: Any) -> None:
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((64, 32), np.float32), rng.standard_normal((32, 16), np.float32)
    tc.set_precision("bf16")
    out = tc.matmul(nx.asarray(a, device="cuda:0"), nx.asarray(b, device="cuda:0"))
    assert out.dtype == nx.bfloat16 and out.device == nx.Device("cuda", 0)
    ref = a.astype(np.float64) @ b
    np.testing.assert_allclose(out.numpy().astype(np.float64), ref, rtol=0.05, atol=0.15)
