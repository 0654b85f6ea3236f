"""TensorCoresBackend: precision, optimize_model, switch restore, mixed-precision training, bad input."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from neurenix_cuda_tc.capability import UnknownPrecisionError
from neurenix_cuda_tc.models import nx_cnn, optimized_cnn, unoptimized_cnn
from neurenix_cuda_tc.switches import SWITCHES, read_switch

import neurenix_core as nx
from neurenix_core.errors import UnsupportedOperationError


def test_seed_api_and_status(tc: Any) -> None:
    from neurenix_cuda_tc.api import is_tensor_cores_available, tensor_cores_status

    assert is_tensor_cores_available()
    status = tensor_cores_status()
    assert status["emulated"] is True and status["compute_capability"] == (8, 0)
    assert tc.emulated and tc.supported_precisions() == ("fp32", "tf32", "fp16", "bf16", "mixed")
    assert not is_tensor_cores_available("tpu:7")


def test_bf16_optimized_cnn_agrees_with_fp32(tc: Any) -> None:
    import torch

    torch.manual_seed(0)
    model = unoptimized_cnn()
    x = torch.randn(4, 3, 16, 16)
    with torch.no_grad():
        ref = model(x).numpy()
    opt = tc.optimize_model(model, precision="bf16")
    with torch.no_grad():
        out = opt(x)
    assert out.dtype == torch.bfloat16
    assert all(p.dtype == torch.bfloat16 for p in opt.parameters())
    assert opt.inner[0].weight.is_contiguous(memory_format=torch.channels_last)
    np.testing.assert_allclose(out.float().numpy(), ref, rtol=5e-2, atol=2e-2)
    text = str(opt.report)
    assert "bfloat16" in text and "channels_last" in text and "emulated" in text


def test_neurenix_model_is_lowered_and_optimized(tc: Any) -> None:
    import torch

    model = nx_cnn()
    x = np.random.default_rng(3).standard_normal((2, 3, 8, 8)).astype(np.float32)
    ref = model(nx.asarray(x)).numpy()
    opt = tc.optimize_model(model, precision="bf16", align=True)
    assert any("zero-padded" in c for c in opt.report.changes)
    out = opt(nx.asarray(x, device="cuda:0"))  # neurenix Tensors in, neurenix Tensor out
    assert isinstance(out, nx.Tensor) and out.device == nx.Device("cuda", 0) and out.dtype == nx.bfloat16
    np.testing.assert_allclose(out.numpy().astype(np.float32), ref, rtol=5e-2, atol=2e-2)
    host = opt(nx.asarray(x))  # host memory (a cpu tensor) is copied in by the call
    assert host.device == nx.Device("cuda", 0) and np.array_equal(host.numpy(), out.numpy())
    assert isinstance(opt, torch.nn.Module)


def test_switches_are_set_reported_and_restored(cuda: Any) -> None:
    from neurenix_cuda_tc.api import TensorCoresBackend

    before = {s: read_switch(s) for s in SWITCHES}
    tc = TensorCoresBackend()
    tc.initialize()
    tc.set_precision("tf32")
    assert read_switch("torch.backends.cuda.matmul.allow_tf32") and read_switch("torch.backends.cudnn.allow_tf32")
    opt = tc.optimize_model(optimized_cnn(), precision="fp16")
    assert read_switch("torch.backends.cudnn.benchmark") is True
    assert opt.report.switches["torch.backends.cudnn.benchmark"][1] is True
    tc.set_precision("fp32")
    assert not read_switch("torch.backends.cuda.matmul.allow_tf32")
    restored = tc.release()
    assert set(restored) == set(SWITCHES)
    assert {s: read_switch(s) for s in SWITCHES} == before


def test_mixed_and_fp16_modes(tc: Any) -> None:
    import torch

    torch.manual_seed(1)
    model = optimized_cnn()
    x = torch.randn(2, 8, 8, 8)
    with torch.no_grad():
        ref = model(x)
        opt = tc.optimize_model(model, precision="mixed")
        mixed = opt(x)
    assert mixed.dtype == torch.float16  # autocast computes in fp16 ...
    assert all(p.dtype == torch.float32 for p in opt.parameters())  # ... over fp32 weights
    assert any("autocast" in c for c in opt.report.changes)
    np.testing.assert_allclose(mixed.float().numpy(), ref.numpy(), rtol=1e-2, atol=1e-2)


def test_torch_compile_option(tc: Any) -> None:
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)).eval()
    x = torch.randn(4, 16)
    with torch.no_grad():
        ref = model(x)
        opt = tc.optimize_model(model, precision="fp32", compile="eager")
        out = opt(x)
    assert "torch.compile(backend='eager')" in opt.report.changes
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-6)


def test_bad_requests(tc: Any) -> None:
    with pytest.raises(UnknownPrecisionError, match="fp32, tf32, fp16, bf16, mixed"):
        tc.set_precision("fp9")
    with pytest.raises(UnknownPrecisionError):
        tc.optimize_model(optimized_cnn(), precision="double")
    with pytest.raises(UnsupportedOperationError, match="CUDA graphs need a real NVIDIA GPU"):
        tc.optimize_model(optimized_cnn(), precision="fp16", cuda_graphs=True)
    with pytest.raises(UnsupportedOperationError, match="cannot lower a builtins.str"):
        tc.optimize_model("resnet50", precision="fp16")


def test_profiler_needs_a_gpu_and_classifies_kernel_names(tc: Any) -> None:
    from neurenix_cuda_tc.profiler import classify, is_tensor_core_kernel, profile_tensor_cores

    tc_names = [
        "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn",
        "volta_h884gemm_64x64_ldg8_nn",
        "sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16_kernel",
        "void cutlass::Kernel<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_128x64_64x3_tn_align8>(Params)",
        "sm90_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_tilesize128x128x128_warpgroupsize1x1x1_kernel",
        "turing_fp16_s1688gemm_fp16_128x128_ldg8_f2f_nn",
    ]
    cuda_core = [
        "volta_sgemm_128x64_nn", "ampere_sgemm_64x32_sliced1x4_tn", "batch_norm_collect_statistics_kernel",
        "void at::native::elementwise_kernel<128, 2>", "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize32x32x8_stage3_ffma_kernel",
        "implicit_convolve_sgemm", "fetch_batch_kernel",
    ]
    assert all(is_tensor_core_kernel(n) for n in tc_names)
    assert not any(is_tensor_core_kernel(n) for n in cuda_core)
    prof = classify([(tc_names[0], 30.0), (cuda_core[0], 10.0)])
    assert prof.share == pytest.approx(0.75) and "75.0%" in str(prof)
    import torch

    if not torch.cuda.is_available():
        with pytest.raises(nx.BackendUnavailableError, match="real NVIDIA GPU"):
            profile_tensor_cores(optimized_cnn(), torch.randn(1, 8, 8, 8))


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_training_reduces_the_loss(precision: str) -> None:
    import torch
    from neurenix_cuda_tc.amp import MixedPrecision

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x = torch.randn(64, 16)
    y = x[:, :1] * 2 - x[:, 1:2]
    mp = MixedPrecision(precision, device_type="cpu")
    assert mp.scaler.is_enabled() == (precision == "fp16")
    losses = []
    for _ in range(60):
        with mp.step(opt) as step:
            loss = torch.nn.functional.mse_loss(model(x).float(), y)
            step.backward(loss)
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    assert all(p.dtype == torch.float32 for p in model.parameters())  # master weights stay fp32
    with pytest.raises(UnknownPrecisionError):
        MixedPrecision("tf32")


def test_optimized_model_follows_its_parameters_dtype(tc: Any) -> None:
    """``.float()`` / ``.half()`` on an optimised model change what its inputs are cast to, as on
    any torch module (the old dtype made the first matmul refuse)."""
    import torch

    torch.manual_seed(0)
    model = unoptimized_cnn()
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        ref = model(x).numpy()
    opt = tc.optimize_model(model, precision="bf16")
    opt = opt.float()
    with torch.no_grad():
        out = opt(x)
    assert out.dtype == torch.float32 and opt.dtype == torch.float32 and opt.precision == "tf32"
    np.testing.assert_allclose(out.numpy(), ref, rtol=5e-2, atol=2e-2)  # bf16-rounded weights, fp32 math
    opt = opt.half()
    with torch.no_grad():
        assert opt(x).dtype == torch.float16 and opt.precision == "fp16"


def test_optimized_model_deepcopies_with_the_device_state_shared(tc: Any) -> None:
    import copy

    import torch

    torch.manual_seed(0)
    opt = tc.optimize_model(unoptimized_cnn(), precision="bf16")
    twin = copy.deepcopy(opt)
    assert twin._nx_backend is opt._nx_backend and twin.inner is not opt.inner
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        assert torch.equal(twin(x), opt(x))
        for p in twin.parameters():
            p.zero_()
        assert not torch.equal(twin(x), opt(x)), "the copy's parameters are its own"
    on_device = twin(nx.asarray(x.numpy(), device="cuda:0"))
    assert on_device.device == nx.Device("cuda", 0)
