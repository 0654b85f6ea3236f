"""DLPack onto the cuda backend, bfloat16 over DLPack, and the message for a foreign array in an
operator (issue #28 C2). cuda runs PyTorch on the host CPU under NEURENIX_EMULATE=cuda."""

from __future__ import annotations

import numpy as np
import pytest

import neurenix_core as nx

torch = pytest.importorskip("torch")
ml_dtypes = pytest.importorskip("ml_dtypes")


def _device(kind: str) -> str:
    if kind not in {d.type for d in nx.devices()}:
        pytest.skip(f"no {kind} device (install its plugin or set NEURENIX_EMULATE={kind})")
    return f"{kind}:0"


def test_from_dlpack_of_a_numpy_array_onto_cuda_is_a_torch_tensor() -> None:
    cuda = _device("cuda")
    src = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = nx.from_dlpack(src, device=cuda)
    assert t.device == nx.Device(cuda) and t.dtype == nx.float32
    assert isinstance(t.native, torch.Tensor)
    np.testing.assert_array_equal((t * 2).to("cpu").numpy(), src * 2)


def test_asarray_of_torch_and_jax_arrays_onto_cuda() -> None:
    cuda = _device("cuda")
    t = nx.asarray(torch.arange(4, dtype=torch.float32), device=cuda)
    assert t.dtype == nx.float32 and t.to("cpu").tolist() == [0.0, 1.0, 2.0, 3.0]
    jnp = pytest.importorskip("jax.numpy")
    j = nx.asarray(jnp.arange(3, dtype=jnp.int32), device=cuda)
    assert j.dtype == nx.int32 and j.to("cpu").tolist() == [0, 1, 2]


def test_copy_false_shares_a_torch_tensor_on_the_same_device() -> None:
    cuda = _device("cuda")
    if not any(b.emulated for b in nx.backends() if b.name == "cuda"):
        pytest.skip("sharing a CPU torch tensor needs the emulated (host) cuda device")
    src = torch.zeros(3)
    t = nx.from_dlpack(src, device=cuda, copy=False)
    src[1] = 5.0
    assert t.to("cpu").tolist() == [0.0, 5.0, 0.0]


BF16 = [1.0, -2.5, 3.140625]  # exact in bfloat16


@pytest.mark.parametrize("device", ["cpu", "cuda", "tpu"])
def test_bfloat16_from_torch_over_dlpack(device: str) -> None:
    dev = "cpu:0" if device == "cpu" else _device(device)
    t = nx.from_dlpack(torch.tensor(BF16, dtype=torch.bfloat16), device=dev)
    assert t.device == nx.Device(dev) and t.dtype == nx.bfloat16
    assert t.to("cpu").numpy().astype(np.float32).tolist() == BF16


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_bfloat16_from_jax(device: str) -> None:
    jnp = pytest.importorskip("jax.numpy")
    dev = "cpu:0" if device == "cpu" else _device(device)
    t = nx.asarray(jnp.asarray(BF16, dtype=jnp.bfloat16), device=dev)
    assert t.dtype == nx.bfloat16 and t.to("cpu").numpy().astype(np.float32).tolist() == BF16


def test_bfloat16_from_a_cpu_torch_tensor_shares_memory_on_cpu() -> None:
    src = torch.tensor(BF16, dtype=torch.bfloat16)
    t = nx.from_dlpack(src, device="cpu:0", copy=False)
    src[0] = 8.0
    assert float(t.numpy()[0]) == 8.0


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_an_operator_with_a_torch_tensor_names_it_and_the_remedy(device: str) -> None:
    dev = "cpu:0" if device == "cpu" else _device(device)
    x = nx.ones(3, device=dev)
    for expr in (lambda: x + torch.ones(3), lambda: torch.ones(3) + x):
        with pytest.raises(TypeError) as err:
            expr()
        msg = str(err.value)
        assert "'Tensor' and 'Tensor'" not in msg
        assert f"neurenix Tensor on {dev} with a torch.Tensor" in msg and f"nx.asarray(value, device='{dev}')" in msg
    assert (x + nx.asarray(torch.ones(3), device=dev)).to("cpu").tolist() == [2.0, 2.0, 2.0]  # the remedy works
