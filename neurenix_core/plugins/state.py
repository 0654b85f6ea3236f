"""Process-wide state: the registry built at import, and the default device (global + context)."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

from neurenix_core.config import read_config
from neurenix_core.device import Device, DeviceLike, as_device, use_directory
from neurenix_core.plugins.registry import Registry

__all__ = ["registry", "initialize", "default_device", "set_default_device", "device"]

_registry: Registry | None = None
_explicit_default: Device | None = None
_context: contextvars.ContextVar[Device | None] = contextvars.ContextVar("neurenix_device", default=None)


def initialize() -> Registry:
    """(Re)discover plugins from the current environment and ``sys.path``."""
    global _registry, _explicit_default
    config = read_config()
    reg = Registry(config)
    reg.discover()
    _registry = reg
    use_directory(reg)
    _explicit_default = as_device(config.device) if config.device else None
    return reg


def registry() -> Registry:
    return _registry if _registry is not None else initialize()


def default_device() -> Device:
    """The device new tensors go to: ``with nx.device(...)``, then ``set_default_device`` /
    ``NEURENIX_DEVICE``, then the best-ranked available device. An explicit choice that is not
    available raises with the reason and the remedy."""
    chosen = _context.get() or _explicit_default
    if chosen is None:
        return registry().auto_default
    registry().plugin_for(chosen)  # raises DeviceNotFoundError / BackendUnavailableError
    return chosen


def is_auto() -> bool:
    return _context.get() is None and _explicit_default is None


def set_default_device(value: DeviceLike | None) -> None:
    """Set the process default device (``None`` returns to automatic selection)."""
    global _explicit_default
    if value is None:
        _explicit_default = None
        return
    dev = as_device(value)
    registry().plugin_for(dev)
    _explicit_default = dev


@contextlib.contextmanager
def device(value: DeviceLike) -> Iterator[Device]:
    """``with nx.device("npu:0"):`` new tensors in the block go to that device."""
    dev = as_device(value)
    registry().plugin_for(dev)
    token = _context.set(dev)
    try:
        yield dev
    finally:
        _context.reset(token)
