"""from_torch of torch.fft and the complex values it makes (issue #41, importer ``torch_fft``).

Complex values are carried inside the import as real (..., 2) ones; each test imports a one-op
module whose inputs and outputs are real, runs it on cpu:0 and compares with eager PyTorch at
rtol 1e-4 / atol 1e-4 (float32 transforms of a few dozen points). A complex graph input or
output, and an op the import has no complex form for, must refuse by name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torch_eager import OpModule, assert_outputs_match, run_both

import neurenix_core as nx
from neurenix_core.errors import UnsupportedOperationError


def _check(fn: Callable[..., Any], *inputs: torch.Tensor, rtol: float = 1e-4, atol: float = 1e-4) -> None:
    assert_outputs_match(*run_both(fn, *inputs), rtol=rtol, atol=atol)


_X = torch.randn(3, 6, 7, generator=torch.Generator().manual_seed(0))
_NORMS = ("backward", "ortho", "forward")


@pytest.mark.parametrize("norm", _NORMS)
def test_irfft_family_with_sizes_dims_and_norms(norm: str) -> None:
    _check(lambda x: (torch.fft.irfft(x, norm=norm), torch.fft.irfft(x, n=9, dim=1, norm=norm),
                      torch.fft.irfft(x, n=4, dim=-3, norm=norm)), _X)
    _check(lambda x: (torch.fft.irfft2(x, norm=norm), torch.fft.irfftn(x, norm=norm),
                      torch.fft.irfftn(x, s=(5, 8), dim=(0, 2), norm=norm)), _X)


@pytest.mark.parametrize("norm", _NORMS)
def test_hfft_family(norm: str) -> None:
    _check(lambda x: (torch.fft.hfft(x, norm=norm), torch.fft.hfft(x, n=5, dim=0, norm=norm),
                      torch.fft.hfft2(x, norm=norm), torch.fft.hfftn(x, s=(4, 5), norm=norm)), _X)


@pytest.mark.parametrize("norm", _NORMS)
def test_forward_transforms_through_view_as_real_real_imag_abs(norm: str) -> None:
    _check(lambda x: (torch.view_as_real(torch.fft.rfft(x, norm=norm)), torch.view_as_real(torch.fft.fft2(x, norm=norm)),
                      torch.fft.ifft(x, dim=0, norm=norm).abs(), torch.fft.ihfft(x, norm=norm).imag,
                      torch.fft.rfftn(x, norm=norm).real), _X)


def test_stft_real_and_power_spectrogram() -> None:
    signal = torch.randn(2, 40, generator=torch.Generator().manual_seed(1))
    window = torch.hann_window(8)
    _check(lambda s: torch.stft(s, 4, return_complex=False), signal)
    _check(lambda s, w: torch.stft(s, 8, hop_length=2, window=w, return_complex=True).abs() ** 2, signal, window)
    _check(lambda s: torch.view_as_real(torch.stft(s, 6, hop_length=3, center=False, onesided=False, return_complex=True)), signal)


def test_complex_arithmetic_and_data_movement() -> None:
    spectrum = torch.fft.fft  # a complex value made inside forward
    _check(lambda x: (torch.fft.rfft(x) * torch.fft.rfft(x).conj()).real, _X)
    _check(lambda x: torch.view_as_real(spectrum(x) + 1.5 - x * 2j), _X)
    _check(lambda x: torch.view_as_real(spectrum(x) / 4.0 - x), _X)
    _check(lambda x: torch.view_as_real(torch.fft.fftshift(spectrum(x), dim=-1)), _X)
    _check(lambda x: torch.view_as_real(torch.cat([spectrum(x)[:, 1:3, :6], spectrum(x).transpose(1, 2)[:, :2, :6]], 1)), _X)
    _check(lambda x: torch.view_as_real(torch.view_as_complex(torch.stack([x, -x], -1)) * torch.fft.fft(x)), _X)


def test_complex_output_input_and_unsupported_op_refuse_by_name() -> None:
    with pytest.raises(UnsupportedOperationError, match="output 0 .* is a complex tensor"):
        nx.nn.from_torch(OpModule(lambda x: torch.fft.fft(x)), (_X,), static=True)
    with pytest.raises(UnsupportedOperationError, match="input .* is a complex tensor"):
        nx.nn.from_torch(OpModule(lambda z: torch.view_as_real(z * 2)), (torch.randn(3, dtype=torch.complex64),), static=True)
    with pytest.raises(UnsupportedOperationError, match="'sin' .* computes on a complex tensor"):
        nx.nn.from_torch(OpModule(lambda x: torch.view_as_real(torch.sin(torch.fft.fft(x)))), (_X,), static=True)
