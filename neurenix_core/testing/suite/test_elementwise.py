"""Elementwise functions against float64 NumPy, per float dtype the device declares."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.testing.reference import assert_close, on_device, require_dtype, rounded

FLOATS = ("float32", "float16", "bfloat16")

# name -> (low, high) of the inputs: inside the function's domain and where float16 stays finite.
UNARY: dict[str, tuple[float, float]] = {
    "abs": (-4, 4), "acos": (-0.9, 0.9), "acosh": (1.1, 4), "asin": (-0.9, 0.9), "asinh": (-4, 4),
    "atan": (-4, 4), "atanh": (-0.9, 0.9), "ceil": (-4, 4), "cos": (-3, 3), "cosh": (-3, 3),
    "exp": (-3, 3), "expm1": (-3, 3), "floor": (-4, 4), "log": (0.1, 8), "log1p": (-0.5, 8),
    "log2": (0.1, 8), "log10": (0.1, 8), "negative": (-4, 4), "positive": (-4, 4), "round": (-4, 4),
    "sign": (-4, 4), "sin": (-3, 3), "sinh": (-3, 3), "sqrt": (0, 8), "square": (-4, 4),
    "tan": (-1.2, 1.2), "tanh": (-3, 3), "trunc": (-4, 4), "reciprocal": (0.5, 4),
}
_REFERENCE: dict[str, Callable[..., Any]] = {"reciprocal": lambda x: 1.0 / x, "pow": np.power}
BINARY: dict[str, tuple[float, float]] = {
    "add": (-4, 4), "subtract": (-4, 4), "multiply": (-4, 4), "divide": (0.5, 4), "maximum": (-4, 4),
    "minimum": (-4, 4), "pow": (0.5, 2), "atan2": (-4, 4), "hypot": (-4, 4), "copysign": (-4, 4),
    "logaddexp": (-4, 4), "floor_divide": (0.5, 8), "remainder": (0.5, 8),
}
COMPARISONS = ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal")


def _values(low: float, high: float, shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(low, high, shape)


def _ref(name: str) -> Callable[..., Any]:
    return _REFERENCE.get(name) or getattr(np, name)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(nx_device: nx.Device, name: str, dtype: str) -> None:
    require_dtype(nx_device, dtype)
    x = rounded(_values(*UNARY[name], (3, 5), seed=1), dtype)
    out = getattr(nx, name)(on_device(x, dtype, nx_device))
    expected = _ref(name)(x)
    # Rounding functions jump at half-integers: compare them on values the dtype represents exactly.
    assert_close(out, expected, nx_device, dtype, scale=float(np.max(np.abs(expected))))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary(nx_device: nx.Device, name: str, dtype: str) -> None:
    require_dtype(nx_device, dtype)
    a = rounded(_values(*BINARY[name], (4, 3), seed=2), dtype)
    b = rounded(_values(*BINARY[name], (4, 3), seed=3), dtype)
    out = getattr(nx, name)(on_device(a, dtype, nx_device), on_device(b, dtype, nx_device))
    expected = _ref(name)(a, b)
    if name in ("floor_divide", "remainder"):
        # Near-integer quotients may round either way in low precision: compare where unambiguous.
        q = a / b
        keep = np.abs(q - np.round(q)) > 0.05
        got = out.numpy().astype(np.float64)
        assert out.device == nx_device
        np.testing.assert_allclose(got[keep], expected[keep], rtol=2e-2 if dtype != "float32" else 1e-5, atol=1e-2)
        return
    assert_close(out, expected, nx_device, dtype, scale=float(np.max(np.abs(expected))))


@pytest.mark.parametrize("name", COMPARISONS)
def test_comparison(nx_device: nx.Device, name: str) -> None:
    a = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    b = np.array([3.0, 2.0, 1.0])
    out = getattr(nx, name)(on_device(a, "float32", nx_device), on_device(b, "float32", nx_device))
    assert_close(out, getattr(np, name)(a, b), nx_device, "bool")


@pytest.mark.parametrize("name", ("logical_and", "logical_or", "logical_xor"))
def test_logical(nx_device: nx.Device, name: str) -> None:
    require_dtype(nx_device, "bool")
    a = np.array([True, True, False, False])
    b = np.array([True, False, True, False])
    assert_close(getattr(nx, name)(on_device(a, "bool", nx_device), on_device(b, "bool", nx_device)), getattr(np, name)(a, b), nx_device, "bool")
    assert_close(nx.logical_not(on_device(a, "bool", nx_device)), ~a, nx_device, "bool")


@pytest.mark.parametrize("name", ("isnan", "isinf", "isfinite", "signbit"))
def test_classification(nx_device: nx.Device, name: str) -> None:
    x = np.array([0.0, -0.0, 1.5, -2.0, np.inf, -np.inf, np.nan])
    assert_close(getattr(nx, name)(on_device(x, "float32", nx_device)), getattr(np, name)(x), nx_device, "bool")


@pytest.mark.parametrize("name", ("bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift"))
def test_bitwise(nx_device: nx.Device, name: str) -> None:
    require_dtype(nx_device, "int32")
    a = np.array([1, 6, 12, 255], dtype=np.int32)
    b = np.array([3, 1, 2, 4], dtype=np.int32)
    out = getattr(nx, name)(on_device(a, "int32", nx_device), on_device(b, "int32", nx_device))
    assert_close(out, getattr(np, name)(a, b), nx_device, "int32")


def test_operators_match_functions(nx_device: nx.Device) -> None:
    a = rounded(_values(0.5, 3, (2, 3), seed=4), "float32")
    b = rounded(_values(0.5, 3, (2, 3), seed=5), "float32")
    x, y = on_device(a, "float32", nx_device), on_device(b, "float32", nx_device)
    for got, want in ((x + y, a + b), (x - y, a - b), (x * y, a * b), (x / y, a / b), (x ** y, a**b), (-x, -a), (abs(-x), a)):
        assert_close(got, want, nx_device, "float32", scale=float(np.max(np.abs(want))))


def test_python_scalars(nx_device: nx.Device) -> None:
    a = rounded(_values(-2, 2, (5,), seed=6), "float32")
    x = on_device(a, "float32", nx_device)
    assert_close(x + 1.5, a + 1.5, nx_device, "float32", scale=4)
    assert_close(2.0 * x, 2.0 * a, nx_device, "float32", scale=4)
    assert_close(1.0 - x, 1.0 - a, nx_device, "float32", scale=4)
    assert_close(nx.clip(x, -1.0, 1.0), np.clip(a, -1.0, 1.0), nx_device, "float32")
