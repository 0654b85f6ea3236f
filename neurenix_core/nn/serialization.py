"""Safe weight files: ``.npz`` (read with ``allow_pickle=False``) and ``.safetensors``.

Nothing is ever unpickled. Writes go to a temporary file in the target folder and are renamed
over the destination only when complete, so an interrupted save never leaves half a file.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from neurenix_core.errors import ModelFormatError

__all__ = ["save_state", "load_state", "FORMATS"]

FORMATS = (".npz", ".safetensors")


def _format(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix not in FORMATS:
        raise ModelFormatError(f"{path}: unknown weights format {suffix!r}; use one of {', '.join(FORMATS)} (pickle files are never read)")
    return suffix


def save_state(state: Mapping[str, np.ndarray], path: str | os.PathLike[str]) -> Path:
    """Write ``state`` (name -> array) atomically to ``path``; returns the path."""
    target = Path(path)
    fmt = _format(target)
    arrays = {k: np.ascontiguousarray(np.asarray(v)) for k, v in state.items()}
    for k, v in arrays.items():
        if v.dtype == object:
            raise ModelFormatError(f"{target}: {k} has dtype object, which no safe format can store")
    import tempfile  # with shutil and the compressors, ~3 ms: on first save, not at import

    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        if fmt == ".npz":
            with open(tmp, "wb") as fh:
                np.savez(fh, **arrays)
        else:
            _safetensors().numpy.save_file(arrays, tmp)
        os.replace(tmp, target)
    except BaseException:
        # The half-written temp file goes; the destination was never touched. Re-raised as is.
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def load_state(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Read a weights file written by :func:`save_state` (or PyTorch's safetensors export)."""
    import zipfile  # np.load of an .npz raises its BadZipFile (loaded by then); ~1 ms at import

    source = Path(path)
    fmt = _format(source)
    if not source.is_file():
        raise ModelFormatError(f"{source}: no such weights file")
    try:
        if fmt == ".npz":
            with np.load(source, allow_pickle=False) as data:
                return {k: data[k] for k in data.files}
        return dict(_safetensors().numpy.load_file(str(source)))
    except ModelFormatError:
        raise
    except (OSError, ValueError, zipfile.BadZipFile, EOFError, KeyError) as exc:
        raise ModelFormatError(f"{source}: corrupted or truncated {fmt} weights file ({type(exc).__name__}: {exc}); save it again") from exc
    except Exception as exc:  # safetensors raises its own SafetensorError (a plain Exception subclass)
        if type(exc).__name__ == "SafetensorError":
            raise ModelFormatError(f"{source}: corrupted .safetensors weights file ({exc}); save it again") from exc
        raise


def _safetensors() -> Any:
    try:
        import safetensors.numpy  # noqa: F401 - optional dependency, imported on use only
        import safetensors
    except ImportError as exc:
        raise ModelFormatError("the .safetensors format needs the safetensors package: pip install safetensors (or save as .npz)") from exc
    return safetensors
