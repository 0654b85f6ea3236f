"""ONNX import handlers: Math, logical and activation ops (ONNX's math and logical families)."""

from __future__ import annotations

from neurenix_core.graph.importers.onnx_common import Handler

__all__ = ["HANDLERS"]

HANDLERS: dict[str, Handler] = {}
