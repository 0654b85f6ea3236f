"""The safetensors layout, read and written with NumPy alone (model files, docs/model-files.md).

A file is: 8 bytes (little-endian u64) giving the header's length N; N bytes of UTF-8 JSON
mapping each tensor name to ``{"dtype", "shape", "data_offsets": [begin, end]}`` (offsets into
the data that follows), plus ``"__metadata__"``, a str -> str map; then the data, every tensor
little-endian and C-ordered, packed in header order. That is the format of Hugging Face's
``safetensors`` (https://github.com/huggingface/safetensors), so its tools read these files; the
core reads and writes it itself, so loading a model needs neither that package nor pickle.

Dtype codes are safetensors' own; the low-precision storage dtypes it has no code for (int4,
float4_e2m1fn, float8_e8m0fnu ...) are written under their ml_dtypes name, one byte per element.

Every read is checked before anything is allocated: the header's length against the file, each
tensor's bytes against its shape and dtype, offsets that tile the data exactly. Any mismatch is
a :class:`~neurenix_core.errors.ModelFormatError` naming the file and the tensor.
"""

from __future__ import annotations

import json
import math
import struct
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import numpy as np

from neurenix_core.errors import ModelFormatError

__all__ = ["MAX_HEADER_BYTES", "decode", "encode"]

#: safetensors refuses headers above 100 MB; so does this reader (a corrupt length is not allocated).
MAX_HEADER_BYTES: Final = 100_000_000

#: NumPy dtype name -> safetensors dtype code.
_CODES: Final = {
    "bool": "BOOL", "uint8": "U8", "int8": "I8", "uint16": "U16", "int16": "I16", "uint32": "U32", "int32": "I32",
    "uint64": "U64", "int64": "I64", "float16": "F16", "bfloat16": "BF16", "float32": "F32", "float64": "F64",
    "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2",
}
_NAMES: Final = {code: name for name, code in _CODES.items()}
#: ml_dtypes' storage dtypes, written under their own names (safetensors has no code for them).
_ML_DTYPES: Final = ("bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu",
                     "float4_e2m1fn", "int4", "uint4", "int2", "uint2")

_FIX = "save the model again (nx.nn.save) or copy the complete file"


def _numpy_dtype(name: str) -> np.dtype[Any]:
    if name in _ML_DTYPES:
        import ml_dtypes  # NumPy's extension dtypes; only files holding such tensors need it

        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def _code(arr: np.ndarray, key: str) -> str:
    name = arr.dtype.name
    if name in _CODES:
        return _CODES[name]
    if name in _ML_DTYPES:
        return name
    raise ModelFormatError(f"tensor {key!r} has dtype {arr.dtype}, which a model file cannot store; cast it to a numeric dtype")


def encode(tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str]) -> list[bytes]:
    """The file's bytes, as chunks (header, then each tensor's data) to write in order."""
    header: dict[str, Any] = {"__metadata__": dict(metadata)}
    chunks: list[bytes] = []
    offset = 0
    for key, value in tensors.items():
        arr = np.asarray(value)
        code = _code(arr, key)
        arr = np.asarray(arr, order="C")  # not ascontiguousarray, which makes a 0-d array 1-d
        # The file is little-endian whatever the host; non-native arrays are made native first.
        if not arr.dtype.isnative:
            arr = arr.astype(arr.dtype.newbyteorder("="))
        data = (arr.byteswap() if sys.byteorder == "big" else arr).tobytes()
        header[key] = {"dtype": code, "shape": [int(d) for d in arr.shape], "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as safetensors writes it
    return [struct.pack("<Q", len(text)), text, *chunks]


def decode(blob: bytes, source: Path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """``(tensors, metadata)`` of a file's bytes; every inconsistency is a ModelFormatError."""
    header, start = _header(blob, source)
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise ModelFormatError(f"{source}: the header's __metadata__ is not a map of strings; {_FIX}")
    data = memoryview(blob)[start:]
    tensors: dict[str, np.ndarray] = {}
    end = 0
    for key, entry in sorted(header.items(), key=lambda kv: _offsets(kv[1], kv[0], source)[0]):
        tensors[key], begin, stop = _tensor(key, entry, data, source)
        if begin != end:
            raise ModelFormatError(f"{source}: tensor {key!r} starts at byte {begin} of the data, expected {end} (the tensors must tile "
                                   f"the data); {_FIX}")
        end = stop
    if end != len(data):
        raise ModelFormatError(f"{source}: the header accounts for {end} bytes of data, the file holds {len(data)}; {_FIX}")
    return tensors, metadata


def _header(blob: bytes, source: Path) -> tuple[dict[str, Any], int]:
    if len(blob) < 8:
        raise ModelFormatError(f"{source}: {len(blob)} bytes, too short for a model file (truncated, or not one); {_FIX}")
    (length,) = struct.unpack("<Q", blob[:8])
    if length > MAX_HEADER_BYTES or 8 + length > len(blob):
        raise ModelFormatError(f"{source}: the header claims {length} bytes but the file holds {len(blob) - 8} after the length "
                               f"(truncated, or not a model file); {_FIX}")
    try:
        header = json.loads(blob[8:8 + length].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelFormatError(f"{source}: the header is not JSON ({type(exc).__name__}: {exc}); the file is corrupted or not a model "
                               f"file; {_FIX}") from exc
    if not isinstance(header, dict):
        raise ModelFormatError(f"{source}: the header is not a JSON object; {_FIX}")
    return header, 8 + length


def _offsets(entry: Any, key: str, source: Path) -> tuple[int, int]:
    offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
    if (not isinstance(offsets, list) or len(offsets) != 2 or not all(type(o) is int and o >= 0 for o in offsets)
            or offsets[0] > offsets[1]):
        raise ModelFormatError(f"{source}: tensor {key!r} has no valid data_offsets ({offsets!r}); {_FIX}")
    return offsets[0], offsets[1]


def _tensor(key: str, entry: dict[str, Any], data: memoryview, source: Path) -> tuple[np.ndarray, int, int]:
    begin, end = _offsets(entry, key, source)
    code, shape = entry.get("dtype"), entry.get("shape")
    if code not in _NAMES and code not in _ML_DTYPES:
        raise ModelFormatError(f"{source}: tensor {key!r} has dtype {code!r}, which no model file holds; {_FIX}")
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise ModelFormatError(f"{source}: tensor {key!r} has shape {shape!r}, not a list of sizes; {_FIX}")
    dtype = _numpy_dtype(_NAMES.get(code, code))
    need = math.prod(shape) * dtype.itemsize
    if end - begin != need or end > len(data):
        raise ModelFormatError(f"{source}: tensor {key!r} declares shape {tuple(shape)} of {dtype} ({need} bytes) but the file holds "
                               f"{max(0, min(end, len(data)) - begin)} bytes for it; the file is truncated or corrupted; {_FIX}")
    # A copy: the model owns its weights (writable, aligned), not a view of the file's bytes.
    arr = np.frombuffer(data[begin:end], dtype=dtype).reshape(shape).copy()
    if sys.byteorder == "big":  # the file is little-endian
        arr = arr.byteswap()
    return arr, begin, end
