"""Property-based checks (hypothesis): elementwise ops, broadcasting, matmul, reductions, promotion.

Deterministic (``derandomize``) and small so that graph backends, which compile per shape,
finish quickly; a failure prints the shrunk example.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import neurenix_core as nx
from neurenix_core.testing.reference import assert_close, on_device, rounded

SETTINGS = settings(max_examples=15, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
_FLOATS = st.floats(-8, 8, allow_nan=False, width=32)


@st.composite
def broadcastable(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    shapes = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=4))
    a = draw(hnp.arrays(np.float64, shapes.input_shapes[0], elements=_FLOATS))
    b = draw(hnp.arrays(np.float64, shapes.input_shapes[1], elements=_FLOATS))
    return rounded(a, "float32"), rounded(b, "float32")


@SETTINGS
@given(pair=broadcastable(), op=st.sampled_from(["add", "subtract", "multiply", "maximum", "minimum"]))
def test_broadcasting_elementwise(nx_device: nx.Device, pair: tuple[np.ndarray, np.ndarray], op: str) -> None:
    a, b = pair
    out = getattr(nx, op)(on_device(a, "float32", nx_device), on_device(b, "float32", nx_device))
    assert_close(out, getattr(np, op)(a, b), nx_device, "float32", scale=64)


@SETTINGS
@given(m=st.integers(1, 6), k=st.integers(1, 6), n=st.integers(1, 6), batch=st.sampled_from([(), (2,), (1, 3)]), seed=st.integers(0, 99))
def test_matmul_shapes(nx_device: nx.Device, m: int, k: int, n: int, batch: tuple[int, ...], seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = rounded(rng.uniform(-2, 2, (*batch, m, k)), "float32")
    b = rounded(rng.uniform(-2, 2, (k, n)), "float32")
    out = on_device(a, "float32", nx_device) @ on_device(b, "float32", nx_device)
    assert_close(out, a @ b, nx_device, "float32", scale=4 * k)


@SETTINGS
@given(a=hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=3, max_side=5), elements=_FLOATS), data=st.data())
def test_reductions(nx_device: nx.Device, a: np.ndarray, data: st.DataObject) -> None:
    a = rounded(a, "float32")
    axis = data.draw(st.sampled_from([None, *range(-a.ndim, a.ndim)]))
    keepdims = data.draw(st.booleans())
    x = on_device(a, "float32", nx_device)
    for name in ("sum", "max", "min", "mean"):
        out = getattr(nx, name)(x, axis=axis, keepdims=keepdims)
        assert_close(out, getattr(np, name)(a, axis=axis, keepdims=keepdims), nx_device, "float32", scale=8 * a.size)


# The standard defines promotion inside a kind only (mixed int/float is implementation-defined).
_KINDS = [["bool"], ["int8", "int16", "int32", "int64", "uint8", "uint16"], ["float16", "float32", "float64"]]


@st.composite
def same_kind_pair(draw: st.DrawFn) -> tuple[str, str]:
    kind = draw(st.sampled_from(_KINDS))
    return draw(st.sampled_from(kind)), draw(st.sampled_from(kind))


@SETTINGS
@given(pair=same_kind_pair())
def test_dtype_promotion(nx_device: nx.Device, pair: tuple[str, str]) -> None:
    a, b = pair
    backend = nx.backend(nx_device)
    want = nx.result_type(getattr(nx, a), getattr(nx, b))
    if not all(backend.supports_dtype(getattr(nx, d)) for d in (a, b)) or not backend.supports_dtype(want):
        return  # not declared on this device: covered by test_dtypes' reported skips
    x = on_device(np.array([1, 0, 1]), a, nx_device)
    y = on_device(np.array([1, 1, 1]), b, nx_device)
    out = nx.logical_and(x, y) if want == nx.bool else nx.multiply(x, y)
    assert out.dtype == want, f"{a} * {b} gave {out.dtype}, the array API says {want}"
    np.testing.assert_array_equal(out.numpy().astype(np.float64), [1, 0, 1])
