"""ONNX import handlers: Recurrent layers (ONNX's rnn family: RNN, GRU, LSTM)."""

from __future__ import annotations

from neurenix_core.graph.importers.onnx_common import Handler

__all__ = ["HANDLERS"]

HANDLERS: dict[str, Handler] = {}
