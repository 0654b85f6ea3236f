"""nx.fft on the CPU against NumPy (every function, float32/float64 and complex inputs), and how it
dispatches elsewhere: natively through the op table (tpu, cuda) or on the host under the fallback
policy (npu). The device-generic version runs in the conformance suite (suite/test_fft.py);
examples/fft_spectrum.py runs here too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.plugins.backend import FFT_FUNCTIONS

RNG = np.random.default_rng(7)
REAL = {"float32": RNG.standard_normal((5, 8)).astype(np.float32), "float64": RNG.standard_normal((5, 8))}
COMPLEX = {n: (REAL[r] + 1j * REAL[r][::-1]).astype(n) for n, r in (("complex64", "float32"), ("complex128", "float64"))}
TOL = {"float32": 1e-5, "complex64": 1e-5, "float64": 1e-12, "complex128": 1e-12}
COMPLEX_OF = {"float32": "complex64", "float64": "complex128", "complex64": "complex64", "complex128": "complex128"}
REAL_OF = {"complex64": "float32", "complex128": "float64", "float32": "float32", "float64": "float64"}

# name -> (input kind, result kind, keyword arguments other than the defaults)
CASES: list[tuple[str, str, str, dict[str, Any]]] = [
    ("fft", "complex", "complex", {}), ("fft", "complex", "complex", {"n": 11, "axis": 0, "norm": "forward"}),
    ("ifft", "complex", "complex", {"norm": "ortho"}), ("fftn", "complex", "complex", {}),
    ("fftn", "complex", "complex", {"s": (4, 6), "axes": (1, 0)}), ("ifftn", "complex", "complex", {"axes": (0,)}),
    ("rfft", "real", "complex", {}), ("rfft", "real", "complex", {"n": 6, "axis": 0}),
    ("irfft", "complex", "real", {}), ("irfft", "complex", "real", {"n": 9, "norm": "ortho"}),
    ("rfftn", "real", "complex", {}), ("irfftn", "complex", "real", {"s": (5, 8), "axes": (0, 1)}),
    ("hfft", "complex", "real", {}), ("ihfft", "real", "complex", {"norm": "forward"}),
    ("fftshift", "real", "real", {}), ("ifftshift", "complex", "complex", {"axes": 1}),
]


@pytest.mark.parametrize("precision", ("32", "64"))
@pytest.mark.parametrize(("name", "takes", "gives", "kwargs"), CASES, ids=[f"{c[0]}{sorted(c[3])}" for c in CASES])
def test_every_transform_matches_numpy_on_cpu(name: str, takes: str, gives: str, kwargs: dict[str, Any], precision: str) -> None:
    key = f"float{precision}" if takes == "real" else f"complex{int(precision) * 2}"
    host = REAL[key] if takes == "real" else COMPLEX[key]
    out = getattr(nx.fft, name)(nx.asarray(host, device="cpu"), **kwargs)
    want = getattr(np.fft, name)(host, **kwargs)
    # The standard keeps the precision: float32 in, complex64 out (and back).
    assert str(out.dtype) == (COMPLEX_OF[key] if gives == "complex" else REAL_OF[key])
    assert out.device == nx.Device("cpu:0")
    np.testing.assert_allclose(out.numpy(), want, rtol=TOL[key], atol=TOL[key] * 10)


@pytest.mark.parametrize("name", ("fftfreq", "rfftfreq"))
def test_frequencies_default_to_float32_and_take_dtype_and_device(name: str) -> None:
    out = getattr(nx.fft, name)(10, d=0.1)
    assert out.dtype == nx.float32 and out.device == nx.default_device()
    np.testing.assert_allclose(out.numpy(), getattr(np.fft, name)(10, d=0.1), rtol=1e-6)
    wide = getattr(nx.fft, name)(10, d=0.1, dtype=nx.float64, device="cpu")
    np.testing.assert_array_equal(wide.numpy(), getattr(np.fft, name)(10, d=0.1))
    with pytest.raises(nx.UnsupportedDTypeError, match="real floating-point"):
        getattr(nx.fft, name)(4, dtype=nx.int32)
    with pytest.raises(ValueError, match="positive int"):
        getattr(nx.fft, name)(0)


def test_every_fft_function_is_in_the_cpu_op_table() -> None:
    ops = nx.backend("cpu").ops
    assert [n for n in FFT_FUNCTIONS if f"fft.{n}" not in ops] == []
    assert nx.__array_namespace_info__().capabilities(device="cpu")["neurenix"]["fft"] is True


def test_tpu_and_cuda_run_fft_natively() -> None:
    x = RNG.standard_normal((4, 8)).astype(np.float32)
    for device in ("tpu:0", "cuda:0"):
        if nx.Device(device) not in nx.devices():
            pytest.skip(f"{device} is not available (set NEURENIX_EMULATE=tpu,cuda)")
        be = nx.backend(device)
        assert "fft.rfft" in be.ops and "fft.fftn" in be.ops
        nx.reset_fallback_stats()
        t = nx.asarray(x, device=device)
        with nx.fallback_policy("error"):  # native: no host fallback may happen
            out = nx.fft.rfft(t, axis=0)
            freq = nx.fft.rfftfreq(8, device=device)
        assert out.device == nx.Device(device) and freq.device == nx.Device(device)
        assert type(out.native) is type(t.native) and type(freq.native) is type(t.native)  # torch / jax arrays
        np.testing.assert_allclose(out.numpy(), np.fft.rfft(x, axis=0), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(freq.numpy(), np.fft.rfftfreq(8), rtol=1e-6)
        assert nx.fallback_stats().get(be.name, {}) == {}


def test_a_backend_without_fft_falls_back_under_the_policy() -> None:
    if nx.Device("npu:0") not in nx.devices():
        pytest.skip("npu:0 is not available (set NEURENIX_EMULATE=npu)")
    x = RNG.standard_normal((3, 8)).astype(np.float32)
    t = nx.asarray(x, device="npu")
    with nx.fallback_policy("error"), pytest.raises(nx.FallbackError, match="fft.rfft"):
        nx.fft.rfft(t)
    nx.reset_fallback_stats()
    with nx.fallback_policy("allow"):
        out = nx.fft.rfft(t)
    assert out.device == nx.Device("npu:0")
    np.testing.assert_allclose(out.numpy(), np.fft.rfft(x), rtol=1e-5, atol=1e-5)
    assert nx.fallback_stats()[nx.backend("npu").name]["fft.rfft"] == 1


def test_fft_refuses_non_tensors_and_positional_keywords() -> None:
    with pytest.raises(TypeError, match="neurenix Tensor"):
        nx.fft.fft(np.ones(4))
    with pytest.raises(TypeError):
        nx.fft.fft(nx.ones(4), 4)  # n is keyword-only


def test_fft_example_finds_the_tones_on_every_device() -> None:
    script = Path(__file__).resolve().parents[1] / "examples" / "fft_spectrum.py"
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=600, check=False, env=dict(os.environ)
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    assert any(r["device"] == "cpu:0" and r["native_fft"] for r in rows)
    for r in rows:
        assert r["peaks_hz"] == [50.0, 120.0], r
        assert r["result_device"] == r["device"] and r["spectrum_dtype"] == "complex64"
