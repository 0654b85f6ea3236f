"""Attention variants and rotary embeddings (ONNX's Attention, RotaryEmbedding ...)."""

from __future__ import annotations
