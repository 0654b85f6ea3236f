"""Host inputs on every compiled npu path: nx.compile, NPUBackend.optimize_model (neurenix
models and PyTorch modules). The rule and its checks live once in the core
(neurenix_core.graph.compile.inputs, neurenix_core.testing.compiled)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from neurenix_npu_openvino.api import NPUBackend

import neurenix_core as nx
from neurenix_core.testing.compiled import check_input_rule, other_accelerator

NPU = nx.Device("npu", 0)


def _mlp() -> Any:
    from neurenix_core import nn

    nn.manual_seed(1)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))


def _x() -> np.ndarray:
    return np.random.default_rng(4).standard_normal((2, 6)).astype(np.float32)


@pytest.fixture
def another(npu: Any) -> nx.Device:
    other = other_accelerator(NPU)
    if other is None:
        pytest.skip("no second accelerator to refuse (install neurenix-tpu; CI emulates it)")
    return other


def test_nx_compile_takes_host_inputs(npu: Any, another: nx.Device) -> None:
    compiled = nx.compile(_mlp(), device="npu:0", precision="fp32")
    results = check_input_rule(compiled, _x(), NPU)
    np.testing.assert_allclose(results["cpu tensor"].numpy(), _mlp()(nx.asarray(_x())).numpy(), rtol=1e-5, atol=1e-6)


def test_optimize_model_takes_host_inputs_and_refuses_a_tpu_tensor(npu: Any, another: nx.Device) -> None:
    fast = NPUBackend().optimize_model(_mlp(), precision="fp32")
    check_input_rule(fast, _x(), NPU)
    with pytest.raises(nx.DeviceMismatchError, match=rf"{another}.*x\.to\('npu:0'\)"):
        fast(nx.asarray(_x(), device=another))


def test_optimize_model_host_outputs(npu: Any, another: nx.Device) -> None:
    fast = NPUBackend().optimize_model(_mlp(), precision="fp32", outputs="host")
    out = fast(nx.asarray(_x(), device="cpu"))
    assert type(out) is np.ndarray and out.shape == (2, 3)
    check_input_rule(fast, _x(), NPU, expect_device=False)


def test_torch_module_through_openvino_takes_host_inputs(npu: Any, another: nx.Device) -> None:
    import torch

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU())
    fast = NPUBackend().optimize_model(module, precision="fp32", example_input=torch.ones(2, 6))
    assert fast.native is not None, "the torch path compiles through openvino.convert_model"
    check_input_rule(fast, _x(), NPU)


def test_eager_model_on_npu_keeps_the_strict_device_rule(npu: Any) -> None:
    model = _mlp().to("npu:0")
    with pytest.raises(nx.DeviceMismatchError, match="npu:0"):
        model(nx.Tensor(_x()))  # an eager layer combines its npu weights with this cpu tensor: refused
    assert model(nx.asarray(_x(), device="npu:0")).device == NPU
