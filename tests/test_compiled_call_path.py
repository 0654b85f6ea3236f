"""The compiled-model call path (``Compiled.__call__``'s one-input fast path, which wraps the
result inline, and ``tensor.wrap_results``): same results, same memory accounting and same errors
as the general path.
No timing is asserted; benchmarks/*.py measure the cost."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.tensor.tensor import Tensor, wrap_results


@pytest.fixture
def cpu() -> Iterator[Any]:
    nx.set_memory_limit("cpu", None)
    yield nx.backend("cpu").placement(0)
    nx.set_memory_limit("cpu", None)


def _in_use() -> int:
    gc.collect()
    return nx.memory_stats("cpu").in_use


def test_wrap_results_tuples_tensors_and_non_array_results(cpu: Any) -> None:
    a, b = np.ones(3, np.float32), np.zeros(2, np.float32)
    pair = wrap_results((a, b), cpu)
    assert isinstance(pair, tuple) and [type(p) for p in pair] == [Tensor, Tensor]
    np.testing.assert_array_equal(pair[1].numpy(), b)
    one = wrap_results([a], cpu)
    assert type(one) is Tensor  # a one-element list unpacks, as the general runner's results do
    ready = nx.asarray(a, device="cpu")
    assert wrap_results(ready, cpu) is ready  # a Tensor result is passed through
    scalar = wrap_results(np.float32(3.5), cpu)  # a NumPy scalar is coerced to a 0-d array
    assert type(scalar) is Tensor and type(scalar._data) is np.ndarray and scalar.shape == () and float(scalar.numpy()) == 3.5


def _npu_or_skip() -> None:
    if "npu" not in {str(d.type) for d in nx.devices()}:
        pytest.skip("no npu device (install neurenix-npu-openvino; CI emulates it with NEURENIX_EMULATE=npu)")


def test_compiled_fast_path_matches_the_general_path_and_falls_back_on_other_shapes() -> None:
    _npu_or_skip()
    from neurenix_core import nn

    nn.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    compiled = nx.compile(model, device="npu:0", precision="fp32")
    rng = np.random.default_rng(0)
    x1 = rng.standard_normal((2, 8)).astype(np.float32)
    first = compiled(x1)  # host input: the general path, compiles (2, 8) and sets the fast path
    assert compiled._fast is not None and compiled._fast[2] == (2, 8)
    t = nx.asarray(x1, device="npu:0")
    fast = compiled(t)  # npu tensor of the compiled shape: the fast path
    assert type(fast) is Tensor and fast.device == nx.Device("npu", 0)
    np.testing.assert_array_equal(fast.numpy(), first.numpy())
    x2 = rng.standard_normal((5, 8)).astype(np.float32)
    other = compiled(nx.asarray(x2, device="npu:0"))  # another shape: general path, second compile
    assert other.shape == (5, 4) and len(compiled.compiled_shapes) == 2
    np.testing.assert_allclose(other.numpy(), model(nx.asarray(x2)).numpy(), rtol=1e-5, atol=1e-5)
    with pytest.raises(nx.ShapeError, match="takes 1 input"):
        compiled(t, t)


def _fast_npu_model() -> tuple[Any, Tensor]:
    from neurenix_core import nn

    nn.manual_seed(1)
    compiled = nx.compile(nn.Sequential(nn.Linear(8, 64)), device="npu:0", precision="fp32")
    t = nx.asarray(np.ones((4, 8), np.float32), device="npu:0")
    compiled(t)  # compiles (4, 8) and sets the fast path
    assert compiled._fast is not None
    return compiled, t


def _npu_in_use() -> int:
    gc.collect()
    return nx.memory_stats("npu:0").in_use


def test_compiled_fast_path_charges_and_releases_exactly_the_result() -> None:
    _npu_or_skip()
    compiled, t = _fast_npu_model()
    before = _npu_in_use()
    out = compiled(t)
    assert type(out) is Tensor and out._base is None and out.shape == (4, 64)
    assert _npu_in_use() == before + out.numpy().nbytes
    del out
    assert _npu_in_use() == before


def test_compiled_fast_path_refuses_past_the_memory_limit_before_making_the_tensor() -> None:
    _npu_or_skip()
    compiled, t = _fast_npu_model()
    now = _npu_in_use()
    nx.set_memory_limit("npu:0", now + 100)  # the (4, 64) float32 result needs 1024 bytes
    try:
        with pytest.raises(nx.OutOfMemoryError) as info:
            compiled(t)
        assert info.value.requested == 4 * 64 * 4 and info.value.in_use == now
        assert _npu_in_use() == now
    finally:
        nx.set_memory_limit("npu:0", None)


def test_compiled_fast_path_takes_only_the_compiled_input_dtype() -> None:
    """A device tensor of the compiled shape but another dtype goes the general way, where the
    plugin's ``_run`` decides (OpenVINO's refuses, naming the cast): the plugin's fast entry only
    ever sees the model's own input dtype."""
    _npu_or_skip()
    compiled, t = _fast_npu_model()
    seen: list[Any] = []
    p, shape_of, shape, call, *rest = compiled._fast
    compiled._fast = (p, shape_of, shape, lambda a: seen.append(a.dtype) or call(a), *rest)
    compiled(t)
    wide = nx.asarray(t.numpy().astype(np.float64), device="npu:0")
    with pytest.raises(nx.UnsupportedDTypeError, match=r"must be float32, got float64"):
        compiled(wide)
    assert seen == [np.dtype(np.float32)], "only the float32 call took the fast path"
