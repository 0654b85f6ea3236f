"""Moving data between devices (DLPack where both sides can, host memory otherwise) and
running host fallbacks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from neurenix_core import fallback
from neurenix_core.device import Device, DeviceLike
from neurenix_core.errors import TransferError
from neurenix_core.tensor import Tensor, _rewrap, default_backend, wrap

if TYPE_CHECKING:
    from neurenix_core.backend import Backend

__all__ = ["copy_to", "from_dlpack", "export_dlpack", "dlpack_device", "run_fallback"]

# DLPack device type codes (dlpack.h).
_DL_CPU = 1


def copy_to(t: Tensor, device: Device) -> Tensor:
    """A real copy of ``t`` on ``device``; the source tensor is untouched."""
    be, dev, index = default_backend(device)
    host = t._backend._to_host(t._data)
    be.memory.check(index, int(host.nbytes))
    return wrap(be._from_host(np.ascontiguousarray(host), index), be, dev, index)


def dlpack_device(t: Tensor) -> tuple[int, int]:
    native = t._data
    if hasattr(native, "__dlpack_device__"):
        return tuple(native.__dlpack_device__())  # type: ignore[return-value]
    return (_DL_CPU, 0)


def export_dlpack(t: Tensor, **kwargs: Any) -> Any:
    native = t._data
    if not hasattr(native, "__dlpack__"):
        raise TransferError(f"{t.device} (backend {t._backend.name}) cannot export DLPack; use .numpy() for a host copy")
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    return native.__dlpack__(**kwargs)


def from_dlpack(x: Any, /, *, device: DeviceLike | None = None, copy: bool | None = None) -> Tensor:
    """A tensor from any ``__dlpack__`` producer; zero-copy onto the CPU backend when possible."""
    if not hasattr(x, "__dlpack__"):
        raise TransferError(f"from_dlpack needs an object with __dlpack__, got {type(x).__name__}")
    if isinstance(x, Tensor):
        x = x._data
    try:
        host = np.from_dlpack(x, copy=copy)
    except (BufferError, RuntimeError, TypeError, ValueError) as exc:
        raise TransferError(
            f"from_dlpack: the producer {type(x).__name__} could not export to host memory ({exc}); "
            "non-contiguous or device-resident arrays need .contiguous() / a host copy first"
        ) from exc
    be, dev, index = default_backend(device)
    if str(be.device_type) == "cpu":
        return wrap(host, be, dev, index)  # zero-copy: NumPy is the CPU backend's native array
    return wrap(be._from_host(np.ascontiguousarray(host), index), be, dev, index)


def run_fallback(name: str, be: Backend, device: Device, index: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run ``name`` on the host CPU under the fallback policy; results go back to ``device``."""
    from neurenix_core._state import registry

    cpu = registry().backend(registry().plugin_for(Device("cpu", 0)))
    fn = cpu.ops.get(name)
    if fn is None:
        raise TransferError(f"{name} is not available on {device} nor on the host CPU backend")
    fallback.record(name, be.name, str(device))

    def host(v: Any) -> Any:
        if type(v) is Tensor:
            return v._backend._to_host(v._data)
        if isinstance(v, (list, tuple)) and not hasattr(v, "_fields"):
            return type(v)(host(i) for i in v)
        return v

    result = fn(*(host(a) for a in args), **{k: host(v) for k, v in kwargs.items()})
    return _rewrap(_to_device(result, be, index), be, device, index)


def _to_device(result: Any, be: Backend, index: int) -> Any:
    if isinstance(result, tuple):
        items = [_to_device(r, be, index) for r in result]
        return type(result)(*items) if hasattr(result, "_fields") else tuple(items)
    if isinstance(result, list):
        return [_to_device(r, be, index) for r in result]
    if isinstance(result, (np.ndarray, np.generic)):
        return be._from_host(np.ascontiguousarray(result), index)
    return result
