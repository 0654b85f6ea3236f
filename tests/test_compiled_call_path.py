"""The compiled-model call path (``Compiled.__call__``'s one-input fast path and
``tensor.wrapping``): same results, same memory accounting and same errors as the general path.
No timing is asserted; benchmarks/*.py measure the cost."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.tensor.tensor import Tensor, wrapping


@pytest.fixture
def cpu() -> Iterator[Any]:
    nx.set_memory_limit("cpu", None)
    yield nx.backend("cpu").placement(0)
    nx.set_memory_limit("cpu", None)


def _in_use() -> int:
    gc.collect()
    return nx.memory_stats("cpu").in_use


def test_wrapping_charges_and_releases_exactly_what_wrap_does(cpu: Any) -> None:
    out = np.arange(12, dtype=np.float32).reshape(3, 4)
    run = wrapping(lambda x: out * x, cpu)
    before = _in_use()
    t = run(np.float32(2.0))
    assert type(t) is Tensor and t.device == nx.Device("cpu", 0) and t._base is None
    np.testing.assert_array_equal(t.numpy(), out * 2)
    assert _in_use() == before + out.nbytes
    del t
    assert _in_use() == before


def test_wrapping_tuples_tensors_and_non_array_results(cpu: Any) -> None:
    a, b = np.ones(3, np.float32), np.zeros(2, np.float32)
    pair = wrapping(lambda x: (a, b), cpu)(None)
    assert isinstance(pair, tuple) and [type(p) for p in pair] == [Tensor, Tensor]
    np.testing.assert_array_equal(pair[1].numpy(), b)
    one = wrapping(lambda x: [a], cpu)(None)
    assert type(one) is Tensor  # a one-element list unpacks, as the general runner's results do
    ready = nx.asarray(a, device="cpu")
    assert wrapping(lambda x: ready, cpu)(None) is ready  # a Tensor result is passed through
    scalar = wrapping(lambda x: np.float32(3.5), cpu)(None)  # a NumPy scalar is coerced to a 0-d array
    assert type(scalar) is Tensor and type(scalar._data) is np.ndarray and scalar.shape == () and float(scalar.numpy()) == 3.5


def test_wrapping_refuses_past_the_memory_limit_before_making_the_tensor(cpu: Any) -> None:
    big = np.ones(1000, np.float32)
    now = _in_use()
    nx.set_memory_limit("cpu", now + 100)
    with pytest.raises(nx.OutOfMemoryError) as info:
        wrapping(lambda x: big, cpu)(None)
    assert info.value.requested == big.nbytes and info.value.in_use == now
    assert _in_use() == now


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
