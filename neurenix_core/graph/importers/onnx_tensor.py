"""ONNX import handlers: Shape, indexing, scatter and generator ops (ONNX's tensor and generator families)."""

from __future__ import annotations

from neurenix_core.graph.importers.onnx_common import Handler

__all__ = ["HANDLERS"]

HANDLERS: dict[str, Handler] = {}
