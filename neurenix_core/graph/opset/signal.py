"""Signal processing: discrete Fourier transforms, short-time Fourier transform, mel filter banks
(ONNX's ``signal`` family; the windows themselves are ``window`` in ``tensor``).

A complex value is a real one with a trailing axis of 2 (real, imaginary), as ONNX carries it; a
real signal has a trailing axis of 1. The transforms compute with ``np.fft`` in the input's
precision (NumPy keeps float32 as complex64) and return the input's dtype, as ONNX's reference
does, so the near-zero imaginary parts of a real signal's spectrum round the same way.
"""

from __future__ import annotations

import numpy as np

from neurenix_core.graph.opset.schema import DTYPES, REQUIRED, Arrays, Attrs, Params, Shape, _axis, _def, _is_float, _np_dtype

__all__: list[str] = []


# ----------------------------------------------------------------------------- DFT
def _dft_geometry(a: Attrs, shape: Shape) -> tuple[int, int, int]:
    """(axis, transform length, length of the output along axis)."""
    if len(shape) < 2 or shape[-1] not in (1, 2):
        raise ValueError(f"dft takes a signal [..., 1] (real) or [..., 2] (complex), got shape {shape}")
    axis = _axis(int(a["axis"]), len(shape))
    if axis == len(shape) - 1:
        raise ValueError("dft's axis may not be the last one (it holds the real and imaginary parts)")
    inverse, onesided = bool(a["inverse"]), bool(a["onesided"])
    # ONNX: an inverse one-sided transform (irfft) defaults to the even length its input came from.
    n = int(a["length"]) if a["length"] is not None else (2 * (shape[axis] - 1) if inverse and onesided else shape[axis])
    if n < 1:
        raise ValueError(f"dft length must be positive, got {n}")
    return axis, n, n // 2 + 1 if onesided and not inverse else n


def _dft_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    if not _is_float(d[0]):
        raise ValueError(f"dft takes a floating-point signal, got {d[0]}")
    axis, _, size = _dft_geometry(a, s[0])
    out = list(s[0])
    out[axis] = size
    out[-1] = 1 if a["inverse"] and a["onesided"] else 2
    return tuple(out), d[0]


def _complex(x: np.ndarray) -> np.ndarray:
    """[..., 1] or [..., 2] -> a complex array without the trailing axis (kept real for [..., 1])."""
    return x[..., 0] if x.shape[-1] == 1 else x[..., 0] + 1j * x[..., 1]


def _as_pairs(z: np.ndarray, dtype: np.dtype) -> np.ndarray:
    return np.stack([np.real(z), np.imag(z)], axis=-1).astype(dtype)


def dft(x: np.ndarray, axis: int, n: int, inverse: bool, onesided: bool) -> np.ndarray:
    """ONNX DFT of ``x`` ([..., 1|2]) along ``axis`` with transform length ``n`` (zero-padded or
    cut, as ``np.fft`` does)."""
    z = _complex(x)
    if inverse and onesided:
        return np.fft.irfft(z, n=n, axis=axis)[..., None].astype(x.dtype)
    if inverse:
        return _as_pairs(np.fft.ifft(z, n=n, axis=axis), x.dtype)
    spectrum = np.fft.fft(z, n=n, axis=axis)
    if onesided:
        spectrum = np.take(spectrum, np.arange(n // 2 + 1), axis=axis)
    return _as_pairs(spectrum, x.dtype)


def _dft_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    axis, n, _ = _dft_geometry(a, x[0].shape)
    return dft(x[0], axis, n, bool(a["inverse"]), bool(a["onesided"]))


_def("dft", "signal", "discrete Fourier transform along axis of a real [..., 1] or complex [..., 2] signal; inverse, onesided "
     "(forward: the first length//2+1 frequencies; inverse: irfft to a real [..., 1] result), length (None: the axis' size, "
     "2*(size-1) for an inverse one-sided transform; shorter cuts, longer zero-pads) (ONNX DFT)",
     ("x",), _dft_rule, _dft_ref, attrs={"axis": REQUIRED, "inverse": False, "onesided": False, "length": None})


# ----------------------------------------------------------------------------- STFT
def _stft_geometry(a: Attrs, s: list[Shape]) -> tuple[int, int]:
    """(frame length, number of frames)."""
    signal = s[0]
    if len(signal) != 3 or signal[-1] not in (1, 2):
        raise ValueError(f"stft takes a signal [batch, length, 1 | 2], got shape {signal}")
    step = int(a["frame_step"])
    window = s[1] if len(s) > 1 else None
    if window is not None and len(window) != 1:
        raise ValueError(f"stft's window must be 1-D, got shape {window}")
    length = a["frame_length"]
    if length is None:
        length = window[0] if window is not None else signal[1]
    length = int(length)
    if window is not None and window[0] != length:
        raise ValueError(f"stft's window has {window[0]} values for frames of {length}")
    if step < 1 or not 1 <= length <= signal[1]:
        raise ValueError(f"stft needs frame_step >= 1 and 1 <= frame_length <= the signal's {signal[1]} samples, "
                         f"got frame_step {step}, frame_length {length}")
    return length, 1 + (signal[1] - length) // step


def _stft_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    if not all(_is_float(t) for t in d):
        raise ValueError(f"stft takes a floating-point signal and window, got {d}")
    length, frames = _stft_geometry(a, s)
    return (s[0][0], frames, length // 2 + 1 if a["onesided"] else length, 2), d[0]


def _stft_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    signal = x[0]
    length, frames = _stft_geometry(a, [v.shape for v in x])
    starts = np.arange(frames) * int(a["frame_step"])
    framed = signal[:, starts[:, None] + np.arange(length)[None, :], :]  # (batch, frames, length, 1 | 2)
    if len(x) > 1:
        framed = framed * x[1].reshape(1, 1, length, 1)
    return dft(framed, 2, length, False, bool(a["onesided"])).astype(signal.dtype)


_def("stft", "signal", "short-time Fourier transform of a [batch, length, 1 | 2] signal: frames of frame_length (None: the "
     "window's length, else the signal's) every frame_step samples, times the optional window, each transformed (onesided: "
     "the first frame_length//2+1 frequencies); [batch, frames, frequencies, 2] (ONNX STFT)",
     ("signal", "window?"), _stft_rule, _stft_ref, attrs={"frame_step": REQUIRED, "frame_length": None, "onesided": True})


# ----------------------------------------------------------------------------- MelWeightMatrix
def _mel_rule(a: Attrs, s: list[Shape], d: list[str], p: Params) -> tuple[Shape, str]:
    if any(v != () for v in s) or not all(_is_float(t) for t in d):
        raise ValueError(f"mel_weight_matrix takes scalar floating-point band edges, got shapes {s} of {d}")
    if int(a["num_mel_bins"]) < 1 or int(a["dft_length"]) < 1 or int(a["sample_rate"]) < 1 or a["dtype"] not in DTYPES:
        raise ValueError(f"mel_weight_matrix needs num_mel_bins, dft_length, sample_rate >= 1 and a dtype of {', '.join(DTYPES)}; "
                         f"got {dict(a)}")
    return (int(a["dft_length"]) // 2 + 1, int(a["num_mel_bins"])), a["dtype"]


def _mel_edges(a: Attrs, lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """The num_mel_bins + 2 band edges as spectrogram bin indices, with ONNX's reference
    arithmetic step for step (the edges' own float precision, then float64), since the integer
    bins they round down to move with the last bit."""
    bins, dft_length, rate = int(a["num_mel_bins"]), int(a["dft_length"]), int(a["sample_rate"])
    low_mel = 2595 * np.log1p(lower / 700) / np.log(10)
    high_mel = 2595 * np.log1p(upper / 700) / np.log(10)
    step = (high_mel - low_mel) / (bins + 2)
    hertz = 700 * np.expm1((np.arange(bins + 2) * step + low_mel) / 2595 * np.log(10))
    return (((dft_length + 1) * hertz) // rate).astype(np.int64)


def _mel_ref(a: Attrs, x: Arrays, p: Params) -> np.ndarray:
    edges = _mel_edges(a, x[0], x[1])
    rows = int(a["dft_length"]) // 2 + 1
    if edges.min() < 0 or edges[:-1].max() >= rows or edges[-1] > rows:
        raise ValueError(f"mel_weight_matrix: the band edges fall on spectrogram bins {edges.tolist()}, outside the "
                         f"{rows} bins of a {a['dft_length']}-point transform (the edges must lie in [0, sample_rate / 2])")
    left, center, right = edges[:-2], edges[1:-1], edges[2:]
    j = np.arange(rows)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):  # empty slopes are masked out below
        rising = np.where((j >= left) & (j <= center), (j - left) / (center - left), 0.0)
        falling = (right - j) / (right - center)
    out = np.where(center == left, (j == center).astype(np.float64), rising)
    # The falling slope is written after the rising one and wins where they meet (at center: 1).
    out = np.where((j >= center) & (j < right), falling, out)
    return out.astype(_np_dtype(a["dtype"]))


_def("mel_weight_matrix", "signal", "[dft_length//2+1, num_mel_bins] triangular mel filter bank over a one-sided spectrogram "
     "at sample_rate, between the scalar inputs lower_edge_hertz and upper_edge_hertz, in dtype (ONNX MelWeightMatrix)",
     ("lower_edge_hertz", "upper_edge_hertz"), _mel_rule, _mel_ref,
     attrs={"num_mel_bins": REQUIRED, "dft_length": REQUIRED, "sample_rate": REQUIRED, "dtype": "float32"})
