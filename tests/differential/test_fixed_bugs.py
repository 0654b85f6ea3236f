"""The bugs the differential layer found and that were fixed, each pinned by one deterministic
check (the sampled cases meet them only when the seed draws them)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.testing.plugin import devices_under_test

from .harness import check_fields

DEVICES = [pytest.param(d.device, id=d.backend) for d in devices_under_test()]


@pytest.mark.parametrize("device", DEVICES)
def test_bce_with_logits_pos_weight_moves_with_the_module(device: str) -> None:
    # pos_weight was a plain attribute: .to(device) left it on cpu:0 and the loss raised DeviceMismatchError.
    loss = nn.BCEWithLogitsLoss(pos_weight=nx.asarray(np.array([2.0, 0.5], np.float32))).to(device)
    x = nx.asarray(np.array([[0.3, -1.2]], np.float32), device=device)
    t = nx.asarray(np.array([[1.0, 0.0]], np.float32), device=device)
    with nx.fallback_policy("allow"):
        got = float(loss(x, t))
    xs, ts, pw = np.array([0.3, -1.2]), np.array([1.0, 0.0]), np.array([2.0, 0.5])
    want = np.mean(-(pw * ts * -np.logaddexp(0, -xs) + (1 - ts) * -np.logaddexp(0, xs)))
    assert got == pytest.approx(want, rel=1e-5)
    assert "pos_weight" in loss.state_dict()  # a buffer, as in PyTorch


@pytest.mark.parametrize("device", DEVICES)
def test_cross_entropy_with_class_indices_on_every_device(device: str) -> None:
    # The one-hot cast went to the host with the backend's native dtype (OpenVINO's Type on npu:0) and raised.
    x = np.array([[0.5, 1.5, -0.5], [2.0, 0.0, 1.0]], np.float32)
    with nx.fallback_policy("allow"):
        got = float(nn.CrossEntropyLoss()(nx.asarray(x, device=device), nx.asarray(np.array([1, 0]), device=device)))
    logp = x - np.log(np.exp(x).sum(axis=1, keepdims=True))
    assert got == pytest.approx(-(logp[0, 1] + logp[1, 0]) / 2, rel=1e-5)


@pytest.mark.parametrize("name", ["linalg.matmul", "vecdot", "linalg.vecdot"])
def test_bfloat16_contractions_stay_bfloat16_on_cpu(name: str) -> None:
    # NumPy has no bfloat16 loop for them: the result came back float32 (the standard: the operands' dtype).
    a = nx.asarray(np.ones((2, 3), ml_dtypes.bfloat16))
    b = nx.asarray(np.ones((3, 3) if name == "linalg.matmul" else (2, 3), ml_dtypes.bfloat16))
    fn = nx.linalg.matmul if name == "linalg.matmul" else nx.vecdot if name == "vecdot" else nx.linalg.vecdot
    out = fn(a, b)
    assert str(out.dtype) == "bfloat16"
    np.testing.assert_array_equal(out.numpy().astype(np.float32), np.full(out.shape, 3.0, np.float32))


def test_searchsorted_gives_the_default_indexing_dtype_on_tpu() -> None:
    if nx.Device("tpu:0") not in nx.devices():
        pytest.skip("tpu:0 is not available (NEURENIX_EMULATE=tpu)")
    x = nx.asarray(np.array([1.0, 2.0, 3.0], np.float32), device="tpu:0")
    out = nx.searchsorted(x, x, side="right")
    assert out.dtype == nx.__array_namespace_info__().default_dtypes(device=out.device)["indexing"] == np.int64
    np.testing.assert_array_equal(out.numpy(), [1, 2, 3])


@pytest.mark.parametrize("device", DEVICES)
def test_permute_dims_of_a_0d_tensor(device: str) -> None:
    # ONNX Runtime's Transpose cannot type an empty perm: a view chain ending in permute_dims(()) raised on ort:0.
    with nx.fallback_policy("allow"):
        x = nx.asarray(np.float32(2.5), device=device)
        assert float(nx.permute_dims(x, ())) == 2.5


@pytest.mark.parametrize("device", DEVICES)
def test_astype_to_its_own_dtype_without_copy_after_a_fallback(device: str) -> None:
    # nx.fft.rfft on npu:0/ort:0 leaves a complex64 tensor there (a host fallback); astype(x, x.dtype,
    # copy=False), the standard's no-op, refused it because the device lists no complex dtype.
    with nx.fallback_policy("allow"):
        spectrum = nx.fft.rfft(nx.asarray(np.array([1.0, 2.0, 0.0, -1.0], np.float32), device=device))
        assert nx.astype(spectrum, spectrum.dtype, copy=False).dtype == spectrum.dtype


@pytest.mark.parametrize("device", [p for p in DEVICES if nx.backend(nx.Device(p.values[0])).trains])
@pytest.mark.parametrize("key", [slice(None, None, -1), (slice(None, None, -2), 1), (Ellipsis, slice(2, 0, -1))], ids=repr)
def test_backward_through_negative_step_indexing(device: str, key: object) -> None:
    # The rule wrote g into zeros with the same key: PyTorch refuses negative steps in writes (cuda:0).
    a = np.arange(24.0).reshape(4, 3, 2)
    with nx.fallback_policy("allow"):
        x = nx.asarray(a, device=device)
        x.requires_grad_(True)
        y = x[key]
        g = np.arange(y.size, dtype=np.float64).reshape(y.shape) + 1.0
        y.backward(nx.asarray(g, device=device))
    want = np.zeros_like(a)
    want[key] = g
    np.testing.assert_array_equal(x.grad.numpy(), want)


def test_cumulative_prod_of_small_integers_widens_on_tpu() -> None:
    if nx.Device("tpu:0") not in nx.devices():
        pytest.skip("tpu:0 is not available (NEURENIX_EMULATE=tpu)")
    # jnp.cumulative_prod kept int8; the standard (and prod, cumulative_sum) give the default integer dtype.
    out = nx.cumulative_prod(nx.asarray(np.array([1, 2, 3], np.int8), device="tpu:0"))
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out.numpy(), [1, 2, 6])


@pytest.mark.parametrize("device", DEVICES)
def test_clip_of_bfloat16_with_both_bounds(device: str) -> None:
    # array-api-compat's clip (casting='no' into a bfloat16 output) raised on cpu:0 and every host fallback.
    if not nx.backend(nx.Device(device)).supports_dtype(np.dtype(ml_dtypes.bfloat16)):
        pytest.skip(f"{device} does not declare bfloat16")
    x = nx.asarray(np.array([-3.0, 0.5, 2.0]).astype(ml_dtypes.bfloat16), device=device)
    bound = nx.asarray(np.array([1.0, 1.0, 1.0]).astype(ml_dtypes.bfloat16), device=device)
    with nx.fallback_policy("allow"):
        for out in (nx.clip(x, -1.0, 1.0), nx.clip(x, -bound, bound)):
            assert str(out.dtype) == "bfloat16"
            np.testing.assert_array_equal(out.numpy().astype(np.float32), [-1.0, 0.5, 1.0])


@pytest.mark.parametrize("device", DEVICES)
def test_from_dlpack_keeps_the_tensors_device(device: str) -> None:
    # device=None placed the result on the default device (cpu:0); the standard keeps x's device.
    with nx.fallback_policy("allow"):
        x = nx.asarray(np.arange(3, dtype=np.float32), device=device)
        y = nx.from_dlpack(x)
    assert y.device == x.device
    np.testing.assert_array_equal(y.numpy(), np.arange(3, dtype=np.float32))


@pytest.mark.parametrize("device", DEVICES)
def test_a_compiled_identity_output_is_charged_as_a_view(device: str) -> None:
    # A compiled model returning its input (or a view of it) was wrapped as a fresh buffer:
    # the device charged one buffer twice and the output did not keep the input alive.
    compiled = nx.compile(nn.Sequential(nn.Identity()), device=device, progress=False)
    x = nx.asarray(np.arange(4, dtype=np.float32), device=device)
    for _ in range(2):  # the first call takes the general path, the second the one-input fast path
        y = compiled(x)
        check_fields(y, "compiled Identity output", nx.Device(device), [x], on_tape=False)
