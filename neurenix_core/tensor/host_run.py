"""Running what a device cannot on the host CPU backend, under the fallback policy.

Works on host arrays and placements: the Tensor layer hands in host copies of the operands and
wraps the result (already back on the device) as tensors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from neurenix_core.device import Device
from neurenix_core.errors import NeurenixError, UnsupportedOperationError
from neurenix_core.plugins import state as _state
from neurenix_core.tensor import fallback
from neurenix_core.tensor.op_errors import raise_op_error
from neurenix_core.tensor.transfer import to_device

if TYPE_CHECKING:
    from neurenix_core.plugins.backend import Placement

__all__ = ["getitem_on_host", "run_on_host"]


def run_on_host(name: str, p: Placement, args: tuple[Any, ...], kwargs: dict[str, Any], operands: list[Any]) -> tuple[Any, bool]:
    """Run ``name`` on the CPU backend with host ``args``; the result goes back to ``p``'s device.

    Returns (native result on ``p``, whether ``p`` is the CPU backend itself, in which case the
    result may be a view of the operands).
    """
    reg = _state.registry()
    cpu = reg.backend(reg.plugin_for(Device("cpu", 0)))
    fn = cpu.ops.get(name)
    if fn is None:
        raise UnsupportedOperationError(
            f"{name} is not available on {p.device} (backend {p.backend.name}) nor on the host CPU backend; "
            f"check the op name against the array API / CONTRIBUTING.md op vocabulary"
        )
    fallback.record(name, p.backend.name, str(p.device))
    try:
        result = fn(*args, **kwargs)
    except NeurenixError:
        raise
    except Exception as exc:  # noqa: BLE001 - raise_op_error re-raises it typed, naming the device, with this as the cause
        raise_op_error(name, p, operands, exc)
    if p.backend is cpu:
        return result, True
    return to_device(result, p), False


def getitem_on_host(native: Any, p: Placement, host_key: Any, operands: list[Any], native_error: Exception) -> Any:
    """``native[key]`` computed on the host when the device's runtime refused the key.

    Only keys the host can index count as a fallback (policy applies, counted as ``__getitem__``);
    a key that is wrong everywhere raises the translated native error.
    """
    host = p.backend._to_host(native)
    try:
        result = host[host_key]
    except Exception:  # noqa: BLE001 - the host cannot index it either: the device's own error, typed
        raise_op_error("__getitem__", p, operands, native_error)
    fallback.record("__getitem__", p.backend.name, str(p.device))
    return to_device(np.asarray(result), p)
