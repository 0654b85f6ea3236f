"""Resizing, sampling and space/depth rearrangement (ONNX's image and nn families)."""

from __future__ import annotations
