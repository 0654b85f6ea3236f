"""ONNX import handlers: Resize, GridSample, AffineGrid, RoiAlign (ONNX's image-style ops)."""

from __future__ import annotations

from neurenix_core.graph.importers.onnx_common import Handler

__all__ = ["HANDLERS"]

HANDLERS: dict[str, Handler] = {}
