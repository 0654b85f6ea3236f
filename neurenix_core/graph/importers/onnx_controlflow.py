"""ONNX import handlers: Control flow, sequences and optionals (ONNX's controlflow, sequence and optional families)."""

from __future__ import annotations

from neurenix_core.graph.importers.onnx_common import Handler

__all__ = ["HANDLERS"]

HANDLERS: dict[str, Handler] = {}
