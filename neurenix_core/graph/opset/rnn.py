"""Recurrent layers (ONNX's RNN, GRU, LSTM)."""

from __future__ import annotations
