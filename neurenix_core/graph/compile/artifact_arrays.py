"""The array files of compiled artifacts (``graph.arrays``, a plugin's ``weights.arrays``): the
core's one array file, :mod:`neurenix_core.io.array_file`, with the artifacts' error class and
remedy. Files written by artifact format 1 (another layout) still read."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from neurenix_core.errors import ArtifactFormatError
from neurenix_core.io import array_file

__all__ = ["REMEDY", "dtype_named", "read_arrays", "write_arrays"]

REMEDY = "write the artifact again (compiled.save / neurenix export)"


def dtype_named(name: str, where: str) -> np.dtype[Any]:
    """The NumPy dtype called ``name`` (ml_dtypes' included); an unknown one is an ArtifactFormatError."""
    return array_file.dtype_named(name, where, ArtifactFormatError)


def write_arrays(path: Path, arrays: Mapping[str, np.ndarray]) -> None:
    array_file.write(path, array_file.encode(arrays, {}, ArtifactFormatError))


def read_arrays(path: Path) -> dict[str, np.ndarray]:
    """Every array of the file, each a view of a copy-on-write mapping of it: writable (runtimes
    such as torch.from_numpy warn on read-only memory), read from disk as it is used, and the file
    never changes."""
    arrays, _, _ = array_file.read(path, error=ArtifactFormatError, remedy=REMEDY, writable=True)
    return arrays
