"""The ONNX exporter, now in the core: ``neurenix_core.graph.exporters.onnx_export``.

This plugin lowers graphs for its sessions with the core's exporter (``lowering.py`` subclasses
its :class:`Exporter` for int8 QDQ); the names stay importable from here for code written against
earlier releases of this plugin.
"""

from __future__ import annotations

from neurenix_core.contract import onnx_export

EMIT, EXPORTED_OPS, GRAPH_OPS, MIN_OPSET = onnx_export.EMIT, onnx_export.EXPORTED_OPS, onnx_export.GRAPH_OPS, onnx_export.MIN_OPSET
Exporter, export = onnx_export.Exporter, onnx_export.export

__all__ = ["EMIT", "EXPORTED_OPS", "GRAPH_OPS", "MIN_OPSET", "Exporter", "export"]
