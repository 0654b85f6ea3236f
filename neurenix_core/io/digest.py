"""SHA-256 of a file, read in 1 MiB blocks: what artifact manifests and checkpoints record of
each file they hold, so a file of another save or a damaged copy is refused on load."""

from __future__ import annotations

import hashlib
from pathlib import Path

__all__ = ["file_sha256"]


def file_sha256(path: Path) -> str:
    """The hex SHA-256 of the file at ``path`` (memory bounded by the block, whatever its size)."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
