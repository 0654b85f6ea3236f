"""A flat file of named arrays: an 8-byte header length, a JSON header (name -> dtype, shape,
offset), then the raw bytes. Readable without pickle and with any dtype the core knows
(bfloat16 and the float8 / int4 storage dtypes through ml_dtypes), unlike ``.npz``."""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from neurenix_core.errors import ArtifactFormatError

__all__ = ["dtype_named", "read_arrays", "write_arrays"]

_ALIGN = 64  # each array starts on a 64-byte boundary: frombuffer views stay aligned for SIMD kernels


def dtype_named(name: str, where: str) -> np.dtype[Any]:
    """The NumPy dtype called ``name`` (ml_dtypes' extension types included)."""
    try:
        return np.dtype(name)
    except TypeError:
        import ml_dtypes

        found = getattr(ml_dtypes, name, None)
        if found is None:
            raise ArtifactFormatError(f"{where}: unknown dtype {name!r}; the artifact was written by another neurenix") from None
        return np.dtype(found)


def write_arrays(path: Path, arrays: Mapping[str, np.ndarray]) -> None:
    header: dict[str, Any] = {}
    offset = 0
    for name, array in arrays.items():
        if array.dtype.hasobject:
            raise ArtifactFormatError(f"array {name!r} holds Python objects; it cannot be written to {path.name}")
        offset = -(-offset // _ALIGN) * _ALIGN
        header[name] = {"dtype": str(array.dtype), "shape": list(array.shape), "offset": offset, "nbytes": int(array.nbytes)}
        offset += int(array.nbytes)
    head = json.dumps(header).encode()
    start = -(-(8 + len(head)) // _ALIGN) * _ALIGN
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(head)) + head)
        for name, array in arrays.items():
            f.seek(start + header[name]["offset"])
            f.write(np.ascontiguousarray(array).tobytes())


def read_arrays(path: Path) -> dict[str, np.ndarray]:
    """Every array of the file, each a view of one buffer read at once (writable: runtimes such as
    torch.from_numpy warn on read-only memory)."""
    data = bytearray(path.read_bytes())
    where = f"compiled artifact file {path}"
    try:
        (size,) = struct.unpack_from("<Q", data)
        header = json.loads(data[8:8 + size])
    except (struct.error, ValueError) as exc:
        raise ArtifactFormatError(f"{where} has no readable header ({exc}); write the artifact again (compiled.save / neurenix export)") from exc
    start = -(-(8 + size) // _ALIGN) * _ALIGN
    out: dict[str, np.ndarray] = {}
    for name, entry in header.items():
        dtype = dtype_named(entry["dtype"], where)
        count = int(np.prod(entry["shape"], dtype=np.int64))
        begin = start + int(entry["offset"])
        if count * dtype.itemsize != entry["nbytes"] or begin + entry["nbytes"] > len(data):
            raise ArtifactFormatError(f"{where}: array {name!r} is truncated ({len(data)} bytes in the file); write the artifact again")
        out[name] = np.frombuffer(data, dtype, count, begin).reshape(entry["shape"])
    return out
