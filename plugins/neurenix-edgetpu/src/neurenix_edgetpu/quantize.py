"""Applying the core's quantization parameters the way TFLite does (never computing new ones).

The scales and zero points come from ``neurenix_core.graph.quantization`` as a ``graph.QuantizationPlan``;
this module only turns float arrays into int8/int32 with them, using TFLite's rounding (half away
from zero, ``std::round``), and back.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from neurenix_edgetpu.tflite_writer import TensorQuant

__all__ = ["EdgeQuantizer", "bias_int32", "dequantize", "quantize", "round_half_away", "weights_int8"]


def round_half_away(x: np.ndarray) -> np.ndarray:
    # TFLite's converter and Quantize kernel use std::round; np.round would round half to even.
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def quantize(x: np.ndarray, scale: float, zero_point: int, dtype: Any = np.int8) -> np.ndarray:
    info = np.iinfo(dtype)
    a = np.asarray(x, np.float64)
    # out= keeps v an array when x is 0-d (a plain division would return a NumPy scalar, which the
    # in-place calls below reject).
    v = np.divide(a, np.float64(np.float32(scale)), out=np.empty_like(a))
    # trunc(v + copysign(0.5, v)) is round-half-away in three ufunc calls instead of five: the
    # edges of a batch-1 model run this on every call.
    v += np.copysign(0.5, v)
    np.trunc(v, out=v)
    v += zero_point
    np.minimum(v, info.max, out=v)
    np.maximum(v, info.min, out=v)
    return v.astype(dtype)


def dequantize(q: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    out = q.astype(np.float32)
    out -= np.float32(zero_point)
    out *= np.float32(scale)
    return out


def weights_int8(weight: np.ndarray, scale: np.ndarray, axis: int = 0) -> np.ndarray:
    """Symmetric per-channel int8 weights (channels along ``axis``), range [-127, 127] as TFLite requires."""
    shape = [1] * weight.ndim
    shape[axis] = -1
    s = np.asarray(scale, np.float32).astype(np.float64).reshape(shape)
    return np.clip(round_half_away(weight.astype(np.float64) / s), -127, 127).astype(np.int8)


def bias_int32(bias: np.ndarray, input_scale: float, weight_scale: np.ndarray) -> tuple[np.ndarray, TensorQuant]:
    """int32 bias with scale input_scale * weight_scale[c] and zero point 0 (TFLite's rule)."""
    scale = (np.float64(np.float32(input_scale)) * np.asarray(weight_scale, np.float32).astype(np.float64)).astype(np.float32)
    q = round_half_away(bias.astype(np.float64) / scale.astype(np.float64))
    limit = np.iinfo(np.int32)
    q = np.clip(q, limit.min, limit.max).astype(np.int32)
    return q, TensorQuant(scale, np.zeros(scale.shape, np.int64), 0)


class EdgeQuantizer:
    """``quantize``/``dequantize`` for one model edge with every constant prepared once.

    NumPy 2 resolves the type of each Python scalar passed to a ufunc; on a batch-1 model that
    costs more than the arithmetic, so the constants are 0-d arrays of the working dtype.
    """

    __slots__ = ("_fscale", "_fzp", "_half", "_hi", "_lo", "_scale", "_zp", "dtype")

    def __init__(self, scale: float, zero_point: int, dtype: Any = np.int8) -> None:
        info = np.iinfo(dtype)
        self.dtype = np.dtype(dtype)
        self._scale = np.array(np.float32(scale), np.float64)
        self._zp = np.array(zero_point, np.float64)
        self._lo, self._hi = np.array(info.min, np.float64), np.array(info.max, np.float64)
        self._half = np.array(0.5, np.float64)
        self._fscale, self._fzp = np.array(scale, np.float32), np.array(zero_point, np.float32)

    def quantize(self, x: np.ndarray) -> np.ndarray:
        # Same arithmetic as quantize(): float64 division by the float32 scale, half away from zero.
        v = np.divide(x, self._scale, dtype=np.float64)
        v += np.copysign(self._half, v)
        np.trunc(v, out=v)
        v += self._zp
        np.clip(v, self._lo, self._hi, out=v)
        return v.astype(self.dtype)

    def dequantize(self, q: np.ndarray) -> np.ndarray:
        out = q.astype(np.float32)
        out -= self._fzp
        out *= self._fscale
        return out
