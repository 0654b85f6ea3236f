"""Bitwise and logical ops beyond the comparisons (ONNX's logical family)."""

from __future__ import annotations
