"""The array-API namespace surface: functions, named tuples, sequences, where/clip/take/astype."""

from __future__ import annotations

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.plugins.backend import ARRAY_API_FUNCTIONS, LINALG_FUNCTIONS


def test_every_standard_function_is_exported() -> None:
    missing = [n for n in ARRAY_API_FUNCTIONS if not callable(getattr(nx, n, None))]
    assert missing == []
    assert [n for n in LINALG_FUNCTIONS if not callable(getattr(nx.linalg, n, None))] == []
    assert nx.__array_api_version__ == "2024.12"
    assert nx.asarray([1.0]).__array_namespace__() is nx


def test_unique_results_are_named_tuples_of_tensors() -> None:
    r = nx.unique_all(nx.asarray([2, 1, 2]))
    assert type(r).__name__ == "UniqueAllResult"
    assert all(isinstance(v, nx.Tensor) for v in r)
    np.testing.assert_array_equal(r.values.numpy(), [1, 2])
    np.testing.assert_array_equal(r.counts.numpy(), [1, 2])
    inv = nx.unique_inverse(nx.asarray([2, 1, 2]))
    np.testing.assert_array_equal(inv.inverse_indices.numpy(), [1, 0, 1])


def test_concat_and_stack_take_any_sequence_of_tensors() -> None:
    parts = [nx.asarray([1.0, 2.0]), nx.asarray([3.0, 4.0])]
    np.testing.assert_array_equal(nx.concat(parts).numpy(), [1, 2, 3, 4])
    np.testing.assert_array_equal(nx.concat(tuple(parts)).numpy(), [1, 2, 3, 4])
    np.testing.assert_array_equal(nx.stack(p for p in parts).numpy(), [[1, 2], [3, 4]])
    with pytest.raises(TypeError, match="neurenix Tensor"):
        nx.concat([parts[0], np.ones(2)])
    with pytest.raises(ValueError, match="at least one"):
        nx.stack([])


def test_clip_with_tensor_bounds_and_where_with_scalars() -> None:
    x = nx.asarray([-2.0, 0.5, 3.0])
    out = nx.clip(x, nx.asarray([-1.0, 1.0, 0.0]), nx.asarray(2.0))
    np.testing.assert_array_equal(out.numpy(), [-1.0, 1.0, 2.0])
    assert out.dtype == nx.float32
    w = nx.where(x > 0.0, 1.0, -1.0)
    np.testing.assert_array_equal(w.numpy(), [-1.0, 1.0, 1.0])
    w2 = nx.where(x > 0.0, x, 0.0)
    assert w2.dtype == nx.float32, "a Python scalar must not promote float32 to float64"


def test_take_astype_and_device_keyword() -> None:
    x = nx.asarray([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    np.testing.assert_array_equal(nx.take(x, nx.asarray([2, 0]), axis=1).numpy(), [[3, 1], [6, 4]])
    i = nx.astype(x, nx.int8)
    assert i.dtype == nx.int8 and i.device == x.device
    b = nx.astype(x, "bfloat16", device="cpu")
    assert str(b.dtype) == "bfloat16"
    view = nx.astype(x, nx.float32, copy=False)
    assert view.native is x.native or np.shares_memory(view.native, x.native)
    assert nx.zeros((2,), device=nx.Device("cpu", 0)).device == nx.Device("cpu:0")


def test_boolean_indexing_and_setitem() -> None:
    x = nx.arange(6, dtype=nx.float32)
    np.testing.assert_array_equal(x[x > 2.0].numpy(), [3, 4, 5])
    x[x > 2.0] = 0.0
    x[0] = nx.asarray(9.0)
    np.testing.assert_array_equal(x.numpy(), [9, 1, 2, 0, 0, 0])
    with pytest.raises(TypeError, match="nx.asarray"):
        x[:2] = np.ones(2)
    with pytest.raises(nx.ShapeError):
        x[:2] = nx.ones(3)


def test_namespace_info() -> None:
    info = nx.__array_namespace_info__()
    assert nx.Device("cpu:0") in info.devices()
    assert info.default_dtypes(device="cpu")["real floating"] == nx.float32
    # dtypes() names the standard's dtypes only; float16 and bfloat16 are listed as extra dtypes.
    assert set(info.dtypes(device="cpu", kind="real floating")) == {"float32", "float64"}
    caps = info.capabilities(device="cpu")
    assert caps["boolean indexing"] is True and caps["neurenix"]["linalg"] is True
    assert caps["neurenix"]["extra dtypes"] == ["float16", "bfloat16"]
