"""The core's one file of named arrays: model files (``.nxm``) and compiled artifacts
(``graph.arrays``, a plugin's ``weights.arrays``) are both written and read here, with NumPy alone.

The layout is safetensors' (https://github.com/huggingface/safetensors), so its tools read the
arrays: 8 bytes (little-endian u64) giving the header's length N; N bytes of UTF-8 JSON mapping each
array name to ``{"dtype", "shape", "data_offsets": [begin, end]}`` plus ``"__metadata__"`` (a str ->
str map); then the data, little-endian and C-ordered, tiling it exactly. Two additions keep it fit
for memory-mapping:

* every array starts on a 64-byte boundary of the file (SIMD kernels and ``torch.from_numpy`` get
  aligned views): the header is padded with spaces, and the gap before an array is a ``__pad__<k>``
  entry of zero bytes (U8), which safetensors reads as a small tensor and this reader skips;
* dtypes safetensors has no code for (complex128, the ml_dtypes storage types int4, float4_e2m1fn
  ...) are written under their NumPy / ml_dtypes name; complex64 is safetensors' ``C64``.

Reading maps the file (:func:`read`): arrays are views of the mapping, read-only unless
``writable=True`` (then copy-on-write: writes stay in the process, the file never changes), and
pages are read from disk when first touched. Every read is checked before a view is made: the
header's length against the file, each array's bytes against its shape and dtype, offsets that tile
the data. A mismatch raises the caller's error class (``ModelFormatError`` for model files,
``ArtifactFormatError`` for artifacts) naming the file, the array and the remedy.

Files of compiled-artifact format 1 used another layout (``{"dtype", "shape", "offset",
"nbytes"}`` entries, no ``__metadata__``); :func:`read` recognises and still reads them.
"""

from __future__ import annotations

import hashlib
import json
import math
import mmap
import struct
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np

from neurenix_core.errors import ModelFormatError

__all__ = ["ALIGN", "MAX_HEADER_BYTES", "PAD_PREFIX", "Layout", "data_sha256", "decode", "dtype_named", "encode", "layout", "read",
           "write"]

#: Each array starts on a multiple of this many bytes of the file.
ALIGN: Final = 64
#: safetensors refuses headers above 100 MB; so does this reader (a corrupt length is not allocated).
MAX_HEADER_BYTES: Final = 100_000_000
#: Names of the zero-byte entries that align the next array; never returned, refused as array names.
PAD_PREFIX: Final = "__pad__"

#: NumPy dtype name -> safetensors dtype code.
_CODES: Final = {
    "bool": "BOOL", "uint8": "U8", "int8": "I8", "uint16": "U16", "int16": "I16", "uint32": "U32", "int32": "I32",
    "uint64": "U64", "int64": "I64", "float16": "F16", "bfloat16": "BF16", "float32": "F32", "float64": "F64",
    "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2", "complex64": "C64",
}
_NAMES: Final = {code: name for name, code in _CODES.items()}
#: Written under their own names: safetensors has no code for them.
_BY_NAME: Final = ("complex128", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn", "int4", "uint4", "int2",
                   "uint2")


def dtype_named(name: str, where: str, error: type[ModelFormatError] = ModelFormatError) -> np.dtype[Any]:
    """The NumPy dtype called ``name`` (ml_dtypes' extension types included); ``error`` otherwise."""
    try:
        return np.dtype(name)
    except TypeError:
        import ml_dtypes  # NumPy's extension dtypes; only files holding such arrays need it

        found = getattr(ml_dtypes, name, None)
        if found is None:
            raise error(f"{where}: unknown dtype {name!r}; the file was written by another neurenix") from None
        return np.dtype(found)


# ----------------------------------------------------------------------------------- write
@dataclass(frozen=True)
class Layout:
    """Where each array goes: the header's entries and the data's chunks (arrays and padding)."""

    entries: dict[str, dict[str, Any]]
    chunks: tuple[bytes, ...]

    def sha256(self) -> str:
        """SHA-256 of the data section, what :func:`data_sha256` computes on the written file."""
        digest = hashlib.sha256()
        for chunk in self.chunks:
            digest.update(chunk)
        return digest.hexdigest()

    def file_chunks(self, metadata: Mapping[str, str]) -> list[bytes]:
        """The whole file: length, header (padded so the data starts aligned), then the data."""
        text = json.dumps({"__metadata__": dict(metadata), **self.entries}, separators=(",", ":")).encode()
        text += b" " * (-(8 + len(text)) % ALIGN)
        return [struct.pack("<Q", len(text)), text, *self.chunks]


def _code(arr: np.ndarray, key: str, error: type[Exception]) -> str:
    name = arr.dtype.name
    if name in _CODES:
        return _CODES[name]
    if name in _BY_NAME:
        return name
    raise error(f"array {key!r} has dtype {arr.dtype}, which the core's array file cannot store; cast it to a numeric dtype")


def layout(arrays: Mapping[str, np.ndarray], error: type[Exception] = ModelFormatError) -> Layout:
    """The header entries and data of ``arrays``, each aligned to :data:`ALIGN` bytes."""
    entries: dict[str, dict[str, Any]] = {}
    chunks: list[bytes] = []
    offset = pads = 0
    for key, value in arrays.items():
        if key.startswith(PAD_PREFIX) or key == "__metadata__":
            raise error(f"array name {key!r} is reserved by the array file's layout; rename it")
        arr = np.asarray(value)
        code = _code(arr, key, error)
        pad = -offset % ALIGN
        if pad:
            entries[f"{PAD_PREFIX}{pads}"] = {"dtype": "U8", "shape": [pad], "data_offsets": [offset, offset + pad]}
            chunks.append(bytes(pad))
            offset, pads = offset + pad, pads + 1
        arr = np.asarray(arr, order="C")  # not ascontiguousarray, which makes a 0-d array 1-d
        if not arr.dtype.isnative:  # the file is little-endian whatever the host
            arr = arr.astype(arr.dtype.newbyteorder("="))
        data = (arr.byteswap() if sys.byteorder == "big" else arr).tobytes()
        entries[key] = {"dtype": code, "shape": [int(d) for d in arr.shape], "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    return Layout(entries, tuple(chunks))


def encode(arrays: Mapping[str, np.ndarray], metadata: Mapping[str, str], error: type[Exception] = ModelFormatError) -> list[bytes]:
    """The file's bytes, as chunks to write in order."""
    return layout(arrays, error).file_chunks(metadata)


def write(path: Path, chunks: Iterable[bytes], *, what: str = "the array file") -> Path:
    """Write ``chunks`` to ``path`` atomically (:mod:`neurenix_core.io.atomic`): a staging file
    beside it, fsynced and renamed when complete, so an interrupted save never leaves half a file;
    a full or read-only disk is a SaveError naming ``what`` at ``path``."""
    from neurenix_core.io.atomic import write_file

    return write_file(path, chunks, what=what)


# ----------------------------------------------------------------------------------- read
@dataclass(frozen=True)
class _Reading:
    """What every error of one read names: the file, the error class, the remedy."""

    source: Path
    error: type[ModelFormatError]
    remedy: str

    def fail(self, what: str) -> ModelFormatError:
        return self.error(f"{self.source}: {what}; {self.remedy}")


def read(path: Path, *, error: type[ModelFormatError] = ModelFormatError, remedy: str = "write the file again",
         writable: bool = False) -> tuple[dict[str, np.ndarray], dict[str, str], int]:
    """``(arrays, metadata, data_start)`` of the file at ``path``, the arrays views of a mapping of
    it (read-only, or copy-on-write with ``writable``), in file order."""
    r = _Reading(path, error, remedy)
    size = path.stat().st_size
    with path.open("rb") as fh:
        head = fh.read(8)
        length = _length(head, size, r)
        header = _header(fh.read(length), r)
        if _legacy(header):
            fh.seek(0)
            return _read_legacy(bytearray(fh.read()), header, 8 + length, r), {}, 0
        if size == 8 + length:  # no data: nothing to map (mmap refuses empty ranges on some systems)
            return _views(header, memoryview(b""), 8 + length, 0, r), _metadata(header, r), 8 + length
        mapped = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY if writable else mmap.ACCESS_READ)
    return _views(header, memoryview(mapped), 8 + length, size, r), _metadata(header, r), 8 + length


def decode(blob: bytes | bytearray, source: Path, *, error: type[ModelFormatError] = ModelFormatError,
           remedy: str = "write the file again") -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """``(arrays, metadata)`` of a file's bytes (views of ``blob``: writable when it is a bytearray)."""
    r = _Reading(source, error, remedy)
    length = _length(bytes(blob[:8]), len(blob), r)
    header = _header(bytes(blob[8:8 + length]), r)
    if _legacy(header):
        return _read_legacy(bytearray(blob), header, 8 + length, r), {}
    return _views(header, memoryview(blob), 8 + length, len(blob), r), _metadata(header, r)


def data_sha256(path: Path, start: int) -> str:
    """SHA-256 of the file's data section, read in blocks (not through the mapping: hashing must
    not leave every page of the file resident in the process)."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        fh.seek(start)
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _length(head: bytes, size: int, r: _Reading) -> int:
    if size < 8 or len(head) < 8:
        raise r.fail(f"{size} bytes, too short for the file (truncated, or not one)")
    (length,) = struct.unpack("<Q", head[:8])
    if length > MAX_HEADER_BYTES or 8 + length > size:
        raise r.fail(f"the header claims {length} bytes but the file holds {size - 8} after the length (truncated, or not this kind of file)")
    return int(length)


def _header(text: bytes, r: _Reading) -> dict[str, Any]:
    try:
        header = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise r.fail(f"the header is not JSON ({type(exc).__name__}: {exc}); the file is corrupted or not this kind of file") from exc
    if not isinstance(header, dict):
        raise r.fail("the header is not a JSON object")
    return header


def _metadata(header: dict[str, Any], r: _Reading) -> dict[str, str]:
    metadata = header.get("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise r.fail("the header's __metadata__ is not a map of strings")
    return metadata


def _offsets(entry: Any, key: str, r: _Reading) -> tuple[int, int]:
    offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
    if (not isinstance(offsets, list) or len(offsets) != 2 or not all(type(o) is int and o >= 0 for o in offsets)
            or offsets[0] > offsets[1]):
        raise r.fail(f"tensor {key!r} has no valid data_offsets ({offsets!r})")
    return offsets[0], offsets[1]


def _views(header: dict[str, Any], buffer: memoryview, start: int, size: int, r: _Reading) -> dict[str, np.ndarray]:
    data = buffer[start:size]
    arrays: dict[str, np.ndarray] = {}
    end = 0
    entries = [(k, v) for k, v in header.items() if k != "__metadata__"]
    for key, entry in sorted(entries, key=lambda kv: _offsets(kv[1], kv[0], r)[0]):
        arr, begin, stop = _view(key, entry, data, r)
        if begin != end:
            raise r.fail(f"tensor {key!r} starts at byte {begin} of the data, expected {end} (the tensors must tile the data)")
        end = stop
        if not key.startswith(PAD_PREFIX):
            arrays[key] = arr
    if end != len(data):
        raise r.fail(f"the header accounts for {end} bytes of data, the file holds {len(data)}")
    return arrays


def _view(key: str, entry: dict[str, Any], data: memoryview, r: _Reading) -> tuple[np.ndarray, int, int]:
    begin, end = _offsets(entry, key, r)
    code, shape = entry.get("dtype"), entry.get("shape")
    if not isinstance(code, str) or (code not in _NAMES and code not in _BY_NAME):
        raise r.fail(f"tensor {key!r} has dtype {code!r}, which no file of the core holds")
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise r.fail(f"tensor {key!r} has shape {shape!r}, not a list of sizes")
    dtype = dtype_named(_NAMES.get(code, code), str(r.source), r.error)
    need = math.prod(shape) * dtype.itemsize
    if end - begin != need or end > len(data):
        raise r.fail(f"tensor {key!r} declares shape {tuple(shape)} of {dtype} ({need} bytes) but the file holds "
                     f"{max(0, min(end, len(data)) - begin)} bytes for it; the file is truncated or corrupted")
    arr = np.frombuffer(data[begin:end], dtype=dtype).reshape(shape)
    if sys.byteorder == "big":  # the file is little-endian: a big-endian host gets a swapped copy
        arr = arr.byteswap()
    return arr, begin, end


# ----------------------------------------------------------------------------------- compiled-artifact format 1
def _legacy(header: dict[str, Any]) -> bool:
    """Whether the header is of the array files compiled artifacts wrote in format 1."""
    return "__metadata__" not in header and any(isinstance(e, dict) and "offset" in e and "data_offsets" not in e
                                                for e in header.values())


def _read_legacy(data: bytearray, header: dict[str, Any], end_of_header: int, r: _Reading) -> dict[str, np.ndarray]:
    """Format 1: arrays at ``offset`` from the first 64-byte boundary after the header, each a
    writable view of ``data``."""
    start = -(-end_of_header // ALIGN) * ALIGN
    out: dict[str, np.ndarray] = {}
    for name, entry in header.items():
        try:
            dtype = dtype_named(entry["dtype"], str(r.source), r.error)
            shape = [int(d) for d in entry["shape"]]
            begin, nbytes = start + int(entry["offset"]), int(entry["nbytes"])
        except (KeyError, TypeError, ValueError) as exc:
            raise r.fail(f"array {name!r} has a malformed entry ({type(exc).__name__}: {exc})") from exc
        if dtype.hasobject or min([*shape, begin - start, nbytes]) < 0:
            raise r.fail(f"array {name!r} has a malformed entry (dtype {dtype}, shape {shape}, {nbytes} bytes)")
        count = math.prod(shape)
        if count * dtype.itemsize != nbytes or begin + nbytes > len(data):
            raise r.fail(f"array {name!r} is truncated ({len(data)} bytes in the file)")
        out[name] = np.frombuffer(data, dtype, count, begin).reshape(shape)
    return out
