"""The compiled-model input rule (neurenix_core.graph.compile.inputs) on the CPU backend's nx.compile.

Every plugin's compiled paths run the same checks (``neurenix_core.testing.compiled``) in its
own tests; the refusal of a Tensor on another accelerator is tested here with a plugin that
serves two devices (tests/test_compile_cpu.py) and in every plugin folder.
"""

from __future__ import annotations

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.errors import CompilationError, ConfigurationError, DeviceMismatchError
from neurenix_core.graph.compile.inputs import OUTPUTS, deliver, host_array, to_device_input
from neurenix_core.testing.compiled import ArrayOnly, DeviceBuffer, HostBuffer, check_input_rule

CPU = nx.Device("cpu", 0)


def _mlp() -> nn.Module:
    nn.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def _x() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)


def test_every_host_form_gives_the_same_result_on_the_device() -> None:
    model = _mlp()
    results = check_input_rule(nx.compile(model, device="cpu"), _x(), "cpu")
    want = model(nx.asarray(_x())).numpy()
    np.testing.assert_allclose(results["cpu tensor"].numpy(), want, rtol=1e-6, atol=1e-7)


def test_host_outputs_are_numpy() -> None:
    compiled = nx.compile(_mlp(), device="cpu", outputs="host")
    out = compiled(nx.asarray(_x()))
    assert type(out) is np.ndarray and out.shape == (3, 2)
    check_input_rule(compiled, _x(), "cpu", expect_device=False)


def test_unknown_outputs_choice_is_refused_with_the_choices() -> None:
    with pytest.raises(ConfigurationError, match="'device'.*'host'"):
        nx.compile(_mlp(), device="cpu", outputs="numpy")
    assert OUTPUTS == ("device", "host")


def test_a_tensor_on_the_device_is_used_without_a_copy() -> None:
    t = nx.asarray(_x())
    backend = nx.backend("cpu")
    assert to_device_input(t, 0, CPU, backend) is t.native


def test_device_memory_and_non_numbers_are_refused() -> None:
    with pytest.raises(DeviceMismatchError, match=r"input 1 .*DLPack device \(2, 0\).*x\.to\('cpu:0'\)"):
        host_array(DeviceBuffer(_x()), 1, CPU)
    with pytest.raises(CompilationError, match="input 0 has dtype bool"):
        host_array(np.ones(3, bool), 0, CPU)
    with pytest.raises(CompilationError, match="complex"):
        nx.compile(_mlp(), device="cpu")(np.ones((3, 4), np.complex64))


def test_host_forms_become_float32_host_arrays() -> None:
    x = _x()
    for value in (x.astype(np.float64), HostBuffer(x), ArrayOnly(x), x.tolist(), nx.asarray(x.astype(np.float16))):
        arr = host_array(value, 0, CPU)
        assert arr.dtype == np.float32 and arr.shape == (3, 4)
    np.testing.assert_array_equal(host_array(HostBuffer(x), 0, CPU), x)


def test_deliver_gives_tensors_or_numpy_for_every_output() -> None:
    backend = nx.backend("cpu")
    pair = (np.ones(2, np.float32), np.zeros(3, np.float32))
    on_device = deliver(pair, CPU, backend, "device")
    on_host = deliver(pair, CPU, backend, "host")
    assert all(isinstance(t, nx.Tensor) and t.device == CPU for t in on_device)
    assert all(type(a) is np.ndarray for a in on_host) and [a.shape for a in on_host] == [(2,), (3,)]


def test_eager_models_keep_the_strict_device_rule() -> None:
    if not nx.devices("tpu"):
        pytest.skip("the strict eager rule needs a second device type (neurenix-tpu, emulated in CI)")
    model = _mlp().to("tpu:0")
    with pytest.raises(DeviceMismatchError, match="tpu:0"):
        model(nx.asarray(_x(), device="cpu"))
