"""ONNX import handlers: Quantization ops (ONNX's quantization family: QuantizeLinear, DequantizeLinear, QLinear*)."""

from __future__ import annotations

from neurenix_core.graph.importers.onnx_common import Handler

__all__ = ["HANDLERS"]

HANDLERS: dict[str, Handler] = {}
