"""Host inputs on every compiled edgetpu path: nx.compile, EdgeTPUBackend.optimize_model and a
loaded .tflite. NumPy in gives NumPy out (as LiteRT); everything else follows the core's rule
(neurenix_core.graph.compile.inputs)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from neurenix_edgetpu.api import EdgeTPUBackend

import neurenix_core as nx
from neurenix_core.testing.compiled import check_input_rule, other_accelerator

EDGE = nx.Device("edgetpu", 0)


def _mlp() -> Any:
    from neurenix_core import nn

    nn.manual_seed(3)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))


def _x() -> np.ndarray:
    return np.random.default_rng(6).standard_normal((1, 6)).astype(np.float32)


@pytest.fixture
def another(edgetpu: Any) -> nx.Device:
    other = other_accelerator(EDGE)
    if other is None:
        pytest.skip("no second accelerator to refuse")
    return other


def test_nx_compile_takes_host_inputs(edgetpu: Any, another: nx.Device) -> None:
    check_input_rule(nx.compile(_mlp(), device="edgetpu:0", precision="fp32"), _x(), EDGE)


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_optimize_model_takes_host_inputs(edgetpu: Any, another: nx.Device, precision: str) -> None:
    calibration = [np.random.default_rng(s).standard_normal((1, 6)).astype(np.float32) for s in range(8)]
    model = EdgeTPUBackend().optimize_model(_mlp(), quantize=precision == "int8", precision=precision, calibration=calibration, input_shape=(1, 6))
    assert type(model(_x())) is np.ndarray, "NumPy in, NumPy out, as LiteRT"
    check_input_rule(model, _x(), EDGE)
    with pytest.raises(nx.DeviceMismatchError, match=rf"{another}.*x\.to\('edgetpu:0'\)"):
        model(nx.asarray(_x(), device=another))


def test_loaded_model_host_outputs(edgetpu: Any, another: nx.Device) -> None:
    backend = EdgeTPUBackend()
    data = backend.optimize_model(_mlp(), quantize=False, precision="fp32", input_shape=(1, 6)).tflite_bytes
    model = backend.load_model(data, outputs="host")
    out = model(nx.asarray(_x(), device="cpu"))
    assert type(out) is np.ndarray and out.shape == (1, 3)
    check_input_rule(model, _x(), EDGE, expect_device=False)


def test_compiled_fast_path_converts_other_float_dtypes(edgetpu: Any) -> None:
    """nx.compile's per-call path hands the array straight to LiteRT (``fast_entry``); an edgetpu
    tensor of the compiled shape but another float dtype must still run as float32, as the
    checked path does, not fail inside LiteRT."""
    compiled = nx.compile(_mlp(), device="edgetpu:0", precision="fp32", progress=False)
    x = _x()
    expected = compiled(nx.asarray(x, device="edgetpu:0")).numpy()  # compiles; sets the fast path
    assert compiled.native(x.shape).fast_entry(x.shape) is not None, "plain float32 edges: the core calls LiteRT directly"
    wide = nx.asarray(x.astype(np.float64), device="edgetpu:0")
    assert wide.dtype == np.float64
    np.testing.assert_array_equal(compiled(wide).numpy(), expected)


def test_runner_refuses_what_litert_refuses(edgetpu: Any) -> None:
    model = EdgeTPUBackend().optimize_model(_mlp(), quantize=False, precision="fp32", input_shape=(1, 6))
    runner = type(model.runner)(model.backend.litert.Interpreter(model_content=model.tflite_bytes), "the test model")
    with pytest.raises(nx.ShapeError, match=r"the test model: LiteRT refused the input .*float32 array of shape \(1, 6\)"):
        runner.invoke1(np.zeros((1, 6), np.int32))
    np.testing.assert_array_equal(runner.invoke1(_x()), model(_x()))
