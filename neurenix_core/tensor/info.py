"""``__array_namespace_info__``: devices, default dtypes and capabilities per device (the array
API 2024.12 inspection namespace).

Answers come from the backend serving each device (its manifest's ``Capabilities``, its runtime
and its op table), so an inspection call never claims what the device cannot do. ``dtypes()``
lists the standard's dtypes only: the 2024.12 text says "data types which are not present in this
specification should not be included", and float16 and bfloat16 are not in it (array-api-tests
checks every key against the standard's names). What a device supports beyond them is listed
under ``capabilities()["neurenix"]["extra dtypes"]`` (float16 and bfloat16 on the CPU).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from neurenix_core.device import Device
from neurenix_core.plugins import state as _state
from neurenix_core.tensor.dtypes import dtype_table, isdtype
from neurenix_core.tensor.placement import placement_for

if TYPE_CHECKING:
    from neurenix_core.plugins.backend import Backend

__all__ = ["STANDARD_DTYPES", "NamespaceInfo"]

#: The array API 2024.12 dtypes, in the standard's order; ``dtypes()`` answers with these names.
STANDARD_DTYPES: tuple[str, ...] = (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float32", "float64", "complex64", "complex128",
)


def _backend(device: Any) -> tuple[Device, Backend]:
    p = placement_for(device)
    return p.device, p.backend


class NamespaceInfo:
    """The array API inspection object for neurenix."""

    __module__ = "neurenix_core"

    def capabilities(self, *, device: Any = None) -> dict[str, Any]:
        """The standard's three flags plus, under ``"neurenix"``, what the device's backend declares."""
        dev, be = _backend(device)
        manifest = be.manifest
        declared = manifest.capabilities.as_dict() if manifest is not None else {}
        native = sorted(be.ops)
        table = dtype_table()
        return {
            # Both hold on every device: where the runtime cannot index by mask or produce a
            # data-dependent shape eagerly, the host does it under the fallback policy.
            "boolean indexing": True,
            "data-dependent shapes": True,
            "max dimensions": _max_dimensions(be),
            "neurenix": {
                **declared,
                "device": str(dev),
                "backend": be.name,
                "emulated": be.emulated,
                "linalg": any(n.startswith("linalg.") for n in native),
                "fft": any(n.startswith("fft.") for n in native),
                "extra dtypes": [n for n, d in table.items() if n not in STANDARD_DTYPES and be.supports_dtype(d)],
                "native_op_table": native,
            },
        }

    def default_device(self) -> Device:
        """The device creation functions use when given none (``nx.default_device()``)."""
        return _state.default_device()

    def devices(self) -> list[Device]:
        """Every device of every usable backend (emulated ones included), best-ranked first."""
        return _state.registry().devices()

    def default_dtypes(self, *, device: Any = None) -> dict[str, Any]:
        """float32 / complex64 / int64, or the widest the device supports when it lacks those."""
        _, be = _backend(device)

        def first(*names: str) -> Any:
            table = dtype_table()
            return next((table[n] for n in names if be.supports_dtype(table[n])), None)

        integral = first("int64", "int32", "int16", "int8")
        return {
            "real floating": first("float32", "float16", "bfloat16", "float64"),
            "complex floating": first("complex64", "complex128"),
            "integral": integral,
            "indexing": integral,
        }

    def dtypes(self, *, device: Any = None, kind: Any = None) -> dict[str, Any]:
        """The array API dtypes the device supports (declared in Capabilities.dtypes and known to
        the runtime), optionally of one ``kind`` (a kind name, a dtype, or a tuple of those)."""
        _, be = _backend(device)
        table = dtype_table()
        out = {name: table[name] for name in STANDARD_DTYPES if be.supports_dtype(table[name])}
        if kind is not None:
            out = {n: d for n, d in out.items() if isdtype(d, kind)}
        return out


def _max_dimensions(be: Backend) -> int | None:
    """The runtime's rank limit where its array-API namespace reports one, else NumPy's: host
    arrays are the storage of graph backends and of every fallback."""
    host: int | None = np.__array_namespace_info__().capabilities()["max dimensions"]  # type: ignore[typeddict-item]  # not in NumPy 2.4 stubs
    info = getattr(getattr(be, "xp", None), "__array_namespace_info__", None)
    if info is None:
        return host
    limit: int | None = info().capabilities().get("max dimensions")
    if limit is None:
        return host
    return limit if host is None else min(limit, host)
