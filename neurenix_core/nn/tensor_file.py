"""The safetensors layout of model files, kept under its former name: the code is the core's one
array file, :mod:`neurenix_core.io.array_file` (docs/model-files.md)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from neurenix_core.errors import ModelFormatError
from neurenix_core.io.array_file import MAX_HEADER_BYTES, encode
from neurenix_core.io.array_file import decode as decode_arrays
from neurenix_core.nn.model_file import _FIX

__all__ = ["MAX_HEADER_BYTES", "decode", "encode"]


def decode(blob: bytes | bytearray, source: Path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """``(tensors, metadata)`` of a model file's bytes; every inconsistency is a ModelFormatError."""
    return decode_arrays(blob, source, error=ModelFormatError, remedy=_FIX)
