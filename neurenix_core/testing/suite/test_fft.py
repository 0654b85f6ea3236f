"""The ``fft`` extension against float64 NumPy: native where the backend has ``fft.*`` ops,
on the host under the fallback policy elsewhere; results stay on the device under test.

Transforms of real float32 input (rfft, rfftn, ihfft, the shifts, the frequencies) run on every
device; those of complex input only where the device declares complex64. Absolute errors of a
length-n transform grow with n: ``scale`` says so.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.testing.reference import assert_close, on_device, require_dtype, rounded

# (name, keyword arguments): the same call on the tensor and on the NumPy reference. The input
# dtypes are the standard's: real for rfft/rfftn/ihfft, complex for the others (array-api-strict
# refuses a real input to fft).
REAL_INPUT: list[tuple[str, dict[str, object]]] = [
    ("rfft", {}), ("rfft", {"n": 10, "norm": "forward"}), ("ihfft", {}), ("rfftn", {}),
    ("rfftn", {"s": (3, 4), "axes": (0, 1)}),
]
COMPLEX_INPUT: list[tuple[str, dict[str, object]]] = [
    ("fft", {}), ("fft", {"n": 5, "axis": 0, "norm": "ortho"}), ("fftn", {"axes": (1,)}), ("ifft", {}),
    ("ifft", {"axis": 0, "norm": "ortho"}), ("fftn", {}), ("ifftn", {"s": (4, 4), "axes": (0, 1)}),
    ("irfft", {}), ("irfft", {"n": 8}), ("irfftn", {}), ("hfft", {"n": 9}),
]
_DTYPE = {"rfft": "complex64", "ihfft": "complex64", "rfftn": "complex64", "fft": "complex64", "fftn": "complex64",
          "ifft": "complex64", "ifftn": "complex64", "irfft": "float32", "irfftn": "float32", "hfft": "float32"}


def _host_fallback_allowed() -> Any:
    # A backend without fft.* ops runs them on the host: allowed here, counted in fallback_stats.
    return nx.fallback_policy("allow")


def _real(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return rounded(np.random.default_rng(seed).uniform(-1, 1, shape), "float32")


def _complex(shape: tuple[int, ...], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rounded(rng.uniform(-1, 1, shape) + 1j * rng.uniform(-1, 1, shape), "complex64")


def _ids(cases: list[tuple[str, dict[str, object]]]) -> list[str]:
    return [f"{name}-{'-'.join(f'{k}={v}' for k, v in kw.items()) or 'default'}" for name, kw in cases]


@pytest.mark.parametrize(("name", "kwargs"), REAL_INPUT, ids=_ids(REAL_INPUT))
def test_fft_of_real_input(nx_device: nx.Device, name: str, kwargs: dict[str, object]) -> None:
    a = _real((6, 8), 20)
    with _host_fallback_allowed():
        out = getattr(nx.fft, name)(on_device(a, "float32", nx_device), **kwargs)
    assert_close(out, getattr(np.fft, name)(a, **kwargs), nx_device, _DTYPE[name], scale=48)


@pytest.mark.parametrize(("name", "kwargs"), COMPLEX_INPUT, ids=_ids(COMPLEX_INPUT))
def test_fft_of_complex_input(nx_device: nx.Device, name: str, kwargs: dict[str, object]) -> None:
    require_dtype(nx_device, "complex64")
    a = _complex((6, 8), 21)
    with _host_fallback_allowed():
        out = getattr(nx.fft, name)(on_device(a, "complex64", nx_device), **kwargs)
    assert_close(out, getattr(np.fft, name)(a, **kwargs), nx_device, _DTYPE[name], scale=48)


def test_fft_round_trip_and_shifts(nx_device: nx.Device) -> None:
    a = _real((4, 6), 22)
    x = on_device(a, "float32", nx_device)
    with _host_fallback_allowed():
        back = nx.fft.irfft(nx.fft.rfft(x), n=6)
        assert_close(back, a, nx_device, "float32", scale=6)
        assert_close(nx.fft.fftshift(x), np.fft.fftshift(a), nx_device, "float32")
        assert_close(nx.fft.ifftshift(x, axes=1), np.fft.ifftshift(a, axes=1), nx_device, "float32")
        assert_close(nx.fft.fftshift(x, axes=(0,)), np.fft.fftshift(a, axes=(0,)), nx_device, "float32")


@pytest.mark.parametrize("name", ("fftfreq", "rfftfreq"))
@pytest.mark.parametrize("n", (1, 7, 8))
def test_fft_frequencies_are_created_on_the_device(nx_device: nx.Device, name: str, n: int) -> None:
    out = getattr(nx.fft, name)(n, d=0.25, device=nx_device)
    assert_close(out, getattr(np.fft, name)(n, d=0.25), nx_device, "float32")
    require_dtype(nx_device, "float64")
    wide = getattr(nx.fft, name)(n, dtype=nx.float64, device=nx_device)
    assert_close(wide, getattr(np.fft, name)(n), nx_device, "float64")
