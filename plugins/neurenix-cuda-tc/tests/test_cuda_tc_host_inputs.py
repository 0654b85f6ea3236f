"""Host inputs on every compiled cuda path: nx.compile and TensorCoresBackend.optimize_model.
Torch tensors keep torch semantics (the optimised model is a torch module); everything else
follows the core's rule (neurenix_core.graph.compile.inputs)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.testing.compiled import check_input_rule, other_accelerator

CUDA = nx.Device("cuda", 0)


def _mlp() -> Any:
    from neurenix_core import nn

    nn.manual_seed(2)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))


def _x() -> np.ndarray:
    return np.random.default_rng(5).standard_normal((2, 6)).astype(np.float32)


@pytest.fixture
def another(cuda: Any) -> nx.Device:
    other = other_accelerator(CUDA)
    if other is None:
        pytest.skip("no second accelerator to refuse (install neurenix-tpu; CI emulates it)")
    return other


def test_nx_compile_takes_host_inputs(cuda: Any, another: nx.Device) -> None:
    check_input_rule(nx.compile(_mlp(), device="cuda:0", precision="fp32"), _x(), CUDA)


def test_optimize_model_takes_host_inputs_and_refuses_other_accelerators(tc: Any, another: nx.Device) -> None:
    import torch

    fast = tc.optimize_model(_mlp(), precision="fp32")
    check_input_rule(fast, _x(), CUDA)
    with pytest.raises(nx.DeviceMismatchError, match=rf"{another}.*x\.to\('cuda:0'\)"):
        fast(nx.asarray(_x(), device=another))
    with torch.no_grad():
        out = fast(torch.from_numpy(_x()))
    assert isinstance(out, torch.Tensor), "torch tensors in, torch tensors out"


def test_optimize_model_host_outputs(tc: Any, another: nx.Device) -> None:
    fast = tc.optimize_model(_mlp(), precision="fp32", outputs="host")
    out = fast(nx.asarray(_x(), device="cpu"))
    assert type(out) is np.ndarray and out.shape == (2, 3)
    check_input_rule(fast, _x(), CUDA, expect_device=False)


def test_optimize_model_on_a_device_tensor_and_after_moving_the_model(tc: Any) -> None:
    """A cuda Tensor goes through the model's one-input path (device resolved once): the result
    is a cuda Tensor equal to torch's own call; ``.to(dtype)`` on the model is seen by the next
    call (the cached parameter device is forgotten, the input follows the weights)."""
    import torch

    fast = tc.optimize_model(_mlp(), precision="fp32", channels_last=False)
    x = nx.asarray(_x(), device="cuda:0")
    out = fast(x)
    assert isinstance(out, nx.Tensor) and out.device == CUDA
    with torch.no_grad():
        expect = fast.inner(torch.from_numpy(_x()).to(next(fast.inner.parameters()).device)).cpu().numpy()
    np.testing.assert_allclose(out.numpy(), expect, rtol=1e-6, atol=1e-6)
    assert fast._param_device is not None  # read once, on the first call
    fast.to(torch.float64)
    assert fast._param_device is None  # .to() goes through _apply: read again on the next call
    fast.dtype = torch.float64
    again = fast(x)
    assert again.dtype == np.float64 and again.device == CUDA
    np.testing.assert_allclose(again.numpy(), expect, rtol=1e-5, atol=1e-5)
