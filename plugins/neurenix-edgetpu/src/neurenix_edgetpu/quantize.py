"""Applying the core's quantization parameters the way TFLite does (never computing new ones).

The scales and zero points come from ``neurenix_core.quantization`` as a ``graph.QuantizationPlan``;
this module only turns float arrays into int8/int32 with them, using TFLite's rounding (half away
from zero, ``std::round``), and back.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from neurenix_edgetpu.tflite_writer import TensorQuant

__all__ = ["round_half_away", "quantize", "dequantize", "weights_int8", "bias_int32"]


def round_half_away(x: np.ndarray) -> np.ndarray:
    # TFLite's converter and Quantize kernel use std::round; np.round would round half to even.
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def quantize(x: np.ndarray, scale: float, zero_point: int, dtype: Any = np.int8) -> np.ndarray:
    info = np.iinfo(dtype)
    q = round_half_away(np.asarray(x, np.float64) / np.float64(np.float32(scale))) + zero_point
    return np.clip(q, info.min, info.max).astype(dtype)


def dequantize(q: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    return ((q.astype(np.int32) - zero_point) * np.float32(scale)).astype(np.float32)


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
