"""nx.nn models on the TPU: model.to(tpu) (eager, native nn.* ops) and nx.compile(model, device="tpu:0")."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.device import Device, DeviceType

nn = pytest.importorskip("neurenix_core.nn", reason="neurenix_core.nn (issue 4) has not landed")
compiler = pytest.importorskip("neurenix_core.graph.compile.compiler", reason="nx.compile (neurenix_core.graph.compile.compiler, issue 4) has not landed")
reference = pytest.importorskip("neurenix_core.graph.reference.run", reason="neurenix_core.graph.reference.run (issue 4) has not landed")

from neurenix_tpu.compiled import RECOMPILE_WARN_AFTER, RecompilationWarning


def _mlp() -> Any:
    nn.init.manual_seed(0)
    return nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 5))


def _cnn() -> Any:
    nn.init.manual_seed(1)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.GELU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 4),
    )


def _x(shape: tuple[int, ...], seed: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_seed_model_to_tpu_runs_eagerly_with_native_ops(tpu: Any) -> None:
    model = _mlp()
    x = _x((1, 10))
    expected = reference.run_graph(model.to_graph((1, 10)), x)
    nx.reset_fallback_stats()
    model.to(Device(DeviceType.TPU, 0))
    out = model(nx.Tensor(x, device=Device(DeviceType.TPU, 0)))
    assert out.device == Device("tpu", 0)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)
    assert "tpu" not in nx.fallback_stats(), "every layer must run natively on the TPU"


@pytest.mark.parametrize("make,shape", [(_mlp, (8, 10)), (_cnn, (2, 3, 16, 16))])
def test_nx_compile_fp32_matches_reference(tpu: Any, make: Any, shape: tuple[int, ...]) -> None:
    model = make().to("tpu:0")
    x = _x(shape)
    compiled = nx.compile(model, device="tpu:0", precision="fp32")
    out = compiled(nx.asarray(x, device="tpu:0"))
    assert out.device == Device("tpu", 0)
    np.testing.assert_allclose(out.numpy(), reference.run_graph(model.to_graph(shape), x), rtol=3e-5, atol=3e-5)
    assert "precision fp32" in compiled.summary and "emulated" in compiled.summary


def test_nx_compile_default_states_bf16(tpu: Any) -> None:
    model = _cnn()
    x = _x((2, 3, 16, 16))
    compiled = nx.compile(model, device="tpu:0")
    out = compiled(x)
    assert "precision bf16" in compiled.summary
    np.testing.assert_allclose(out.numpy(), reference.run_graph(model.to_graph(x.shape), x), rtol=5e-2, atol=5e-2)


def test_nx_compile_buckets_compile_once_per_bucket(tpu: Any) -> None:
    model = _mlp()
    compiled = nx.compile(model, device="tpu:0", precision="fp32", batch_buckets=(4, 16))
    xs = _x((16, 10))
    for batch in (1, 2, 3, 4, 5, 9, 16, 2):
        out = compiled(nx.asarray(xs[:batch], device="tpu:0"))
        assert out.shape == (batch, 5)
        np.testing.assert_allclose(out.numpy(), reference.run_graph(model.to_graph((batch, 10)), xs[:batch]), rtol=3e-5, atol=3e-5)
    programs = {id(m.program) for m in _natives(compiled)}
    assert len(programs) == 1
    assert _natives(compiled)[0].compiles == 2  # buckets 4 and 16


def _natives(compiled: Any) -> list[Any]:
    """The TPUCompiledModel objects behind nx.compile's per-shape runners."""
    found = []
    for runner in compiled._runners.values():
        for cell in runner.__closure__ or ():
            if type(cell.cell_contents).__name__ == "TPUCompiledModel":
                found.append(cell.cell_contents)
    assert found, "nx.compile did not use the TPU plugin's compiled model"
    return found


def test_nx_compile_data_parallel_equals_single(four_devices: Any) -> None:
    model = _cnn()
    x = _x((6, 3, 16, 16))
    single = nx.compile(model, device="tpu:0", precision="fp32")(x).numpy()
    sharded = nx.compile(model, device="tpu:0", precision="fp32", data_parallel=True)
    out = sharded(x)
    assert out.device == Device("tpu", 0)
    np.testing.assert_allclose(out.numpy(), single, rtol=1e-6, atol=1e-6)
    assert "data parallel over tpu:0..tpu:3" in sharded.summary


def test_nx_compile_warns_once_when_every_shape_recompiles(tpu: Any) -> None:
    compiled = nx.compile(_mlp(), device="tpu:0", precision="fp32")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for batch in range(1, RECOMPILE_WARN_AFTER + 3):
            compiled(_x((batch, 10)))
    hits = [w for w in caught if issubclass(w.category, RecompilationWarning)]
    assert len(hits) == 1 and "batch_buckets" in str(hits[0].message)


def test_nx_compile_rejects_inputs_from_another_tpu(four_devices: Any) -> None:
    compiled = nx.compile(_mlp(), device="tpu:0", precision="fp32")
    with pytest.raises(nx.DeviceMismatchError, match="tpu:1"):
        compiled(nx.asarray(_x((1, 10)), device="tpu:1"))


@pytest.mark.parametrize("quantize", ["int8", "int16", "dynamic"])
def test_nx_compile_quantized_matches_the_core_reference(tpu: Any, quantize: str) -> None:
    model = _cnn() if quantize != "dynamic" else _mlp()
    shape = (2, 3, 16, 16) if quantize != "dynamic" else (4, 10)
    calibration = [_x(shape, seed=s) for s in range(4)]
    compiled = nx.compile(model, device="tpu:0", quantize=quantize, calibration=calibration, progress=False)
    x = _x(shape, seed=9)
    out = compiled(x).numpy()
    expected = reference.run_graph(compiled.graph, x, plan=compiled.plan)
    unquantized = reference.run_graph(model.to_graph(shape), x)
    # float32 QDQ against the float64 reference may flip a rounding tie: allow one output step.
    step = float(np.asarray(compiled.plan.activations[compiled.graph.outputs[0]].scale).ravel()[0]) if not compiled.plan.dynamic else 1e-4
    np.testing.assert_allclose(out, expected, atol=1.01 * step + 1e-5, rtol=0)
    assert f"precision int{compiled.plan.bits}" in compiled.summary
    if quantize == "int8":
        assert np.abs(expected - unquantized).max() > 1e-4, "the plan must really quantize"
        native = _natives(compiled)[0]
        weights = native.program.params["0"]["weight"]
        assert str(weights.dtype) == "int8" and weights.shape == (3, 3, 3, 8)


def test_int8_precision_without_plan_is_refused(tpu: Any) -> None:
    with pytest.raises((nx.QuantizationError, nx.CompilationError), match="calibration"):
        nx.compile(_mlp(), device="tpu:0", precision="int8")(_x((1, 10)))
