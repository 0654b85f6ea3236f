"""The ONNX exporter, now in the core: ``neurenix_core.graph.exporters.onnx_export``.

This plugin lowers graphs for its sessions with the core's exporter (``lowering.py`` subclasses
its :class:`Exporter` for int8 QDQ); the names stay importable from here for code written against
earlier releases of this plugin.
"""

from __future__ import annotations

from neurenix_core.graph.exporters.onnx_export import EMIT, EXPORTED_OPS, GRAPH_OPS, MIN_OPSET, Exporter, export

__all__ = ["EMIT", "EXPORTED_OPS", "GRAPH_OPS", "MIN_OPSET", "Exporter", "export"]
