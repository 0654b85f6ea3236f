"""Tensor dispatch on the CPU backend: operators, results, errors with the device named."""

from __future__ import annotations

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.plugins.backend import Placement


def test_placement_resolved_once_per_device() -> None:
    a = nx.asarray([1.0, 2.0])
    b = nx.ones(2)
    assert isinstance(a._p, Placement)
    assert a._p is b._p, "tensors on one device share one placement: dispatch is an identity check"
    assert (a + b)._p is a._p
    assert a._p.ops is nx.backend("cpu").ops


def test_scalar_results_are_0d_tensors() -> None:
    x = nx.asarray([[1.0, 2.0], [3.0, 4.0]])
    s = nx.sum(x)
    assert isinstance(s, nx.Tensor) and s.shape == () and s.dtype == nx.float32
    assert isinstance(s.native, np.ndarray), "a NumPy scalar result is stored as a 0-d array"
    z = nx.asarray(2.0) * nx.asarray(3.0)
    assert isinstance(z.native, np.ndarray) and float(z) == 6.0
    assert nx.asarray(np.float32(5)).shape == ()


def test_operators_and_reflected_operators() -> None:
    a = np.array([1.0, 2.0, 4.0], dtype=np.float32)
    x = nx.asarray(a)
    np.testing.assert_allclose((2.0 - x).numpy(), 2.0 - a)
    np.testing.assert_allclose((1.0 / x).numpy(), 1.0 / a)
    np.testing.assert_allclose((2.0 ** x).numpy(), 2.0**a)
    np.testing.assert_array_equal((x >= 2.0).numpy(), a >= 2.0)
    i = nx.asarray([1, 2, 3])
    np.testing.assert_array_equal((i << 1).numpy(), [2, 4, 6])
    np.testing.assert_array_equal((~i).numpy(), ~np.array([1, 2, 3]))
    np.testing.assert_array_equal((7 % i).numpy(), 7 % np.array([1, 2, 3]))


def test_inplace_operators_modify_in_place_and_check_dtype() -> None:
    x = nx.asarray([1.0, 2.0])
    view = x[:1]
    same = x
    x += 1.0
    assert x is same
    np.testing.assert_array_equal(x.numpy(), [2.0, 3.0])
    np.testing.assert_array_equal(view.numpy(), [2.0], "a view sees in-place writes to its base")
    n = nx.asarray([1, 2])
    with pytest.raises(nx.UnsupportedDTypeError, match="in-place"):
        n += 1.5
    np.testing.assert_array_equal(n.numpy(), [1, 2])
    with pytest.raises(nx.ShapeError, match="shape"):
        x += nx.ones((3, 2))


def test_numpy_arrays_are_not_silently_combined() -> None:
    x = nx.asarray([1.0, 2.0])
    with pytest.raises(TypeError, match="nx.asarray"):
        x + np.ones(2)
    with pytest.raises(TypeError):
        np.ones(2, dtype=np.float32) + x
    with pytest.raises(TypeError, match="neurenix Tensors or Python scalars"):
        nx.add(x, [1.0, 2.0])


def test_shape_errors_name_the_device_and_keep_the_cause() -> None:
    a, b = nx.ones((2, 3)), nx.ones((4, 3))
    with pytest.raises(nx.ShapeError, match=r"add on cpu:0 .*\(2, 3\), \(4, 3\)") as info:
        a + b
    assert isinstance(info.value.__cause__, ValueError)
    with pytest.raises(nx.ShapeError, match="matmul on cpu:0"):
        a @ a
    with pytest.raises(nx.ShapeError):
        nx.reshape(a, (5,))
    with pytest.raises(nx.ShapeError, match="cpu:0"):
        nx.concat([nx.ones((2, 2)), nx.ones((3, 3))], axis=0)


def test_other_native_errors_become_neurenix_errors() -> None:
    with pytest.raises(nx.OperationError, match="linalg.inv on cpu:0") as info:
        nx.linalg.inv(nx.zeros((2, 2)))
    assert isinstance(info.value.__cause__, np.linalg.LinAlgError)
    with pytest.raises(nx.UnsupportedDTypeError, match="bitwise_and on cpu:0"):
        nx.bitwise_and(nx.ones(2), nx.ones(2))


def test_tensor_scalar_conversions_need_one_element() -> None:
    with pytest.raises(nx.ShapeError, match="one element"):
        float(nx.ones(3))
    assert int(nx.asarray([[7]])) == 7
    with pytest.raises(TypeError, match="integer"):
        [0, 1][nx.asarray(1.0)]
    assert [0, 1][nx.asarray(1)] == 1


def test_tensor_spelling_and_repr() -> None:
    t = nx.Tensor([[1, 2], [3, 4]], device="cpu")
    assert t.shape == (2, 2) and t.dtype == nx.int64 and t.device == nx.Device("cpu:0")
    assert "device='cpu:0'" in repr(t)
    assert t.ndim == 2 and t.size == 4 and t.nbytes == 32 and len(t) == 2
    assert [r.tolist() for r in t] == [[1, 2], [3, 4]]
    with pytest.raises(nx.ShapeError):
        _ = nx.ones((2, 2, 2)).T


def test_bad_devices_are_clear_errors() -> None:
    with pytest.raises(nx.InvalidDeviceError, match="cpu:x"):
        nx.zeros(2, device="cpu:x")
    with pytest.raises(nx.DeviceNotFoundError, match=r"cpu:3 does not exist"):
        nx.zeros(2, device="cpu:3")
    with pytest.raises(nx.DeviceNotFoundError, match="no installed backend serves warp"):
        nx.asarray([1.0], device="warp:0")
    with pytest.raises(nx.DeviceNotFoundError):
        nx.ones(2).to("cpu:1")
    with pytest.raises(nx.ShapeError, match="non-negative"):
        nx.zeros((2, -1))


def test_fallback_for_missing_op_stays_on_cpu() -> None:
    # The CPU backend runs everything natively: an unknown op name is an error, not a fallback.
    from neurenix_core.tensor.tensor import _call

    with pytest.raises(nx.UnsupportedOperationError, match="nosuchop is not available on cpu:0"):
        _call("nosuchop", (nx.ones(2),))


def test_out_of_range_index_names_the_device() -> None:
    x = nx.ones((2, 3))
    with pytest.raises(IndexError, match=r"cpu:0: index \(5, 0\) does not fit shape \(2, 3\)"):
        x[5, 0]
    assert x.shape == (2, 3)
