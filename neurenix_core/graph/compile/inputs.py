"""What a compiled model accepts and returns: one rule for every compiled path.

Inference runtimes (OpenVINO, ONNX Runtime, LiteRT, TensorRT) take host inputs, and so do
compiled models, whatever built them (``nx.compile``, a plugin's seed-style ``optimize_model``,
a runtime model called directly):

1. A Tensor on the compiled device is used as it is (no copy).
2. Host memory is copied in as part of the call: NumPy arrays, Python numbers and lists,
   Tensors on a host device (``cpu:0``), objects exporting ``__dlpack__`` from host memory
   (``__dlpack_device__`` says CPU) and objects with ``__array__``. Numbers become the dtype the
   model declares for that input (float32 for most models; float16, float64, int64 token ids ...).
3. A Tensor on another accelerator (``tpu:0`` into an ``npu:0`` model, ``tpu:1`` into a ``tpu:0``
   model), or a DLPack producer in device memory, is refused with ``DeviceMismatchError``: moving
   data between accelerators is the user's explicit ``x.to(...)``, as everywhere in neurenix.

Outputs: ``outputs="device"`` (the default) gives Tensors on the compiled device;
``outputs="host"`` gives NumPy arrays, as the runtimes themselves do. Eager models
(``model.to("npu:0")(x)``) keep the strict rule of eager ops: every operand on one device.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from neurenix_core.device import Device
from neurenix_core.errors import CompilationError, ConfigurationError, DeviceMismatchError
from neurenix_core.tensor.dtypes import contiguous
from neurenix_core.tensor.tensor import Tensor, wrap

if TYPE_CHECKING:
    from neurenix_core.plugins.backend import Backend

__all__ = [
    "OUTPUTS",
    "call_runtime",
    "check_outputs",
    "deliver",
    "deliver_tensors",
    "host_array",
    "is_host_device",
    "to_device_input",
    "to_device_inputs",
]

#: Where a compiled model's outputs go: Tensors on its device, or NumPy arrays in host memory.
OUTPUTS: Final = ("device", "host")

# DLPack device types whose memory the host can read directly (dlpack.h: kDLCPU, kDLCUDAHost,
# kDLROCMHost, kDLCUDAManaged).
_HOST_DLPACK: Final = frozenset({1, 3, 11, 13})


def check_outputs(outputs: str, device: Device) -> str:
    """``outputs`` when it is one of OUTPUTS, else a ConfigurationError naming the choices."""
    if outputs not in OUTPUTS:
        raise ConfigurationError(f"compiled model on {device}: outputs={outputs!r}; use 'device' (Tensors on {device}) or 'host' (NumPy arrays)")
    return outputs


def is_host_device(device: Device) -> bool:
    """Whether tensors on ``device`` live in host memory that the user owns (the CPU backend)."""
    return str(device.type) == "cpu"


def _refused(i: int, where: str, device: Device) -> DeviceMismatchError:
    return DeviceMismatchError(
        f"input {i} is on {where} but the model is compiled for {device}; move it explicitly with x.to('{device}') "
        f"(host inputs such as NumPy arrays and cpu tensors are copied in by the call; other accelerators never are)"
    )


def host_array(x: Any, i: int, device: Device, dtype: Any = np.float32) -> np.ndarray:
    """Input ``i`` (anything but a Tensor on ``device``) as a host array of ``dtype`` (float32
    unless the graph input is declared otherwise, e.g. int64 token ids), or refused."""
    if isinstance(x, Tensor):
        if not is_host_device(x._device):
            raise _refused(i, str(x.device), device)
        arr = x._p.backend._to_host(x._data)
    elif type(x) is np.ndarray:
        arr = x
    elif hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        arr = _from_dlpack(x, i, device)
    else:
        arr = np.asarray(x)
    if arr.dtype == dtype:
        return arr
    from neurenix_core.graph.opset.schema import STORAGE_DTYPES  # loaded by then: the model was built with the opset

    if str(arr.dtype) in STORAGE_DTYPES or str(np.dtype(dtype)) in STORAGE_DTYPES:
        return _storage_input(arr, i, device, np.dtype(dtype), STORAGE_DTYPES)
    if arr.dtype.kind not in "fiu" and not (arr.dtype.kind == "b" and np.dtype(dtype).kind == "b"):
        raise CompilationError(f"input {i} has dtype {arr.dtype}; the compiled model on {device} takes real numbers")
    return arr.astype(dtype)


def _storage_input(arr: np.ndarray, i: int, device: Device, dtype: np.dtype[Any], storage: Sequence[str]) -> np.ndarray:
    """A host input to or from a low-precision storage dtype (``opset.STORAGE_DTYPES``: float8,
    float4, int4, int2; NumPy sees ml_dtypes' as kind "V"): numbers into such an input convert as
    ONNX's Cast does by default (float8 saturates to its finite range), a storage array into a
    wider input converts exactly (float8 -> float32, int4 -> int8)."""
    from neurenix_core.graph.opset.tensor import convert

    if arr.dtype.kind not in "fiub" and str(arr.dtype) not in storage:
        raise CompilationError(f"input {i} has dtype {arr.dtype}; the compiled model on {device} takes real numbers")
    if str(dtype) in storage:
        return convert(arr, str(dtype))
    return arr.astype(dtype)


def _from_dlpack(x: Any, i: int, device: Device) -> np.ndarray:
    try:
        kind, index = x.__dlpack_device__()
    except (BufferError, RuntimeError, TypeError, ValueError) as exc:
        raise _refused(i, f"a {type(x).__name__} whose memory DLPack cannot locate ({exc})", device) from exc
    if int(kind) not in _HOST_DLPACK:
        raise _refused(i, f"a {type(x).__name__} in device memory (DLPack device ({int(kind)}, {int(index)}))", device)
    try:
        return np.from_dlpack(x)
    except (BufferError, RuntimeError, TypeError, ValueError):
        pass  # a host view DLPack cannot export (negative strides, bool): its __array__ copies it
    try:
        return np.asarray(x)
    except (RuntimeError, TypeError, ValueError) as exc:
        raise CompilationError(
            f"input {i} ({type(x).__name__}) cannot be read from host memory for the model on {device}: {exc}; pass a NumPy array"
        ) from exc


def to_device_input(x: Any, i: int, device: Device, backend: Backend, dtype: Any = np.float32) -> Any:
    """Input ``i`` as a backend-native array on ``device`` (rule 1, or a copy in under rule 2)."""
    if (type(x) is Tensor or isinstance(x, Tensor)) and (x._p.device is device or x._p.device == device):
        return x._data
    host = host_array(x, i, device, dtype)
    return backend._from_host(contiguous(host), device.index)


def to_device_inputs(args: Sequence[Any], device: Device, backend: Backend) -> list[Any]:
    """Every input of one call as native arrays on ``device`` (see the module's rule)."""
    return [to_device_input(x, i, device, backend) for i, x in enumerate(args)]


def deliver(natives: Any, device: Device, backend: Backend, outputs: str) -> Any:
    """A runtime's native result (one array or a tuple) as Tensors on ``device`` or NumPy arrays."""
    if isinstance(natives, (tuple, list)):
        return tuple(deliver(n, device, backend, outputs) for n in natives)
    if isinstance(natives, Tensor):
        return natives.numpy() if outputs == "host" else natives
    if outputs == "host":
        return backend._to_host(natives)
    return wrap(natives, backend, device, device.index)


def call_runtime(run: Any, args: Sequence[Any], device: Device, backend: Backend, outputs: str = "device") -> Any:
    """A runtime's compiled model called directly (not through ``nx.compile``).

    The runtime's own arrays (``jax.Array`` for tpu, NumPy for LiteRT) go straight in and its
    result comes back as the runtime gives it, as calling the runtime would; any other input
    follows the rule above and the result comes back as ``outputs`` says.
    """
    native = backend.placement(device.index).array_type
    if args and all(type(a) is native for a in args):
        return run(*args)
    return deliver(run(*to_device_inputs(args, device, backend)), device, backend, outputs)


def deliver_tensors(outs: tuple[Tensor, ...], outputs: str) -> tuple[Any, ...]:
    """``nx.compile``'s results (Tensors on the device) in the form ``outputs`` asks for."""
    return outs if outputs == "device" else tuple(t.numpy() for t in outs)
