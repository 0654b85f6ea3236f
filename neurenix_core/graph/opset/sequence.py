"""Sequences and optionals (ONNX's sequence and optional families)."""

from __future__ import annotations
