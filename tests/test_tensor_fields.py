"""Every eager fast path makes the Tensor the general path makes, field by field.

The per-op fast paths in ``neurenix_core/tensor/tensor.py`` (operators, unary and ``where``
functions, ``_call``'s one- and several-operand cases, ``_call1``, indexing, ``.T``, ``astype``)
skip ``_call_general``'s walk. Once, one of them built its Tensor by hand and left ``_base``
unset: any reshape after ``max_pool2d`` under ``nx.no_grad()`` raised AttributeError on cpu:0.
Here each form runs both ways on the same operands and every slot of the result is compared,
with the device's memory accounting (bytes charged, live count, peak), under grad and no_grad.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.errors import OutOfMemoryError
from neurenix_core.tensor import tensor as T

#: The slots every Tensor has set; ``_ag`` (autograd state) is set only by recording.
FIELDS = tuple(s for s in T.Tensor.__slots__ if s not in ("__weakref__", "_ag"))


def _operands() -> dict[str, Any]:
    rng = np.random.default_rng(0)
    a = nx.asarray(rng.random((4, 6), dtype=np.float32) + 0.5)
    b = nx.asarray(rng.random((4, 6), dtype=np.float32) + 0.5)
    view = nx.reshape(a, (6, 4))  # a view: operands that are views take the rewrap path
    return {"a": a, "b": b, "c": a > b, "view": view, "idx": nx.asarray(np.array([0, 2], np.int64))}


#: (label, fast form, the general path's spelling of the same op).
FORMS: list[tuple[str, Callable[[dict[str, Any]], Any], Callable[[dict[str, Any]], Any]]] = [
    ("a + b", lambda o: o["a"] + o["b"], lambda o: T._call_general("add", (o["a"], o["b"]))),
    ("a * 2.0", lambda o: o["a"] * 2.0, lambda o: T._call_general("multiply", (o["a"], 2.0))),
    ("nx.exp", lambda o: nx.exp(o["a"]), lambda o: T._call_general("exp", (o["a"],))),
    ("-view", lambda o: -o["view"], lambda o: T._call_general("negative", (o["view"],))),
    ("nx.where", lambda o: nx.where(o["c"], o["a"], o["b"]), lambda o: T._call_general("where", (o["c"], o["a"], o["b"]))),
    ("nx.sum(axis=0)", lambda o: nx.sum(o["a"], axis=0), lambda o: T._call_general("sum", (o["a"],), {"axis": 0})),
    ("nx.sum (0-d)", lambda o: nx.sum(o["a"]), lambda o: T._call_general("sum", (o["a"],))),
    ("nx.reshape", lambda o: nx.reshape(o["a"], (6, 4)), lambda o: T._call_general("reshape", (o["a"], (6, 4)))),
    ("reshape of a view", lambda o: nx.reshape(o["view"], (24,)), lambda o: T._call_general("reshape", (o["view"], (24,)))),
    ("nx.take", lambda o: nx.take(o["a"], o["idx"], axis=0), lambda o: T._call_general("take", (o["a"], o["idx"]), {"axis": 0})),
    ("nx.matmul", lambda o: nx.matmul(o["a"], nx.matrix_transpose(o["b"])),
     lambda o: T._call_general("matmul", (o["a"], nx.matrix_transpose(o["b"])))),
    ("x.T", lambda o: o["a"].T, lambda o: T._call_general("permute_dims", (o["a"], (1, 0)))),
    ("x[0]", lambda o: o["a"][0], lambda o: T.adopt(o["a"]._data[0], o["a"]._p, (o["a"],))),
    ("astype", lambda o: nx.astype(o["a"], nx.float64), lambda o: T._call_general("astype", (o["a"], np.dtype(np.float64)))),
    ("clip", lambda o: nx.clip(o["a"], 0.6, 0.9), lambda o: T._call_general("clip", (o["a"],), {"min": 0.6, "max": 0.9})),
]


def _memory(t: Any) -> tuple[int, int]:
    """Bytes charged and live Tensors on ``t``'s device."""
    m = t._p.mem
    return m.in_use, m.count


def _fields(t: Any, sources: dict[str, Any]) -> dict[str, Any]:
    """Every field as a comparable value: the owner named by operand, arrays by value and view-ness."""
    missing = [f for f in FIELDS if not hasattr(t, f)]
    assert not missing, f"fields never set: {missing}"
    names = {id(v): k for k, v in sources.items()}
    base = t._base
    return {
        "_data": (type(t._data), t._data.dtype, t._data.shape, np.asarray(t._data).tobytes()),
        "_p": t._p,
        "_nbytes": t._nbytes,
        "_base": None if base is None else names.get(id(base), f"another tensor ({base.shape})"),
        "owns_buffer": t._data.base is None,
        "_ag": hasattr(t, "_ag"),
    }


def _run(form: Callable[[dict[str, Any]], Any], ops: dict[str, Any]) -> tuple[dict[str, Any], tuple[int, int]]:
    """The result's fields and what making it charged (bytes, live Tensors), the result alone
    alive (temporaries of the form itself, e.g. a transposed operand, released first)."""
    gc.collect()  # tensors of earlier tests freed now, not by a collection in the middle
    gc.disable()
    try:
        before = _memory(ops["a"])
        out = form(ops)
        after = _memory(ops["a"])
    finally:
        gc.enable()
    return _fields(out, ops), (after[0] - before[0], after[1] - before[1])


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize(("label", "fast", "general"), FORMS, ids=[f[0] for f in FORMS])
def test_fast_path_equals_general_path_on_every_field(label: str, fast: Any, general: Any, grad: bool) -> None:
    ops = _operands()
    ctx = nx.enable_grad() if grad else nx.no_grad()
    with ctx:
        got, got_mem = _run(fast, ops)
        want, want_mem = _run(general, ops)
    assert got == want, f"{label}: the fast path's Tensor differs from the general path's"
    assert got_mem == want_mem, f"{label}: memory charged (bytes, live tensors) {got_mem} != general path's {want_mem}"


def test_released_memory_returns_to_where_it_was() -> None:
    ops = _operands()
    gc.collect()  # what earlier tests left in reference cycles, freed before counting
    start = _memory(ops["a"])
    with nx.no_grad():
        outs = [fast(ops) for _, fast, _ in FORMS]
        chained = [nx.reshape(o, (-1,)) for o in outs if o.ndim]  # a view where the layout allows
    # A view is charged nothing and keeps its owner; a copy (x.T flattened) owns and is charged.
    assert all((c._nbytes == 0) == (c._base is not None) for c in chained)
    assert sum(c._base is not None for c in chained) >= 10
    del outs, chained
    gc.collect()
    assert _memory(ops["a"]) == start


def test_fresh_refuses_past_the_limit_like_device_memory_charge() -> None:
    a = nx.ones((256,), dtype=nx.float32)
    mem = a._p.mem
    old = mem.limit
    mem.limit = mem.in_use + 512  # room for 512 bytes: one float32 result of 128, not 256
    try:
        count = mem.count
        with pytest.raises(OutOfMemoryError) as fast:
            nx.exp(a)
        with pytest.raises(OutOfMemoryError) as general:
            mem.charge(a.nbytes)
        assert str(fast.value) == str(general.value)
        assert mem.count == count  # nothing counted for a refused result
    finally:
        mem.limit = old


@pytest.mark.parametrize("device", ["cpu:0", "cuda:0", "tpu:0", "npu:0", "edgetpu:0"])
def test_eager_cnn_evaluates_under_no_grad(device: str) -> None:
    """The reported crash: Flatten after MaxPool2d under nx.no_grad() (AttributeError on cpu:0)."""
    if device not in {str(d) for d in nx.devices()}:
        pytest.skip(f"{device} is not available here (NEURENIX_EMULATE names the emulated devices)")
    net = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 6 * 6, 3)).to(device)
    x = nx.asarray(np.random.default_rng(1).random((2, 1, 12, 12), dtype=np.float32), device=device)
    grad_out = net(x)
    net.eval()
    with nx.no_grad():
        out = net(x)
        flat = nx.reshape(nn.functional.max_pool2d(x, 2), (2, -1))
    assert out.shape == (2, 3) and out.device == nx.Device(device)
    np.testing.assert_allclose(out.numpy(), grad_out.numpy(), rtol=1e-5, atol=1e-6)
    assert flat.shape == (2, 36)
