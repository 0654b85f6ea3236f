"""neurenix dtypes: NumPy dtype objects (ml_dtypes for bfloat16), shared by every backend.

Backends translate them to their own dtype objects in ``Backend._native_dtype``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from neurenix_core.errors import UnsupportedDTypeError

__all__ = [
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128", "bfloat16", "as_dtype", "isdtype",
    "result_type", "can_cast", "finfo", "iinfo", "DTYPES", "contiguous",
]

bool = np.dtype("bool")  # noqa: A001 - array API name
int8 = np.dtype("int8")
int16 = np.dtype("int16")
int32 = np.dtype("int32")
int64 = np.dtype("int64")
uint8 = np.dtype("uint8")
uint16 = np.dtype("uint16")
uint32 = np.dtype("uint32")
uint64 = np.dtype("uint64")
float16 = np.dtype("float16")
float32 = np.dtype("float32")
float64 = np.dtype("float64")
complex64 = np.dtype("complex64")
complex128 = np.dtype("complex128")


def _bfloat16() -> np.dtype[Any]:
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


bfloat16 = _bfloat16()

DTYPES: dict[str, np.dtype[Any]] = {
    str(d): d
    for d in (bool, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, bfloat16, float32, float64, complex64, complex128)
}

_KINDS: dict[str, tuple[np.dtype[Any], ...]] = {
    "bool": (bool,),
    "signed integer": (int8, int16, int32, int64),
    "unsigned integer": (uint8, uint16, uint32, uint64),
    "integral": (int8, int16, int32, int64, uint8, uint16, uint32, uint64),
    "real floating": (float16, bfloat16, float32, float64),
    "complex floating": (complex64, complex128),
    "numeric": (int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, bfloat16, float32, float64, complex64, complex128),
}


_KNOWN: frozenset[np.dtype[Any]] = frozenset(DTYPES.values())


def as_dtype(value: Any) -> np.dtype[Any]:
    """A neurenix dtype from a dtype, a name ("bfloat16") or a Python type."""
    # Fast paths first: a dtype object or a name is the common case on the hot path, and
    # str(dtype) costs about a microsecond.
    if isinstance(value, np.dtype) and value in _KNOWN:
        return value
    if isinstance(value, str) and value in DTYPES:
        return DTYPES[value]
    try:
        dt = np.dtype(value)
    except TypeError:
        raise UnsupportedDTypeError(f"unknown dtype {value!r}; known: {', '.join(DTYPES)}") from None
    if str(dt) not in DTYPES:
        raise UnsupportedDTypeError(f"dtype {dt} is not a neurenix dtype; known: {', '.join(DTYPES)}")
    return dt


def isdtype(dtype: Any, kind: Any) -> bool:
    dt = as_dtype(dtype)
    if isinstance(kind, tuple):
        return any(isdtype(dt, k) for k in kind)
    if isinstance(kind, str):
        if kind not in _KINDS:
            raise ValueError(f"unknown dtype kind {kind!r}; known: {', '.join(_KINDS)}")
        return dt in _KINDS[kind]
    return dt == as_dtype(kind)


def _dtype_of(x: Any) -> Any:
    return x.dtype if hasattr(x, "dtype") and not isinstance(x, type) else x


def result_type(*arrays_and_dtypes: Any) -> np.dtype[Any]:
    return np.result_type(*(_dtype_of(x) for x in arrays_and_dtypes))


def can_cast(from_: Any, to: Any, /) -> bool:
    return np.can_cast(_dtype_of(from_), as_dtype(to))


def finfo(type: Any, /) -> Any:  # noqa: A002
    import ml_dtypes

    return ml_dtypes.finfo(_dtype_of(type))


def iinfo(type: Any, /) -> Any:  # noqa: A002
    return np.iinfo(_dtype_of(type))


def contiguous(array: Any) -> np.ndarray:
    """A C-contiguous host array with the same shape (0-d stays 0-d, unlike np.ascontiguousarray)."""
    array = np.asarray(array)
    return array if array.flags.c_contiguous else np.array(array, order="C", copy=True)
