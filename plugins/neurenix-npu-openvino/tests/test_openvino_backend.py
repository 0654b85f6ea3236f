"""The npu backend through the core: tensors, eager native ops, fallbacks, memory, device facts."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from neurenix_npu_openvino.eager import NATIVE_OPS
from neurenix_npu_openvino.plugin import _NATIVE_OPS

import neurenix_core as nx
from neurenix_core.errors import FallbackError, OutOfMemoryError, UnsupportedDTypeError


def test_device_is_emulated_and_says_so(npu: Any) -> None:
    assert npu.emulated and npu.ov_device == "CPU"
    info = npu.device_info(0)
    assert info["emulated"] is True and "NEURENIX_EMULATE=npu" in info["note"]
    assert info["name"] == npu.core.get_property("CPU", "FULL_DEVICE_NAME")
    assert "fp32" in info["precisions"] and "int8" in info["precisions"]
    assert "INT8" in info["capabilities"]
    assert nx.Device("npu:0").emulated


def test_manifest_native_ops_match_the_op_table(npu: Any) -> None:
    assert set(_NATIVE_OPS) == set(NATIVE_OPS) == set(npu.ops)


def test_tensors_live_on_npu_as_host_copies(npu: Any) -> None:
    host = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = nx.asarray(host, device="npu:0")
    host[0, 0] = 100.0
    assert t.device == nx.Device("npu:0") and t.dtype == nx.float32
    assert t.numpy()[0, 0] == 0.0
    back = t.to("cpu")
    assert back.device == nx.Device("cpu:0") and np.array_equal(back.numpy(), t.numpy())


def _without_fp16(npu: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Take FP16 out of *our* record of OpenVINO's OPTIMIZATION_CAPABILITIES (never OpenVINO's):
    the no-FP16 branch a CPU without AVX512-FP16/AMX-FP16 takes, run on any machine."""
    monkeypatch.setattr(npu, "capabilities", tuple(c for c in npu.capabilities if c != "FP16"))
    assert not npu.runs_dtype(np.dtype(np.float16))


# float16 runs natively only where OpenVINO reports FP16 (Intel Xeon with AMX-FP16/AVX512-FP16);
# elsewhere (AMD EPYC) it falls back to the host. "reported" follows what this CPU's runtime
# says; "no FP16" forces the other branch here, so both are exercised on every machine.
@pytest.mark.parametrize(("dtype", "fp16"), [(np.float32, "reported"), (np.float16, "reported"), (np.float16, "no FP16")])
def test_eager_matmul_and_elementwise_follow_the_reported_capabilities(npu: Any, monkeypatch: pytest.MonkeyPatch, dtype: Any, fp16: str) -> None:
    from neurenix_core.testing.reference import assert_close

    if fp16 == "no FP16":
        _without_fp16(npu, monkeypatch)
    native = npu.runs_dtype(np.dtype(dtype))
    assert native == (dtype == np.float32 or "FP16" in npu.capabilities)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((5, 7)).astype(dtype), rng.standard_normal((7, 3)).astype(dtype)
    ta, tb = nx.asarray(a, device="npu:0"), nx.asarray(b, device="npu:0")
    before = npu.eager.compilations
    nx.reset_fallback_stats()
    if native:
        with nx.fallback_policy("error"):  # proves nothing fell back to the host
            out, s = ta @ tb, nx.exp(ta) * 2 + ta
        assert npu.eager.compilations > before
        assert nx.fallback_stats().get("npu", {}) == {}
    else:
        with nx.fallback_policy("error"), pytest.raises(FallbackError, match="matmul is not native on npu:0"):
            _ = ta @ tb
        with nx.fallback_policy("allow"):
            out, s = ta @ tb, nx.exp(ta) * 2 + ta
        assert npu.eager.compilations == before, "an op the device cannot compute must not compile a graph"
        assert nx.fallback_stats()["npu"]["matmul"] == 1
    dev = nx.Device("npu:0")
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    # Tolerances per dtype from the core's table; atol scales with the 7-term dot products.
    assert_close(out, a64 @ b64, dev, dtype, scale=7)
    assert_close(s, np.exp(a64) * 2 + a64, dev, dtype, scale=8)


def test_eager_graphs_are_compiled_once_per_shape(npu: Any) -> None:
    x = nx.ones((4, 4), device="npu:0")
    _ = x + x
    count = npu.eager.compilations
    for _ in range(3):
        _ = x + x
    assert npu.eager.compilations == count
    _ = nx.ones((4, 5), device="npu:0") + nx.ones((4, 5), device="npu:0")
    assert npu.eager.compilations == count + 1


def test_nn_ops_run_natively(npu: Any) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    got = npu.ops["nn.conv2d"](x, w, b, (1, 1), (1, 1), (1, 1), 1)
    cpu = nx.backend("cpu").ops["nn.conv2d"](x, w, b, (1, 1), (1, 1), (1, 1), 1)
    np.testing.assert_allclose(got, cpu, rtol=1e-4, atol=1e-5)
    lin = npu.ops["nn.linear"](x.reshape(2, -1), rng.standard_normal((5, 192)).astype(np.float32), None)
    assert lin.shape == (2, 5) and lin.dtype == np.float32


def test_integer_matmul_falls_back_under_the_policy_and_stays_exact(npu: Any) -> None:
    a = nx.asarray([[2**40 + 1, 2], [3, 4]], device="npu:0")
    b = nx.asarray([[1, 0], [0, 1]], device="npu:0")
    nx.reset_fallback_stats()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = a @ b
    assert out.device == nx.Device("npu:0") and out.dtype == nx.int64
    assert out.numpy()[0, 0] == 2**40 + 1  # OpenVINO's integer MatMul would lose this
    assert nx.fallback_stats()["npu"]["matmul"] == 1
    assert any("not native on npu:0" in str(w.message) for w in caught)
    with nx.fallback_policy("error"), pytest.raises(FallbackError, match="matmul is not native on npu:0"):
        _ = a @ b


def test_ops_outside_the_table_fall_back_and_return_to_npu(npu: Any, fallback_allowed: None) -> None:
    t = nx.asarray([[1.0, 2.0], [3.0, 4.0]], device="npu:0")
    s = nx.sum(t, axis=1)
    assert s.device == nx.Device("npu:0")
    np.testing.assert_allclose(s.numpy(), [3.0, 7.0])


def test_memory_limit_is_enforced_with_the_device_named(npu: Any) -> None:
    keep = nx.zeros((16,), device="npu:0")
    used = nx.memory_stats("npu:0").in_use
    nx.set_memory_limit("npu:0", used + 1024)
    try:
        with pytest.raises(OutOfMemoryError, match="npu:0"):
            nx.zeros((1024,), device="npu:0")
        assert keep.numpy().sum() == 0
    finally:
        nx.set_memory_limit("npu:0", None)


def test_complex_dtype_is_refused_with_a_remedy(npu: Any) -> None:
    with pytest.raises(UnsupportedDTypeError, match="npu.*complex"):
        nx.asarray(np.ones(3, np.complex64), device="npu:0")


def test_explicit_precision_even_for_eager_graphs(npu: Any) -> None:
    # Eager graphs must not inherit the CPU device's bf16 default: 1 + 2**-12 is exact in f32 only.
    x = nx.asarray(np.full((3,), 1.0, np.float32), device="npu:0")
    y = nx.asarray(np.full((3,), 2.0**-12, np.float32), device="npu:0")
    assert np.all((x + y).numpy() == np.float32(1 + 2.0**-12))
