"""``__array_namespace_info__``: devices, default dtypes and capabilities per device.

Answers come from the backend serving each device (its manifest's ``Capabilities`` and its op
table), so an inspection call never claims what the device cannot do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from neurenix_core.plugins import state as _state
from neurenix_core.device import Device
from neurenix_core.tensor.dtypes import dtype_table, isdtype
from neurenix_core.tensor.placement import placement_for

if TYPE_CHECKING:
    from neurenix_core.plugins.backend import Backend

__all__ = ["NamespaceInfo"]


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
        return {
            "boolean indexing": True,
            "data-dependent shapes": True,
            "max dimensions": 64,
            "neurenix": {
                **declared,
                "device": str(dev),
                "backend": be.name,
                "emulated": be.emulated,
                "linalg": any(n.startswith("linalg.") for n in native),
                "native_op_table": native,
            },
        }

    def default_device(self) -> Device:
        return _state.default_device()

    def devices(self) -> list[Device]:
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
        """The dtypes the device supports (declared in Capabilities.dtypes and known to the runtime)."""
        _, be = _backend(device)
        out = {name: dt for name, dt in dtype_table().items() if be.supports_dtype(dt)}
        if kind is not None:
            out = {n: d for n, d in out.items() if isdtype(d, kind)}
        return out
