"""The ``cuda`` backend: PyTorch tensors on NVIDIA GPUs (or on the host CPU when emulated).

Native storage is ``torch.Tensor`` on ``torch.device("cuda", i)``, or ``torch.device("cpu")``
under ``NEURENIX_EMULATE=cuda``. The array-API namespace comes from ``array_api_compat.torch``;
the neural-network extension ops map to ``torch.nn.functional``. PyTorch is imported here, when
the core first uses a ``cuda`` device, never at ``import neurenix_core``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from neurenix_core.contract import DTYPES, ArrayNamespaceBackend, ProbeResult
from neurenix_core.errors import BackendUnavailableError, UnsupportedDTypeError
from neurenix_cuda_tc.capability import ComputeCapability, architecture, tensor_core_precisions
from neurenix_cuda_tc.probe import EMULATED_CC
from neurenix_cuda_tc.switches import SwitchState

__all__ = ["CudaBackend", "numpy_dtype", "torch_dtype"]


def _dtype_pairs() -> list[tuple[str, Any]]:
    import torch

    return [
        ("bool", torch.bool), ("int8", torch.int8), ("int16", torch.int16), ("int32", torch.int32),
        ("int64", torch.int64), ("uint8", torch.uint8), ("uint16", torch.uint16), ("uint32", torch.uint32),
        ("uint64", torch.uint64), ("float16", torch.float16), ("bfloat16", torch.bfloat16),
        ("float32", torch.float32), ("float64", torch.float64), ("complex64", torch.complex64),
        ("complex128", torch.complex128),
    ]


@functools.cache
def _bit_views() -> dict[str, tuple[np.dtype[Any], Any, np.dtype[Any]]]:
    """Dtypes torch.from_numpy does not know (ml_dtypes' bfloat16 and float8 formats) but torch
    stores: name -> (NumPy unsigned view of the same width, torch dtype, the NumPy dtype). The
    bits cross unchanged in both directions."""
    import ml_dtypes
    import torch

    table = {"bfloat16": (np.dtype(np.uint16), torch.bfloat16, np.dtype(ml_dtypes.bfloat16))}
    for name in ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu"):
        if hasattr(torch, name) and hasattr(ml_dtypes, name):
            table[name] = (np.dtype(np.uint8), getattr(torch, name), np.dtype(getattr(ml_dtypes, name)))
    return table


@functools.cache
def _to_torch() -> dict[str, Any]:
    return dict(_dtype_pairs()) | {name: td for name, (_, td, _) in _bit_views().items()}


@functools.cache
def _to_numpy() -> dict[Any, np.dtype[Any]]:
    return {td: DTYPES[name] for name, td in _dtype_pairs()} | {td: nd for _, td, nd in _bit_views().values()}


@functools.cache
def _views_from_torch() -> dict[Any, tuple[Any, np.dtype[Any]]]:
    import torch

    unsigned = {np.dtype(np.uint8): torch.uint8, np.dtype(np.uint16): torch.uint16}
    return {td: (unsigned[u], nd) for u, td, nd in _bit_views().values()}


def torch_dtype(dtype: np.dtype[Any]) -> Any:
    """The torch dtype of a neurenix dtype; UnsupportedDTypeError when torch has none."""
    table = _to_torch()
    found = table.get(str(np.dtype(dtype)))
    if found is None:
        raise UnsupportedDTypeError(f"backend cuda (PyTorch) has no dtype for {dtype}; use one of {', '.join(table)}")
    return found


def numpy_dtype(tdtype: Any) -> np.dtype[Any]:
    # A dict lookup: Tensor.dtype and nx.compile's per-call input check ask on every call.
    found = _to_numpy().get(tdtype)
    if found is not None:
        return found
    raise UnsupportedDTypeError(f"torch dtype {tdtype} has no neurenix equivalent; cast with .to(torch.float32) first")


def nn_ops() -> dict[str, Callable[..., Any]]:
    """The CONTRIBUTING extension ops on torch.nn.functional (signatures fixed by the core)."""
    import torch
    import torch.nn.functional as F

    def batch_norm(x: Any, running_mean: Any, running_var: Any, weight: Any, bias: Any, eps: float) -> Any:
        if running_mean.requires_grad or running_var.requires_grad:
            # Batch statistics tracked by torch's autograd (nx.compile_step on a model in train
            # mode): F.batch_norm refuses gradients through its statistics, so spell it out.
            shape = (1, -1) + (1,) * (x.ndim - 2)
            y = (x - running_mean.reshape(shape)) * torch.rsqrt(running_var.reshape(shape) + eps)
            y = y if weight is None else y * weight.reshape(shape)
            return y if bias is None else y + bias.reshape(shape)
        return F.batch_norm(x, running_mean, running_var, weight, bias, training=False, eps=eps)

    # Padding beyond half the window (ONNX allows it, PyTorch's kernels not): padded explicitly.
    from neurenix_cuda_tc.torch_ops import avg_pool2d, max_pool2d

    return {
        "nn.linear": F.linear,
        "nn.conv2d": F.conv2d,
        "nn.max_pool2d": max_pool2d,
        "nn.avg_pool2d": avg_pool2d,
        "nn.adaptive_avg_pool2d": F.adaptive_avg_pool2d,
        "nn.relu": torch.relu,
        "nn.gelu": lambda x, approximate="none": F.gelu(x, approximate=approximate),
        "nn.sigmoid": torch.sigmoid,
        "nn.tanh": torch.tanh,
        "nn.softmax": lambda x, axis=-1: torch.softmax(x, dim=axis),
        "nn.batch_norm": batch_norm,
        "nn.layer_norm": lambda x, normalized_shape, weight, bias, eps: F.layer_norm(x, tuple(normalized_shape), weight, bias, eps),
    }


class CudaBackend(ArrayNamespaceBackend):
    """PyTorch on ``cuda:i`` (or the host CPU when emulated)."""

    def __init__(self, *, device_count: int, emulated: bool, capabilities: list[ComputeCapability]) -> None:
        import array_api_compat.torch as xp
        import torch

        # torch itself as the namespace, array_api_compat.torch where torch deviates from the
        # standard; the core takes its hot-path ops (matmul) straight from torch.
        super().__init__(torch, device_type="cuda", device_count=device_count, emulated=emulated, compat=xp)
        self.torch = torch
        # Native arrays are torch tensors: the core keys DLPack import (np.from_dlpack for a
        # host-memory backend) and its result checks on this; left at np.ndarray, a NumPy array
        # was stored on cuda:0 and failed at its first dtype lookup.
        self.array_type = torch.Tensor
        self.ops.update(nn_ops())
        self._capabilities = capabilities
        #: Process-global PyTorch switches this backend (or a TensorCoresBackend on it) changed;
        #: close() puts them back.
        self.switches = SwitchState()

    @classmethod
    def create(cls, probe: ProbeResult) -> CudaBackend:
        import torch

        if probe.emulated:
            return cls(device_count=1, emulated=True, capabilities=[EMULATED_CC])
        if not torch.cuda.is_available():
            raise BackendUnavailableError(
                f"plugin cuda: the NVIDIA driver reports {probe.device_count} GPU(s) but PyTorch {torch.__version__} cannot use CUDA "
                f"(torch.version.cuda={torch.version.cuda}); install a CUDA build of torch, or set NEURENIX_EMULATE=cuda"
            )
        count = torch.cuda.device_count()
        return cls(device_count=count, emulated=False, capabilities=[torch.cuda.get_device_capability(i) for i in range(count)])

    # ---------------------------------------------------------------- private surface
    def _native_device(self, index: int) -> Any:
        return self.torch.device("cpu") if self.emulated else self.torch.device("cuda", index)

    def _compile_train_step(self, loss_fn: Any, model: Any, optimizer: Any) -> Any:
        """nx.compile_step on cuda: PyTorch's autograd differentiates the model's forward and loss."""
        from neurenix_cuda_tc.training import TorchTrainStep

        return TorchTrainStep(loss_fn, model, optimizer)

    def _native_backward(self, native: Any, gradient: Any) -> bool:
        """Results of a torch module that torch's autograd recorded (optimize_model's modules)
        are differentiated by torch: grads land in the module's parameters' ``.grad``."""
        if not (isinstance(native, self.torch.Tensor) and native.requires_grad):
            return False
        native.backward(gradient)
        return True

    def _index_of_native(self, native: Any) -> int | None:
        """cuda:i for a torch tensor on that GPU (on the host CPU when emulated): lets neurenix
        optimizers update a torch module's parameters in place (TensorCoresBackend.optimize_model)."""
        if not isinstance(native, self.torch.Tensor):
            return None
        dev = native.device
        if self.emulated:
            return 0 if dev.type == "cpu" else None
        return dev.index or 0 if dev.type == "cuda" else None

    def _from_dlpack(self, producer: Any, index: int, copy: bool | None) -> Any:
        """torch.from_dlpack: any producer, bfloat16 included, shared when it already lives on
        ``index``'s device; moved there (a copy) otherwise, or None under copy=False (the core
        then refuses with its message)."""
        torch = self.torch
        t = torch.from_dlpack(producer)
        target = self._native_device(index)
        if t.device == torch.device(target):
            return t.clone() if copy else t
        return None if copy is False else t.to(target, copy=True)

    def _from_host(self, array: np.ndarray, index: int) -> Any:
        torch = self.torch
        view = _bit_views().get(str(array.dtype))
        if view is not None:
            # torch.from_numpy does not know ml_dtypes' types: reinterpret the same bits.
            t = torch.from_numpy(array.view(view[0])).view(view[1])
        else:
            torch_dtype(array.dtype)  # int4, float4 ...: refused by name before torch sees them
            t = torch.from_numpy(array)
        # .clone() / .to(cuda) copy: a later write to the caller's array must not change the tensor.
        return t.clone() if self.emulated else t.to(self._native_device(index))

    def _to_host(self, native: Any) -> np.ndarray:
        t = native.detach().to("cpu").resolve_conj()
        view = _views_from_torch().get(t.dtype)
        if view is not None:
            return t.view(view[0]).numpy().view(view[1]).copy()
        return np.array(t.numpy(), copy=True)

    def _dtype_of(self, native: Any) -> np.dtype[Any]:
        return numpy_dtype(native.dtype)

    def _native_dtype(self, dtype: np.dtype[Any]) -> Any:
        return torch_dtype(dtype)

    def _memory_root(self, native: Any) -> Any:
        # A torch view keeps its base in ._base: charge the shared buffer once.
        while getattr(native, "_base", None) is not None:
            native = native._base
        return native

    # ---------------------------------------------------------------- public
    def compute_capability(self, index: int = 0) -> ComputeCapability:
        """(major, minor) of device ``index``; an emulated device follows :data:`EMULATED_CC`."""
        return tuple(self._capabilities[index])  # type: ignore[return-value]

    def device_info(self, index: int) -> dict[str, Any]:
        info = super().device_info(index)
        cc = self.compute_capability(index)
        info.update({
            "compute_capability": f"{cc[0]}.{cc[1]}",
            "architecture": architecture(cc),
            "tensor_cores": bool(tensor_core_precisions(cc)),
            "tensor_core_precisions": list(tensor_core_precisions(cc)),
            "torch": self.torch.__version__,
        })
        if self.emulated:
            info["name"] = f"emulated CUDA device on the host CPU (PyTorch CPU, compute capability {cc[0]}.{cc[1]} rules)"
        else:
            props = self.torch.cuda.get_device_properties(index)
            info.update({"name": props.name, "total_memory": int(props.total_memory), "multiprocessors": props.multi_processor_count})
        return info

    def close(self) -> None:
        self.switches.restore()
