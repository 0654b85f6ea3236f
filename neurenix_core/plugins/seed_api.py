"""Building blocks for the plugins' seed-style APIs (``NPUBackend``, ``EdgeTPUBackend`` ...).

The seed documents give every accelerator the same shape: ``is_<x>_available()``, an
``XBackend`` with ``initialize()``, ``get_device_count()`` and ``get_device_info(i)``. The
shape lives here once; a plugin subclasses :class:`DeviceBackend` and adds what its hardware has.
"""

from __future__ import annotations

import importlib
from typing import Any, ClassVar

from neurenix_core.device import Device, DeviceLike, as_device
from neurenix_core.errors import BackendUnavailableError, DeviceMismatchError, DeviceNotFoundError

__all__ = ["DeviceBackend", "device_available"]


def device_available(device_type: str, *, allow_emulated: bool = True) -> bool:
    """True when ``<device_type>:0`` can be used; an emulated device counts unless
    ``allow_emulated=False``. Never raises: it answers the seed's ``is_<x>_available()``."""
    from neurenix_core.plugins.state import registry

    reg = registry()
    dev = Device(device_type, 0)
    if not reg.has_device(dev):
        return False
    return allow_emulated or not reg.is_emulated(dev)


class DeviceBackend:
    """One device of one plugin, as the seed documents use it: create, ``initialize()``, use.

    Subclasses set ``device_type`` and ``backend_class`` (``"module:Class"`` of the Backend they
    expect, checked on ``initialize()`` so another plugin serving the same type is not silently
    used in its place).
    """

    device_type: ClassVar[str]
    backend_class: ClassVar[str]

    def __init__(self, device: DeviceLike | int = 0) -> None:
        self.device = Device(self.device_type, device) if isinstance(device, int) else as_device(device)
        if self.device.type != self.device_type:
            raise DeviceMismatchError(
                f"{type(self).__name__} serves {self.device_type} devices, not {self.device}; use the backend of that device type"
            )
        self._backend: Any = None

    def initialize(self) -> bool:
        """Start the runtime for the device; True on success. Raises BackendUnavailableError
        naming what is missing (driver, device node, runtime): never a silent False."""
        from neurenix_core.plugins.state import registry

        backend = registry().backend_for(self.device)  # an explicit device: a failure raises
        module, _, name = self.backend_class.partition(":")
        expected = getattr(importlib.import_module(module), name)
        if not isinstance(backend, expected):
            raise BackendUnavailableError(
                f"{self.device} is served by plugin {backend.name}, not by {expected.__name__}'s plugin; "
                f"deny it with NEURENIX_BACKENDS=-{backend.name}"
            )
        self._backend = backend
        return True

    @property
    def backend(self) -> Any:
        """The plugin's Backend object (started on first use)."""
        if self._backend is None:
            self.initialize()
        return self._backend

    @property
    def emulated(self) -> bool:
        return bool(self.backend.emulated)

    def get_device_count(self) -> int:
        return int(self.backend.device_count())

    def get_device_info(self, index: int | None = None) -> dict[str, Any]:
        """What the runtime reports about device ``index`` (default: this backend's device)."""
        index = self.device.index if index is None else index
        count = self.get_device_count()
        if not 0 <= index < count:
            raise DeviceNotFoundError(f"{self.device_type}:{index} does not exist: {count} {self.device_type} device(s)")
        return dict(self.backend.device_info(index))
