"""Quantize, dequantize and integer-arithmetic ops (ONNX's quantization family)."""

from __future__ import annotations
