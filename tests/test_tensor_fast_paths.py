"""The eager fast paths (tensor.py: _make_unary, _where, _call1, _own1, x.T, x[basic], cast) give
what the general path gives: values, dtype, the bytes charged, the owner a view keeps alive, the
autograd tape, and the typed errors naming the device (benchmarks/dispatch.py times them)."""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.tensor import tensor as tensor_module
from neurenix_core.tensor.tensor import Tensor, _call_general


def _x() -> Tensor:
    return nx.asarray(np.arange(1.0, 13.0, dtype=np.float32).reshape(3, 4), device="cpu")


# (label, fast form, op table name, general-path args, general-path kwargs); x is _x(), c a mask.
CASES: list[tuple[str, Callable[[Tensor, Tensor], Any], str, Callable[[Tensor, Tensor], tuple[Any, ...]], dict[str, Any]]] = [
    ("exp", lambda x, c: nx.exp(x), "exp", lambda x, c: (x,), {}),
    ("-x", lambda x, c: -x, "negative", lambda x, c: (x,), {}),
    ("abs(x)", lambda x, c: abs(x), "abs", lambda x, c: (x,), {}),
    ("matrix_transpose", lambda x, c: nx.matrix_transpose(x), "matrix_transpose", lambda x, c: (x,), {}),
    ("x.mT", lambda x, c: x.mT, "matrix_transpose", lambda x, c: (x,), {}),
    ("x.T", lambda x, c: x.T, "permute_dims", lambda x, c: (x, (1, 0)), {}),
    ("permute_dims", lambda x, c: nx.permute_dims(x, (1, 0)), "permute_dims", lambda x, c: (x, (1, 0)), {}),
    ("reshape", lambda x, c: nx.reshape(x, (12,)), "reshape", lambda x, c: (x, (12,)), {}),
    ("reshape copy", lambda x, c: nx.reshape(x, (12,), copy=True), "reshape", lambda x, c: (x, (12,)), {"copy": True}),
    ("mean(axis=0)", lambda x, c: nx.mean(x, axis=0), "mean", lambda x, c: (x,), {"axis": 0}),
    ("mean()", lambda x, c: nx.mean(x), "mean", lambda x, c: (x,), {}),
    ("max(axis=1, keepdims)", lambda x, c: nx.max(x, axis=1, keepdims=True), "max", lambda x, c: (x,), {"axis": 1, "keepdims": True}),
    ("sum()", lambda x, c: nx.sum(x), "sum", lambda x, c: (x,), {}),
    ("sort", lambda x, c: nx.sort(x, axis=0, descending=True), "sort", lambda x, c: (x,), {"axis": 0, "descending": True}),
    ("where", lambda x, c: nx.where(c, x, -x), "where", lambda x, c: (c, x, -x), {}),
    ("astype", lambda x, c: nx.astype(x, nx.float64), "astype", lambda x, c: (x, np.dtype("float64")), {"copy": True}),
    ("astype copy=False", lambda x, c: nx.astype(x, nx.float32, copy=False), "astype", lambda x, c: (x, np.dtype("float32")), {"copy": False}),
]


@pytest.mark.parametrize(("label", "fast", "name", "args", "kwargs"), CASES, ids=[c[0] for c in CASES])
def test_fast_path_is_the_general_path(label: str, fast: Callable[..., Any], name: str, args: Callable[..., Any], kwargs: dict[str, Any]) -> None:
    x = _x()
    c = x > 6.0
    got = fast(x, c)
    want = _call_general(name, args(x, c), dict(kwargs))
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert got.dtype == want.dtype and got.shape == want.shape, label
    assert got._nbytes == want._nbytes, f"{label}: charged {got._nbytes} bytes, the general path {want._nbytes}"
    assert got._base is want._base, f"{label}: a view keeps the same owner alive (or none for a new buffer)"


def test_views_of_views_keep_the_owner_and_cost_nothing() -> None:
    gc.collect()
    before = nx.memory_stats("cpu").in_use
    x = _x()
    row = x[1:3]  # a view of x
    views = [row.T, row[0], row[:, 1], nx.reshape(row, (8,)), -row]
    assert row._base is x and views[0]._base is x and views[1]._base is x and views[2]._base is x
    assert views[4]._base is None and views[4]._nbytes == 32  # -row is a new buffer
    gc.collect()
    assert nx.memory_stats("cpu").in_use - before == 48 + 32
    del x, row
    gc.collect()
    np.testing.assert_array_equal(views[1].numpy(), [5.0, 6.0, 7.0, 8.0])  # the owner lives on
    del views
    gc.collect()
    assert nx.memory_stats("cpu").in_use == before


@pytest.mark.parametrize("key", [0, -1, (1, 2), (slice(None), 1), (Ellipsis, None), slice(1, None, 2)], ids=repr)
def test_basic_indexing_is_numpy_indexing(key: Any) -> None:
    x = _x()
    got = x[key]
    want = x.numpy()[key]
    np.testing.assert_array_equal(got.numpy(), want)
    assert got.dtype == want.dtype and got.shape == np.shape(want)
    # A view of x charges nothing; a 0-d result (NumPy gives a scalar) is a new buffer.
    assert (got._base is x) == (np.ndim(want) > 0) and got._nbytes == (0 if np.ndim(want) > 0 else 4)


def test_fast_paths_record_for_autograd() -> None:
    x = nx.asarray(np.array([[0.5, -1.0], [2.0, 0.25]], dtype=np.float32), device="cpu").requires_grad_()
    mask = nx.asarray(np.array([[True, False], [False, True]]), device="cpu")
    loss = nx.sum(nx.where(mask, nx.exp(x), -x).T[0]) + nx.sum(nx.mean(x, axis=0)) + nx.sum(nx.astype(x, nx.float64))
    loss.backward()
    a = x.numpy()
    # d/dx: where picks exp on the mask and -x elsewhere; .T[0] is column 0; mean over axis 0 gives
    # 1/2 each; astype to float64 and sum gives 1 each.
    where_grad = np.where(mask.numpy(), np.exp(a), -1.0) * np.array([[1.0, 0.0], [1.0, 0.0]])
    np.testing.assert_allclose(x.grad.numpy(), where_grad + 0.5 + 1.0, rtol=1e-6)  # type: ignore[union-attr]
    assert tensor_module.record is None or x.requires_grad  # recording stays on only while needed


def test_fast_path_errors_are_typed_and_name_the_device() -> None:
    v = nx.asarray(np.arange(3.0, dtype=np.float32), device="cpu")
    with pytest.raises(nx.ShapeError, match="cpu:0"):
        _ = v.T
    with pytest.raises(nx.NeurenixError, match="matrix_transpose on cpu:0") as info:
        nx.matrix_transpose(v)
    assert isinstance(info.value.__cause__, ValueError)
    with pytest.raises(IndexError, match="cpu:0"):
        v[5]
    with pytest.raises(nx.ShapeError, match="reshape on cpu:0"):
        nx.reshape(v, (2,))
    with pytest.raises(TypeError, match="neurenix Tensor"):
        nx.exp(np.arange(3.0))


def test_operands_on_two_devices_are_refused_on_every_fast_path() -> None:
    other = next((d for d in ("npu", "tpu", "edgetpu", "cuda") if nx.devices(d)), None)
    if other is None:
        pytest.skip("needs a second device type (the plugins, emulated in CI)")
    x = _x()
    y = nx.asarray(x.numpy(), device=f"{other}:0")
    c = x > 6.0
    for combine in (lambda: nx.where(c, x, y), lambda: nx.where(c, y, x), lambda: x + y, lambda: nx.maximum(y, x)):
        with pytest.raises(nx.DeviceMismatchError, match=f"{other}:0"):
            combine()
