"""Moving data between devices (DLPack where both sides can, host memory otherwise) and
running host fallbacks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from neurenix_core.tensor import fallback
from neurenix_core.device import Device, DeviceLike
from neurenix_core.tensor.dtypes import contiguous
from neurenix_core.errors import NeurenixError, TransferError, UnsupportedOperationError
from neurenix_core.tensor.tensor import Tensor, raise_op_error, adopt, placement_for, rewrap

if TYPE_CHECKING:
    from neurenix_core.plugins.backend import Placement

__all__ = ["copy_to", "from_dlpack", "export_dlpack", "dlpack_device", "run_fallback", "getitem_fallback"]

# DLPack device type codes (dlpack.h).
_DL_CPU = 1
# What a producer raises when it cannot export (numpy: BufferError; torch: RuntimeError ...).
_EXPORT_ERRORS = (BufferError, RuntimeError, TypeError, ValueError)


def copy_to(t: Tensor, device: Device) -> Tensor:
    """A real copy of ``t`` on ``device``; the source tensor is untouched."""
    from neurenix_core.tensor.creation import check_dtype

    p = placement_for(device)
    check_dtype(p, t.dtype)
    d2d = getattr(p.backend, "_copy_from_device", None) if t._p.backend is p.backend else None
    if d2d is not None:
        # Both devices belong to one runtime (tpu:0 -> tpu:1): it copies device to device,
        # no round trip through host memory. Optional backend method; others take the host path.
        nbytes = p.backend._nbytes_of(t._data)
        if p.mem.in_use + nbytes > p.mem.limit:
            raise p.mem.refuse(nbytes)
        return adopt(d2d(t._data, p.index), p)
    host = t._p.backend._to_host(t._data)
    nbytes = int(host.nbytes)
    if p.mem.in_use + nbytes > p.mem.limit:
        raise p.mem.refuse(nbytes)
    native = p.backend._from_host(contiguous(host), p.index)
    if native is t._data:  # a backend must never hand back the source buffer as the "copy"
        native = p.backend._from_host(np.array(host, copy=True), p.index)
    return adopt(native, p)


def dlpack_device(t: Tensor) -> tuple[int, int]:
    native = t._data
    if hasattr(native, "__dlpack_device__"):
        return tuple(native.__dlpack_device__())  # type: ignore[return-value]
    return (_DL_CPU, 0)


def export_dlpack(t: Tensor, **kwargs: Any) -> Any:
    """``t.__dlpack__``: the native array's own export (zero copy)."""
    native = t._data
    if not hasattr(native, "__dlpack__"):
        raise TransferError(f"{t.device} (backend {t._p.backend.name}) cannot export DLPack; use .numpy() for a host copy")
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    if isinstance(native, np.ndarray) and any(s < 0 for s in native.strides):
        # NumPy would export negative strides, but most consumers (PyTorch, DLPack < 1.0 readers)
        # reject or crash on them: refuse here, clearly, before a capsule exists.
        raise TransferError(
            f"{t.device} (backend {t._p.backend.name}): this tensor is a non-contiguous view with negative strides "
            f"{native.strides} that DLPack consumers cannot take; make a contiguous copy first with nx.asarray(x, copy=True)"
        )
    try:
        return native.__dlpack__(**kwargs)
    except _EXPORT_ERRORS as exc:
        raise TransferError(
            f"{t.device} (backend {t._p.backend.name}) cannot export this tensor through DLPack ({exc}); "
            f"it is probably a non-contiguous view (negative strides): make a contiguous copy first with "
            f"nx.asarray(x, copy=True) or x.to('{t.device}')"
        ) from exc


def from_dlpack(x: Any, /, *, device: DeviceLike | None = None, copy: bool | None = None) -> Tensor:
    """A tensor from any ``__dlpack__`` producer.

    Zero copy onto host-memory backends (cpu, npu, edgetpu, ort) and onto backends whose library
    imports DLPack natively; otherwise, unless ``copy=False``, through a host copy.
    """
    if not hasattr(x, "__dlpack__"):
        raise TransferError(f"from_dlpack needs an object with __dlpack__, got {type(x).__name__}")
    p = placement_for(device)
    if isinstance(x, Tensor):
        if x.device == p.device and copy is not True:
            return adopt(x._data, p, (x,))  # same device: a view sharing x's buffer
        x = x._data
    native = _import_native(x, p, copy)
    if native is None:
        if copy is False:
            raise TransferError(f"from_dlpack(copy=False): backend {p.backend.name} cannot share memory with {type(x).__name__}; allow a copy")
        return _via_host(x, p)
    from neurenix_core.tensor.creation import check_dtype

    check_dtype(p, p.backend._dtype_of(native))  # a shared buffer must still be a dtype the device takes
    return adopt(native, p)


def _import_native(x: Any, p: Placement, copy: bool | None) -> Any:
    try:
        return p.backend._from_dlpack(x, p.index, copy)
    except _EXPORT_ERRORS as exc:
        raise TransferError(
            f"from_dlpack onto {p.device}: the producer {type(x).__name__} could not export ({exc}); "
            "non-contiguous (negative-stride) or device-resident arrays need a contiguous host copy first "
            "(e.g. numpy.ascontiguousarray(a), t.contiguous().cpu())"
        ) from exc


def _via_host(x: Any, p: Placement) -> Tensor:
    from neurenix_core.tensor.creation import check_dtype

    try:
        host = np.from_dlpack(x)
    except _EXPORT_ERRORS as exc:
        raise TransferError(
            f"from_dlpack onto {p.device}: the producer {type(x).__name__} could not export to host memory ({exc}); "
            "make it contiguous and move it to the host first"
        ) from exc
    check_dtype(p, host.dtype)
    if p.mem.in_use + host.nbytes > p.mem.limit:
        raise p.mem.refuse(int(host.nbytes))
    return adopt(p.backend._from_host(contiguous(host), p.index), p)


def run_fallback(name: str, p: Placement, args: tuple[Any, ...], kwargs: dict[str, Any], tensors: list[Tensor]) -> Any:
    """Run ``name`` on the host CPU under the fallback policy; results go back to ``p``'s device."""
    from neurenix_core.plugins.state import registry

    reg = registry()
    cpu = reg.backend(reg.plugin_for(Device("cpu", 0)))
    fn = cpu.ops.get(name)
    if fn is None:
        raise UnsupportedOperationError(
            f"{name} is not available on {p.device} (backend {p.backend.name}) nor on the host CPU backend; "
            f"check the op name against the array API / CONTRIBUTING.md op vocabulary"
        )
    fallback.record(name, p.backend.name, str(p.device))

    def host(v: Any) -> Any:
        if type(v) is Tensor:
            return v._p.backend._to_host(v._data)
        if isinstance(v, (list, tuple)) and not hasattr(v, "_fields"):
            return type(v)(host(i) for i in v)
        return v

    try:
        result = fn(*(host(a) for a in args), **{k: host(v) for k, v in kwargs.items()})
    except NeurenixError:
        raise
    except Exception as exc:
        raise_op_error(name, p, tensors, exc)
    if p.backend is cpu:
        return rewrap(result, p, tensors)
    return rewrap(_to_device(result, p), p)


def _to_device(result: Any, p: Placement) -> Any:
    if isinstance(result, tuple):
        items = [_to_device(r, p) for r in result]
        return type(result)(*items) if hasattr(result, "_fields") else tuple(items)
    if isinstance(result, list):
        return [_to_device(r, p) for r in result]
    if isinstance(result, (np.ndarray, np.generic)):
        return p.backend._from_host(contiguous(result), p.index)
    return result


def getitem_fallback(t: Tensor, key: Any, native_error: Exception) -> Tensor:
    """``t[key]`` computed on the host when the device's runtime refused the key.

    Only keys the host can index count as a fallback (policy applies, counted as ``__getitem__``);
    a key that is wrong everywhere raises the translated native error.
    """
    p = t._p

    def host_key(k: Any) -> Any:
        if type(k) is Tensor:
            return k.numpy()
        return tuple(host_key(i) for i in k) if isinstance(k, tuple) else k

    host = p.backend._to_host(t._data)
    try:
        result = host[host_key(key)]
    except Exception:
        raise_op_error("__getitem__", p, [t], native_error)
    fallback.record("__getitem__", p.backend.name, str(p.device))
    return adopt(p.backend._from_host(contiguous(np.asarray(result)), p.index), p)
