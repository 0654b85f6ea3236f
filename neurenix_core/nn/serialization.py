"""Safe weight files: ``.npz`` (read with ``allow_pickle=False``) and ``.safetensors``.

Nothing is ever unpickled. Writes go to a staging file in the target folder and are renamed
over the destination only when complete (``neurenix_core.io.atomic``), so an interrupted save never
leaves half a file.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from neurenix_core.errors import ModelFormatError, NeurenixWarning, UnsupportedDTypeError
from neurenix_core.kwargs import strict_kwargs
from neurenix_core.user_frame import user_stacklevel

__all__ = ["FORMATS", "conform_dtypes", "load_state", "save_state"]

FORMATS = (".npz", ".safetensors")


def _format(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix not in FORMATS:
        raise ModelFormatError(f"{path}: unknown weights format {suffix!r}; use one of {', '.join(FORMATS)} (pickle files are never read)")
    return suffix


@strict_kwargs("nx.nn.save_state")
def save_state(state: Mapping[str, np.ndarray], path: str | os.PathLike[str]) -> Path:
    """Write ``state`` (name -> array) atomically to ``path``; returns the path."""
    target = Path(path)
    fmt = _format(target)
    arrays = {k: np.ascontiguousarray(np.asarray(v)) for k, v in state.items()}
    for k, v in arrays.items():
        if v.dtype == object:
            raise ModelFormatError(f"{target}: {k} has dtype object, which no safe format can store")
    from neurenix_core.io.atomic import replace_file

    def write(staging: Path) -> None:
        if fmt == ".npz":
            with staging.open("xb") as fh:
                np.savez(fh, **arrays)  # type: ignore[arg-type]  # NumPy's stub lets **kwds bind allow_pickle: bool
        else:  # not save_file: it writes a temporary file of its own, which a kill would leave behind
            staging.write_bytes(_safetensors().numpy.save(arrays))

    # A staging file beside the target, fsynced and renamed over it: an interrupted save never
    # leaves half a file; a full or read-only disk is a SaveError naming the path and the remedy.
    replace_file(target, write, what="the weights file")
    return target


@strict_kwargs("nx.nn.load_state")
def load_state(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Read a weights file written by :func:`save_state` (or PyTorch's safetensors export)."""
    import zipfile  # np.load of an .npz raises its BadZipFile (loaded by then); ~1 ms at import

    source = Path(path)
    fmt = _format(source)
    if not source.is_file():
        raise ModelFormatError(f"{source}: no such weights file")
    try:
        if fmt == ".npz":
            _check_npz(source)
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
        import safetensors
        import safetensors.numpy  # optional dependency, imported on use only
    except ImportError as exc:
        raise ModelFormatError("the .safetensors format needs the safetensors package: pip install safetensors (or save as .npz)") from exc
    return safetensors


def _check_npz(source: Path) -> None:
    """Each array's header (shape and dtype) against the bytes its member holds, before NumPy
    allocates the shape the header claims (a 100-byte file may declare terabytes)."""
    import zipfile

    from numpy.lib import format as npy

    with zipfile.ZipFile(source) as archive:
        for info in archive.infolist():
            with archive.open(info) as fh:
                version = npy.read_magic(fh)
                shape, _, dtype = npy.read_array_header_1_0(fh) if version == (1, 0) else npy.read_array_header_2_0(fh)
                if dtype.hasobject:
                    raise ModelFormatError(f"{source}: {info.filename} holds Python objects, which are never unpickled; save it "
                                           "again with numeric arrays")
                need = math.prod(shape) * dtype.itemsize
                have = info.file_size - fh.tell()
            if need != have:
                raise ModelFormatError(f"{source}: {info.filename} declares shape {shape} of {dtype} ({need} bytes) but holds "
                                       f"{have} bytes; the file is truncated or corrupted; save it again")


def conform_dtypes(state: Mapping[str, np.ndarray], expected: Mapping[str, np.dtype[Any]], source: object) -> dict[str, np.ndarray]:
    """``state`` in the dtypes the model holds (``expected``, by key).

    A float array for a float parameter of another width (float64 weights for a float32 model)
    is converted, with one NeurenixWarning naming the keys: that is what the model computes in,
    and the file says which precision it came from. So is an integer array for an integer buffer
    when every value fits. Anything else (float for an integer buffer, integer for a float
    weight, bool, complex) changes what the values mean: UnsupportedDTypeError."""
    out: dict[str, np.ndarray] = {}
    converted: list[str] = []
    for key, arr in state.items():
        want = expected.get(key)
        if want is None or arr.dtype == want:
            out[key] = arr
            continue
        if not _convertible(arr, np.dtype(want)):
            raise UnsupportedDTypeError(f"{source}: {key} is {arr.dtype} in the file, the model holds {want}; a {arr.dtype.kind!r}-kind "
                                        f"array is not converted to {want} (its values would change meaning); save the weights "
                                        "from a model of this architecture, or cast them before saving")
        out[key] = arr.astype(want)
        converted.append(f"{key} ({arr.dtype} -> {want})")
    if converted:
        warnings.warn(f"{source}: {len(converted)} weight(s) converted to the model's dtype: {', '.join(converted[:8])}"
                      f"{' ...' if len(converted) > 8 else ''}; save the weights in the model's dtype to load them as they are",
                      NeurenixWarning, stacklevel=user_stacklevel())
    return out


def _convertible(arr: np.ndarray, want: np.dtype[Any]) -> bool:
    """Float to float of any width; integer to integer where every value fits."""
    if _is_float(arr.dtype) and _is_float(want):
        return True
    if arr.dtype.kind in "iu" and want.kind in "iu":
        info = np.iinfo(want)
        return arr.size == 0 or (int(arr.min()) >= info.min and int(arr.max()) <= info.max)
    return False


def _is_float(dtype: np.dtype[Any]) -> bool:
    # ml_dtypes' bfloat16 and float8 types have kind 'V' for NumPy, yet they are floats.
    return dtype.kind == "f" or dtype.name == "bfloat16" or dtype.name.startswith("float8")
