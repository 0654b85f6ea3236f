"""NumPy implementations of the neural-network extension ops (``nn.linear``, ``nn.conv2d`` ...).

They are the CPU backend's native versions, the host fallback every other backend gets for
free, and (run in float64) the kernels of the reference interpreter in ``reference.py``.
All are vectorised: convolution and pooling use ``sliding_window_view`` + ``tensordot``/
``einsum``; no Python loop runs over pixels. Each keeps the floating dtype of its input.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

__all__ = [
    "OPS", "linear", "conv2d", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "relu", "gelu",
    "sigmoid", "tanh", "softmax", "batch_norm", "layer_norm", "erf",
]


def _pair(v: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(v, (int, np.integer)):
        return int(v), int(v)
    a, b = v
    return int(a), int(b)


def linear(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    out = np.matmul(x, weight.T)
    return out if bias is None else out + bias


def _windows(x: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int], dilation: tuple[int, int]) -> np.ndarray:
    """(N, C, OH, OW, kh, kw) view of the (already padded) input; no copy."""
    kh, kw = kernel
    span = (dilation[0] * (kh - 1) + 1, dilation[1] * (kw - 1) + 1)
    if x.shape[2] < span[0] or x.shape[3] < span[1]:
        raise ValueError(f"input spatial size {x.shape[2:]} (after padding) is smaller than the kernel extent {span}")
    win = sliding_window_view(x, span, axis=(2, 3))
    return win[:, :, :: stride[0], :: stride[1], :: dilation[0], :: dilation[1]]


def _pad(x: np.ndarray, padding: tuple[int, int], value: float = 0.0) -> np.ndarray:
    if padding == (0, 0):
        return x
    ph, pw = padding
    return np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=value)


def conv2d(
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
) -> np.ndarray:
    """NCHW convolution, weight (O, C/groups, kh, kw)."""
    if x.ndim != 4:
        raise ValueError(f"conv2d expects a 4-D NCHW input, got shape {x.shape}")
    out_c, cg, kh, kw = weight.shape
    if x.shape[1] != cg * groups:
        raise ValueError(f"conv2d: input has {x.shape[1]} channels, weight expects {cg * groups} ({cg} x {groups} groups)")
    win = _windows(_pad(x, _pair(padding)), (kh, kw), _pair(stride), _pair(dilation))
    n, _, oh, ow = win.shape[:4]
    if groups == 1:
        # (N, C, OH, OW, kh, kw) . (O, C, kh, kw) -> (N, OH, OW, O): one BLAS call.
        out = np.tensordot(win, weight, axes=([1, 4, 5], [1, 2, 3])).transpose(0, 3, 1, 2)
    else:
        wg = win.reshape(n, groups, cg, oh, ow, kh, kw)
        kg = weight.reshape(groups, out_c // groups, cg, kh, kw)
        out = np.einsum("ngchwij,gocij->ngohw", wg, kg, optimize=True).reshape(n, out_c, oh, ow)
    out = np.ascontiguousarray(out)
    return out if bias is None else out + bias.reshape(1, -1, 1, 1)


def max_pool2d(x: np.ndarray, kernel_size: Any, stride: Any = None, padding: Any = 0) -> np.ndarray:
    k = _pair(kernel_size)
    s = k if stride is None else _pair(stride)
    low = -np.inf if np.issubdtype(x.dtype, np.floating) else np.iinfo(x.dtype).min
    win = _windows(_pad(x, _pair(padding), low), k, s, (1, 1))
    return np.ascontiguousarray(win.max(axis=(4, 5)))


def avg_pool2d(x: np.ndarray, kernel_size: Any, stride: Any = None, padding: Any = 0, count_include_pad: bool = True) -> np.ndarray:
    k = _pair(kernel_size)
    s = k if stride is None else _pair(stride)
    p = _pair(padding)
    sums = _windows(_pad(x, p), k, s, (1, 1)).sum(axis=(4, 5))
    if count_include_pad or p == (0, 0):
        return (sums / (k[0] * k[1])).astype(x.dtype, copy=False)
    ones = np.ones((1, 1) + x.shape[2:], dtype=x.dtype)
    counts = _windows(_pad(ones, p), k, s, (1, 1)).sum(axis=(4, 5))
    return (sums / counts).astype(x.dtype, copy=False)


def adaptive_bounds(size: int, out: int) -> tuple[np.ndarray, np.ndarray]:
    """PyTorch's adaptive pooling cells: start = floor(i*size/out), end = ceil((i+1)*size/out)."""
    i = np.arange(out)
    return (i * size) // out, -((-(i + 1) * size) // out)


def adaptive_avg_pool2d(x: np.ndarray, output_size: Any) -> np.ndarray:
    n, c, h, w = x.shape
    oh, ow = _pair(output_size)
    if h % oh == 0 and w % ow == 0:
        return x.reshape(n, c, oh, h // oh, ow, w // ow).mean(axis=(3, 5)).astype(x.dtype, copy=False)
    # Uneven cells: an integral image gives every cell's sum in one gather (no loop over cells).
    integral = np.zeros((n, c, h + 1, w + 1), dtype=np.float64)
    integral[:, :, 1:, 1:] = x.astype(np.float64).cumsum(2).cumsum(3)
    hs, he = adaptive_bounds(h, oh)
    ws, we = adaptive_bounds(w, ow)
    total = (integral[:, :, he[:, None], we[None, :]] - integral[:, :, hs[:, None], we[None, :]]
             - integral[:, :, he[:, None], ws[None, :]] + integral[:, :, hs[:, None], ws[None, :]])
    area = (he - hs)[:, None] * (we - ws)[None, :]
    return (total / area).astype(x.dtype, copy=False)


def relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, np.zeros((), dtype=x.dtype))


# erfc(z) for z >= 0, Numerical Recipes' Chebyshev fit (fractional error < 1.2e-7): NumPy has
# no erf and the core must not depend on SciPy for one activation.
_ERFC_COEF = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398, 1.48851587, -0.82215223, 0.17087277)


def erf(x: np.ndarray) -> np.ndarray:
    z = np.abs(x.astype(np.float64))
    t = 1.0 / (1.0 + 0.5 * z)
    poly = np.zeros_like(z)
    for c in reversed(_ERFC_COEF):
        poly = poly * t + c
    erfc = t * np.exp(-z * z + poly)
    return np.sign(x) * (1.0 - erfc)


def gelu(x: np.ndarray, approximate: str = "none") -> np.ndarray:
    if approximate == "tanh":
        x64 = x.astype(np.float64)
        out = 0.5 * x64 * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x64 + 0.044715 * x64**3)))
    elif approximate == "none":
        out = 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))
    else:
        raise ValueError(f"gelu approximate must be 'none' or 'tanh', got {approximate!r}")
    return out.astype(x.dtype, copy=False)


def sigmoid(x: np.ndarray) -> np.ndarray:
    # Split by sign so exp never overflows.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(x.dtype, copy=False)


def tanh(x: np.ndarray) -> np.ndarray:
    return np.tanh(x)


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def batch_norm(x: np.ndarray, running_mean: np.ndarray, running_var: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None, eps: float = 1e-5) -> np.ndarray:
    shape = (1, -1) + (1,) * (x.ndim - 2)
    scale = 1.0 / np.sqrt(running_var + eps)
    if weight is not None:
        scale = scale * weight
    shift = -running_mean * scale
    if bias is not None:
        shift = shift + bias
    return (x * scale.reshape(shape).astype(x.dtype) + shift.reshape(shape).astype(x.dtype)).astype(x.dtype, copy=False)


def layer_norm(x: np.ndarray, normalized_shape: Any, weight: np.ndarray | None, bias: np.ndarray | None, eps: float = 1e-5) -> np.ndarray:
    dims = (int(normalized_shape),) if isinstance(normalized_shape, (int, np.integer)) else tuple(normalized_shape)
    axes = tuple(range(x.ndim - len(dims), x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    out = (x - mean) / np.sqrt(var + eps)
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out.astype(x.dtype, copy=False)


OPS: dict[str, Callable[..., Any]] = {
    "nn.linear": linear,
    "nn.conv2d": conv2d,
    "nn.max_pool2d": max_pool2d,
    "nn.avg_pool2d": avg_pool2d,
    "nn.adaptive_avg_pool2d": adaptive_avg_pool2d,
    "nn.relu": relu,
    "nn.gelu": gelu,
    "nn.sigmoid": sigmoid,
    "nn.tanh": tanh,
    "nn.softmax": softmax,
    "nn.batch_norm": batch_norm,
    "nn.layer_norm": layer_norm,
}
