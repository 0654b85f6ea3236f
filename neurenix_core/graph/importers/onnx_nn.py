"""ONNX import handlers: Convolution, pooling, normalisation and image ops (ONNX's nn and image families)."""

from __future__ import annotations

from neurenix_core.graph.importers.onnx_common import Handler

__all__ = ["HANDLERS"]

HANDLERS: dict[str, Handler] = {}
