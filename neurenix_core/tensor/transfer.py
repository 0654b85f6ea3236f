"""Moving native arrays between devices: device to device where one runtime serves both, host
memory otherwise, and DLPack export and import.

Works on native arrays and placements (below the Tensor class); ``Tensor.to``, ``nx.asarray`` and
``nx.from_dlpack`` wrap what these functions return.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from neurenix_core.errors import TransferError
from neurenix_core.tensor.dtypes import contiguous
from neurenix_core.tensor.placement import check_dtype, reserve

if TYPE_CHECKING:
    from neurenix_core.plugins.backend import Placement

__all__ = ["copy_native", "dlpack_device", "export_dlpack", "host_from_dlpack", "import_dlpack", "to_device"]

# DLPack device type codes (dlpack.h).
_DL_CPU = 1
# What a producer raises when it cannot export (numpy: BufferError; torch: RuntimeError ...).
_EXPORT_ERRORS = (BufferError, RuntimeError, TypeError, ValueError)


def copy_native(native: Any, src: Placement, dst: Placement) -> Any:
    """A real copy of ``native`` (on ``src``) on ``dst``'s device; the source is untouched."""
    check_dtype(dst, src.backend._dtype_of(native))
    d2d = getattr(dst.backend, "_copy_from_device", None) if src.backend is dst.backend else None
    if d2d is not None:
        # Both devices belong to one runtime (tpu:0 -> tpu:1): it copies device to device,
        # no round trip through host memory. Optional backend method; others take the host path.
        reserve(dst, dst.backend._nbytes_of(native))
        return d2d(native, dst.index)
    host = src.backend._to_host(native)
    reserve(dst, int(host.nbytes))
    out = dst.backend._from_host(contiguous(host), dst.index)
    if out is native:  # a backend must never hand back the source buffer as the "copy"
        out = dst.backend._from_host(np.array(host, copy=True), dst.index)
    return out


def dlpack_device(native: Any) -> tuple[int, int]:
    if hasattr(native, "__dlpack_device__"):
        return tuple(native.__dlpack_device__())
    return (_DL_CPU, 0)


def export_dlpack(native: Any, p: Placement, **kwargs: Any) -> Any:
    """``Tensor.__dlpack__``: the native array's own export (zero copy)."""
    where = f"{p.device} (backend {p.backend.name})"
    if not hasattr(native, "__dlpack__"):
        raise TransferError(f"{where} cannot export DLPack; use .numpy() for a host copy")
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    if isinstance(native, np.ndarray) and any(s < 0 for s in native.strides):
        # NumPy would export negative strides, but most consumers (PyTorch, DLPack < 1.0 readers)
        # reject or crash on them: refuse here, clearly, before a capsule exists.
        raise TransferError(
            f"{where}: this tensor is a non-contiguous view with negative strides "
            f"{native.strides} that DLPack consumers cannot take; make a contiguous copy first with nx.asarray(x, copy=True)"
        )
    try:
        return native.__dlpack__(**kwargs)
    except _EXPORT_ERRORS as exc:
        raise TransferError(
            f"{where} cannot export this tensor through DLPack ({exc}); "
            f"it is probably a non-contiguous view (negative strides): make a contiguous copy first with "
            f"nx.asarray(x, copy=True) or x.to('{p.device}')"
        ) from exc


def import_dlpack(x: Any, p: Placement, copy: bool | None) -> Any:
    """``x`` (a DLPack producer) as ``p``'s native array, or None when the backend cannot import it."""
    try:
        native = p.backend._from_dlpack(x, p.index, copy)
    except _EXPORT_ERRORS as exc:
        bits = _bfloat16_host(x)
        if bits is not None:
            # NumPy's DLPack import has no bfloat16; the same bits arrive through a uint16 view.
            # Host-memory backends keep the view (shared, as DLPack would); others copy it in.
            if p.array_type is np.ndarray:
                check_dtype(p, bits.dtype)
                return bits.copy() if copy else bits
            return None
        raise TransferError(
            f"from_dlpack onto {p.device}: the producer {type(x).__name__} could not export ({exc}); "
            "non-contiguous (negative-stride) or device-resident arrays need a contiguous host copy first "
            "(e.g. numpy.ascontiguousarray(a), t.contiguous().cpu())"
        ) from exc
    if native is not None:
        check_dtype(p, p.backend._dtype_of(native))  # a shared buffer must still be a dtype the device takes
    return native


def host_from_dlpack(x: Any, p: Placement) -> Any:
    """``x`` copied through host memory onto ``p`` (for producers the backend cannot import)."""
    try:
        host = np.from_dlpack(x)
    except _EXPORT_ERRORS as exc:
        bf16 = _bfloat16_host(x)
        if bf16 is not None:
            check_dtype(p, bf16.dtype)
            reserve(p, int(bf16.nbytes))
            return p.backend._from_host(contiguous(bf16), p.index)
        raise TransferError(
            f"from_dlpack onto {p.device}: the producer {type(x).__name__} could not export to host memory ({exc}); "
            "make it contiguous and move it to the host first"
        ) from exc
    check_dtype(p, host.dtype)
    reserve(p, int(host.nbytes))
    return p.backend._from_host(contiguous(host), p.index)


def _bfloat16_host(x: Any) -> np.ndarray | None:
    """A bfloat16 producer's host array (ml_dtypes.bfloat16), or None for any other producer.

    ``np.from_dlpack`` refuses DLPack's bfloat16 code, though neurenix has the dtype. A PyTorch
    tensor is read through a uint16 view of the same bits (shared for a CPU tensor); a JAX array
    converts itself (``__array__`` gives ml_dtypes.bfloat16). torch is imported only when the
    producer is a torch tensor, which means it is already loaded.
    """
    if not str(getattr(x, "dtype", "")).endswith("bfloat16"):
        return None
    import ml_dtypes

    if type(x).__module__.split(".")[0] == "torch":
        import torch

        return x.detach().cpu().contiguous().view(torch.uint16).numpy().view(ml_dtypes.bfloat16)
    try:
        host = np.asarray(x)
    except _EXPORT_ERRORS:
        return None
    return host if host.dtype == np.dtype(ml_dtypes.bfloat16) else None


def to_device(result: Any, p: Placement) -> Any:
    """Every host array in an op result (tuples, named tuples, lists) copied onto ``p``."""
    if isinstance(result, tuple):
        items = [to_device(r, p) for r in result]
        return type(result)(*items) if hasattr(result, "_fields") else tuple(items)
    if isinstance(result, list):
        return [to_device(r, p) for r in result]
    if isinstance(result, (np.ndarray, np.generic)):
        return p.backend._from_host(contiguous(result), p.index)
    return result
