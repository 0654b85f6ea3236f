"""The seed API (NPUBackend, is_npu_available) on the emulated npu, as the seed documents use it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from neurenix_npu_openvino.api import NPUBackend, is_npu_available

import neurenix_core as nx
from neurenix_core.errors import (
    CompilationError,
    NeurenixWarning,
    OutOfMemoryError,
    QuantizationError,
    ShapeError,
    UnsupportedOperationError,
)


def _seed_cnn() -> Any:
    from neurenix_core.nn import Conv2d, Flatten, Linear, ReLU, Sequential

    # The seed's model, with the Flatten it forgot before Linear.
    return Sequential(
        Conv2d(3, 16, kernel_size=3, stride=1, padding=1), ReLU(),
        Conv2d(16, 32, kernel_size=3, stride=2, padding=1), ReLU(),
        Conv2d(32, 64, kernel_size=3, stride=2, padding=1), ReLU(),
        Flatten(), Linear(64 * 8 * 8, 10),
    )


def test_seed_availability_and_device_info(npu: Any) -> None:
    assert is_npu_available() is True
    assert is_npu_available(allow_emulated=False) is False
    backend = NPUBackend()
    assert backend.initialize() is True
    assert backend.get_device_count() == 1
    info = backend.get_device_info(0)
    assert info["name"] and info["emulated"] is True and "int8" in info["precisions"]
    with pytest.raises(nx.DeviceNotFoundError):
        backend.get_device_info(3)


def test_seed_matmul_returns_an_npu_tensor(npu: Any, fallback_allowed: None) -> None:
    a = nx.Tensor([[1, 2], [3, 4]])
    b = nx.Tensor([[5, 6], [7, 8]])
    c = NPUBackend().matmul(a, b)
    assert c.device == nx.Device("npu:0")
    assert c.tolist() == [[19, 22], [43, 50]]
    f = NPUBackend().matmul(np.eye(2, dtype=np.float32), np.full((2, 2), 3.0, np.float32))
    assert f.dtype == nx.float32 and f.tolist() == [[3.0, 3.0], [3.0, 3.0]]


def test_seed_optimize_model_fp32_matches_the_cpu(npu: Any) -> None:
    model = _seed_cnn()
    x = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
    fast = NPUBackend().optimize_model(model, precision="fp32", optimize_for="latency")
    out = fast(x)
    assert out.device == nx.Device("npu:0") and out.shape == (2, 10)
    want = model(nx.asarray(x)).numpy()
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-5)
    assert "precision fp32" in fast.summary and "PERFORMANCE_HINT" not in fast.summary


def test_seed_optimize_model_int8_with_calibration(npu: Any) -> None:
    model = _seed_cnn()
    rng = np.random.default_rng(1)
    calibration = [rng.standard_normal((8, 3, 32, 32)).astype(np.float32) for _ in range(3)]
    q = NPUBackend().optimize_model(model=model, quantize=True, precision="int8", optimize_for="performance", calibration=calibration)
    x = rng.standard_normal((32, 3, 32, 32)).astype(np.float32)
    agree = float((q(x).numpy().argmax(1) == model(nx.asarray(x)).numpy().argmax(1)).mean())
    assert agree >= 0.9  # 32 samples of an untrained net; the 99 % criterion is in test_openvino_quant
    layers = q.openvino(x.shape).compute_layers()
    assert len(layers) == 4 and all(p.lower() in ("u8", "i8") for p in layers.values()), layers


def test_seed_optimize_model_int8_without_calibration_is_dynamic_and_says_so(npu: Any) -> None:
    with pytest.warns(NeurenixWarning, match="dynamic int8") as said:
        q = NPUBackend().optimize_model(model=_seed_cnn(), quantize=True, precision="int8")
    assert {w.filename for w in said if issubclass(w.category, NeurenixWarning)} == {__file__}  # the user's line, not the plugin's
    x = np.zeros((1, 3, 32, 32), np.float32)
    assert q(x).shape == (1, 10)
    assert "1/4 conv/FC layer(s) in integer precision" in q.summary


def test_throughput_batches_run_through_an_async_queue(npu: Any) -> None:
    model = _seed_cnn()
    fast = NPUBackend().optimize_model(model, precision="fp32", optimize_for="throughput")
    rng = np.random.default_rng(2)
    batches = [rng.standard_normal((4, 3, 32, 32)).astype(np.float32) for _ in range(5)]
    outs = fast.run_batches(batches, jobs=2)
    assert len(outs) == 5
    for b, o in zip(batches, outs):
        np.testing.assert_allclose(o, fast(b).numpy(), rtol=1e-5, atol=1e-6)


def test_bad_inputs_to_optimized_models(npu: Any) -> None:
    fast = NPUBackend().optimize_model(_seed_cnn(), precision="fp32")
    with pytest.raises(ShapeError, match="do not fit the model"):
        fast(np.zeros((1, 4, 32, 32), np.float32))
    host = fast(nx.zeros((1, 3, 32, 32), device="cpu"))  # host memory is copied in by the call
    assert host.device == nx.Device("npu:0")
    np.testing.assert_array_equal(host.numpy(), fast(np.zeros((1, 3, 32, 32), np.float32)).numpy())


def test_bad_options_are_clear_errors(npu: Any) -> None:
    backend = NPUBackend()
    with pytest.raises(CompilationError, match="precision='int4'"):
        backend.optimize_model(_seed_cnn(), precision="int4")
    with pytest.raises(CompilationError, match="optimize_for='speed'"):
        backend.optimize_model(_seed_cnn(), optimize_for="speed")
    with pytest.raises(QuantizationError, match="quantize=True"):
        backend.optimize_model(_seed_cnn(), quantize=True, precision="fp16")
    rng = np.random.default_rng(3)
    with pytest.raises(QuantizationError, match="npu:0 cannot run int16"):
        q = backend.optimize_model(_seed_cnn(), quantize=True, precision="int16", calibration=[rng.standard_normal((2, 3, 32, 32))])
        q(np.zeros((2, 3, 32, 32), np.float32))


def test_memory_limit_and_optimization(npu: Any) -> None:
    backend = NPUBackend()
    backend.initialize()
    keep = nx.ones((8,), device="npu:0")
    backend.set_memory_limit(backend.memory_stats()["in_use"] + 256)
    try:
        with pytest.raises(OutOfMemoryError, match="npu:0"):
            nx.zeros((4096,), device="npu:0")
    finally:
        backend.set_memory_limit(None)
    backend.enable_memory_optimization(True)
    try:
        assert backend.get_device_info(0)["memory_optimization"] is True
        assert npu.properties("fp32")["NUM_STREAMS"] == 1
        assert npu.cached_models <= 4
    finally:
        backend.enable_memory_optimization(False)
    assert keep.numpy().sum() == 8


def test_pytorch_module_through_convert_model(npu: Any) -> None:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(8 * 16 * 16, 5)).eval()
    x = np.random.default_rng(4).standard_normal((2, 3, 16, 16)).astype(np.float32)
    fast = NPUBackend().optimize_model(module, precision="fp32", example_input=x)
    with torch.no_grad():
        want = module(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(fast(x).numpy(), want, rtol=1e-4, atol=1e-5)
    assert "OpenVINO node(s)" in fast.summary and "f32" in fast.summary


def test_pytorch_layer_openvino_lacks_is_named(npu: Any) -> None:
    torch = pytest.importorskip("torch")

    class Histogram(torch.nn.Module):
        def forward(self, x: Any) -> Any:
            return torch.histc(x, bins=4)

    with pytest.raises(UnsupportedOperationError, match=r"npu:0: OpenVINO cannot convert Histogram \(no conversion rule for aten::histc\)") as info:
        NPUBackend().optimize_model(Histogram(), precision="fp32", example_input=np.ones((4, 4), np.float32))
    assert info.value.__cause__ is not None


def test_facade_serves_the_seed_names(npu: Any) -> None:
    facade = pytest.importorskip("neurenix.hardware.npu", reason="the neurenix facade package is not built yet")
    assert facade.NPUBackend is NPUBackend and facade.is_npu_available is is_npu_available
