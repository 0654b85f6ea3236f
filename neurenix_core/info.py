"""``__array_namespace_info__``: devices, default dtypes and capabilities per device."""

from __future__ import annotations

from typing import Any

from neurenix_core import _state
from neurenix_core.device import Device, as_device
from neurenix_core.dtypes import DTYPES, isdtype

__all__ = ["NamespaceInfo"]

_KINDS = ("bool", "signed integer", "unsigned integer", "integral", "real floating", "complex floating", "numeric")


class NamespaceInfo:
    """The array API inspection object for neurenix."""

    def capabilities(self, *, device: Any = None) -> dict[str, Any]:
        dev = _state.default_device() if device is None else as_device(device)
        caps = _state.registry().plugin_for(dev).manifest
        assert caps is not None
        return {
            "boolean indexing": True,
            "data-dependent shapes": True,
            "max dimensions": 64,
            "neurenix": caps.capabilities.as_dict(),
        }

    def default_device(self) -> Device:
        return _state.default_device()

    def devices(self) -> list[Device]:
        return _state.registry().devices()

    def default_dtypes(self, *, device: Any = None) -> dict[str, Any]:
        return {
            "real floating": DTYPES["float32"],
            "complex floating": DTYPES["complex64"],
            "integral": DTYPES["int64"],
            "indexing": DTYPES["int64"],
        }

    def dtypes(self, *, device: Any = None, kind: Any = None) -> dict[str, Any]:
        dev = _state.default_device() if device is None else as_device(device)
        manifest = _state.registry().plugin_for(dev).manifest
        assert manifest is not None
        allowed = set(manifest.capabilities.dtypes)
        out = {name: dt for name, dt in DTYPES.items() if name in allowed}
        if kind is not None:
            out = {n: d for n, d in out.items() if isdtype(d, kind)}
        return out
