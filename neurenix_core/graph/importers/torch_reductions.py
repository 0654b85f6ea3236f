"""ATen -> opset mappings (PyTorch is not imported here); merged into ``torch_export``'s table."""

from __future__ import annotations

from neurenix_core.graph.importers.torch_ops import Handler

__all__ = ["HANDLERS"]

HANDLERS: dict[str, Handler] = {}
