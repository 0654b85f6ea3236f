"""neurenix dtypes: NumPy dtype objects (ml_dtypes for bfloat16), shared by every backend.

Backends translate them to their own dtype objects in ``Backend._native_dtype``.
"""

from __future__ import annotations

import builtins  # ``bool`` below is the dtype (an array API name); annotations mean builtins.bool
from typing import TYPE_CHECKING, Any

import numpy as np

from neurenix_core.errors import UnsupportedDTypeError

if TYPE_CHECKING:
    from neurenix_core.tensor.dtype_info import FInfo, IInfo

__all__ = [
    "DTYPES",
    "DTYPE_ALIASES",
    "DTYPE_NAMES",
    "DTYPE_SPELLINGS",
    "FInfo",
    "IInfo",
    "as_dtype",
    "bfloat16",
    "bool",
    "can_cast",
    "complex64",
    "complex128",
    "contiguous",
    "dtype_table",
    "finfo",
    "float16",
    "float32",
    "float64",
    "iinfo",
    "int8",
    "int16",
    "int32",
    "int64",
    "isdtype",
    "result_type",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
]

bool = np.dtype("bool")  # array API name
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


#: Every neurenix dtype name, in a fixed order. Static strings, so manifests (which run at
#: ``import neurenix_core``) can declare dtypes without loading ml_dtypes.
DTYPE_NAMES: tuple[str, ...] = (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64", "complex64", "complex128",
)

# ml_dtypes (the host bfloat16) costs ~9 ms to import, a quarter of the import budget; it is loaded
# the first time bfloat16, the full table or the dtype kinds are needed.
_TABLE: dict[str, np.dtype[Any]] | None = None
_KIND_TABLE: dict[str, tuple[np.dtype[Any], ...]] | None = None
#: Dtypes that need no ml_dtypes (every neurenix dtype but bfloat16): as_dtype's fast path checks
#: against them, and the compiled cpu:0 path wraps results of these dtypes without asarray.
PLAIN_DTYPES: frozenset[np.dtype[Any]] = frozenset(
    (bool, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, float32, float64, complex64, complex128)
)


def dtype_table() -> dict[str, np.dtype[Any]]:
    """``{name: dtype}`` for every neurenix dtype (loads ml_dtypes for bfloat16 on first call)."""
    global _TABLE
    if _TABLE is None:
        import ml_dtypes

        by_name = {str(d): d for d in PLAIN_DTYPES}
        by_name["bfloat16"] = np.dtype(ml_dtypes.bfloat16)
        _TABLE = {name: by_name[name] for name in DTYPE_NAMES}
    return _TABLE


def _kinds() -> dict[str, tuple[np.dtype[Any], ...]]:
    global _KIND_TABLE
    if _KIND_TABLE is None:
        t = dtype_table()
        ints = tuple(t[n] for n in ("int8", "int16", "int32", "int64"))
        uints = tuple(t[n] for n in ("uint8", "uint16", "uint32", "uint64"))
        reals = tuple(t[n] for n in ("float16", "bfloat16", "float32", "float64"))
        complexes = (t["complex64"], t["complex128"])
        _KIND_TABLE = {
            "bool": (t["bool"],),
            "signed integer": ints,
            "unsigned integer": uints,
            "integral": ints + uints,
            "real floating": reals,
            "complex floating": complexes,
            "numeric": ints + uints + reals + complexes,
        }
    return _KIND_TABLE


if TYPE_CHECKING:  # loaded on first access by __getattr__ below; declared for type checkers
    bfloat16: np.dtype[Any]
    DTYPES: dict[str, np.dtype[Any]]


def __getattr__(name: str) -> Any:
    # ``dtypes.bfloat16`` and ``dtypes.DTYPES`` stay available, loaded on first access.
    if name == "bfloat16":
        return dtype_table()["bfloat16"]
    if name == "DTYPES":
        return dtype_table()
    if name in ("FInfo", "IInfo"):  # the answer types of finfo/iinfo, defined on their first use
        from neurenix_core.tensor import dtype_info

        return getattr(dtype_info, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: Names NumPy does not read, as PyTorch, JAX and precision strings write them (NumPy's own
#: spellings, "half", "double", "f4", "int", are read by np.dtype below). "f16" is not here:
#: NumPy reads it as float128.
DTYPE_ALIASES: dict[str, str] = {
    "fp16": "float16", "fp32": "float32", "fp64": "float64", "bf16": "bfloat16", "cfloat": "complex64",
    "cdouble": "complex128", "long": "int64", "short": "int16", "byte": "int8", "char": "int8",
}
#: The one place every public ``dtype=`` is read (asarray, zeros, astype, sum, finfo ...).
DTYPE_SPELLINGS: str = ("a neurenix or NumPy dtype, its name ('float16', 'bfloat16', 'fp16', 'bf16'), a torch dtype "
                        "(torch.float16), a JAX or ml_dtypes type (jnp.bfloat16), or float, int, bool, complex")


def as_dtype(value: Any) -> np.dtype[Any]:
    """A neurenix dtype from any spelling users write (:data:`DTYPE_SPELLINGS`): NumPy dtypes and
    names, the aliases of :data:`DTYPE_ALIASES`, torch dtypes (read by name: torch is not
    imported), JAX and ml_dtypes scalar types, Python ``float``/``int``/``bool``/``complex``
    (NumPy's meaning: float64, int64). Anything else is an UnsupportedDTypeError naming the valid names."""
    # Fast path first: a dtype object is the common case on the hot path, and str(dtype) costs
    # about a microsecond.
    if isinstance(value, np.dtype) and value in PLAIN_DTYPES:
        return value
    table = dtype_table()
    if isinstance(value, str):
        name = value.strip().lower()
        if name in table or name in DTYPE_ALIASES:
            return table[DTYPE_ALIASES.get(name, name)]
    elif _is_torch_dtype(value):
        return _from_torch(value, table)
    try:
        dt: np.dtype[Any] = np.dtype(value)
    except TypeError:
        raise UnsupportedDTypeError(f"unknown dtype {value!r}{_suggestion(value)}; neurenix dtypes: {', '.join(DTYPE_NAMES)} "
                                    f"(given as {DTYPE_SPELLINGS})") from None
    if str(dt) not in table:
        raise UnsupportedDTypeError(f"dtype {dt} (from {value!r}) is not a neurenix dtype{_suggestion(value)}; "
                                    f"neurenix dtypes: {', '.join(DTYPE_NAMES)}")
    return dt


def _is_torch_dtype(value: Any) -> builtins.bool:
    # By the type's module and name: importing torch to ask isinstance would cost a second.
    kind = type(value)
    return kind.__name__ == "dtype" and kind.__module__ == "torch"


def _from_torch(value: Any, table: dict[str, np.dtype[Any]]) -> np.dtype[Any]:
    name = str(value).removeprefix("torch.")  # str() is the canonical name: torch.half is "torch.float16"
    if name not in table:
        raise UnsupportedDTypeError(f"torch dtype {value} has no neurenix equivalent; neurenix dtypes: {', '.join(DTYPE_NAMES)}")
    return table[name]


def _suggestion(value: Any) -> str:
    if not isinstance(value, str):
        return ""
    from neurenix_core.kwargs import closest

    near = closest(value.strip().lower(), [*DTYPE_NAMES, *DTYPE_ALIASES])
    return f" (did you mean {near!r}?)" if near is not None else ""


def isdtype(dtype: Any, kind: Any) -> builtins.bool:
    dt = as_dtype(dtype)
    if isinstance(kind, tuple):
        return any(isdtype(dt, k) for k in kind)
    if isinstance(kind, str):
        kinds = _kinds()
        if kind not in kinds:
            raise ValueError(f"unknown dtype kind {kind!r}; known: {', '.join(kinds)}")
        return dt in kinds[kind]
    return dt == as_dtype(kind)


def _dtype_of(x: Any) -> Any:
    """An array's dtype (a Tensor's, NumPy's, torch's) or a dtype in any spelling, as a neurenix
    dtype; a Python scalar stays itself (the array API lets result_type promote with scalars)."""
    if type(x) in (builtins.bool, int, float, complex):
        return x
    return as_dtype(x.dtype if hasattr(x, "dtype") and not isinstance(x, type) else x)


def result_type(*arrays_and_dtypes: Any) -> np.dtype[Any]:
    return np.result_type(*(_dtype_of(x) for x in arrays_and_dtypes))


def can_cast(from_: Any, to: Any, /) -> builtins.bool:
    return np.can_cast(_dtype_of(from_), as_dtype(to))


def _info_dtype(type: Any, function: str) -> np.dtype[Any]:
    try:
        return as_dtype(_dtype_of(type))
    except UnsupportedDTypeError as exc:
        raise UnsupportedDTypeError(f"{function}: {exc}") from None


def finfo(type: Any, /) -> FInfo:
    """Machine limits of a floating-point dtype (or a tensor's); a complex dtype describes its
    real component, so ``finfo(complex64).dtype`` is ``float32``."""
    dt = _info_dtype(type, "finfo")
    if dt.kind == "c":
        dt = float32 if dt == complex64 else float64
    elif not isdtype(dt, "real floating"):
        raise UnsupportedDTypeError(f"finfo: {dt} is not a floating-point dtype; use iinfo for integer dtypes")
    import ml_dtypes  # np.finfo does not know bfloat16

    from neurenix_core.tensor.dtype_info import FInfo

    fi = ml_dtypes.finfo(dt)  # type: ignore[no-untyped-call]  # ml_dtypes.finfo is unannotated
    return FInfo(
        bits=int(fi.bits), eps=float(fi.eps), max=float(fi.max), min=float(fi.min),
        smallest_normal=float(fi.smallest_normal), dtype=dt,
    )


def iinfo(type: Any, /) -> IInfo:
    """Machine limits of an integer dtype (or a tensor's)."""
    dt = _info_dtype(type, "iinfo")
    if dt.kind not in "iu":
        raise UnsupportedDTypeError(f"iinfo: {dt} is not an integer dtype; use finfo for floating-point dtypes")
    from neurenix_core.tensor.dtype_info import IInfo

    ii = np.iinfo(dt)
    return IInfo(bits=int(ii.bits), max=int(ii.max), min=int(ii.min), dtype=dt)


def contiguous(array: Any) -> np.ndarray:
    """A C-contiguous host array with the same shape (0-d stays 0-d, unlike np.ascontiguousarray)."""
    array = np.asarray(array)
    return array if array.flags.c_contiguous else np.array(array, order="C", copy=True)
