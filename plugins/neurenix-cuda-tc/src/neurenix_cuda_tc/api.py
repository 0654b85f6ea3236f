"""The seed-style public API: ``is_tensor_cores_available`` and ``TensorCoresBackend``.

Served to users as ``from neurenix.hardware import TensorCoresBackend`` through the manifest's
``exports``. Tensor Cores are a capability of a ``cuda`` device (compute capability >= 7.0),
so the backend is a view of the core's ``cuda`` backend plus the precision state and the global
PyTorch switches it changes (restored by :meth:`TensorCoresBackend.release`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from neurenix_core.contract import Device, DeviceLike, as_device, check_outputs
from neurenix_core.errors import BackendUnavailableError, NeurenixError
from neurenix_cuda_tc.alignment import Finding, align_model, validate_model
from neurenix_cuda_tc.amp import MixedPrecision
from neurenix_cuda_tc.capability import (
    PRECISIONS,
    UnknownPrecisionError,
    check_precision,
    has_tensor_cores,
    parse_precision,
    tensor_core_precisions,
)
from neurenix_cuda_tc.profiler import TensorCoreProfile, is_tensor_core_kernel, profile_tensor_cores

if TYPE_CHECKING:
    import torch

    from neurenix_cuda_tc.backend import CudaBackend

__all__ = [
    "PRECISIONS",
    "Finding",
    "MixedPrecision",
    "TensorCoreProfile",
    "TensorCoresBackend",
    "UnknownPrecisionError",
    "align_model",
    "check_precision",
    "is_tensor_core_kernel",
    "is_tensor_cores_available",
    "profile_tensor_cores",
    "tensor_core_precisions",
    "tensor_cores_status",
    "validate_model",
]


def tensor_cores_status(device: DeviceLike = "cuda:0") -> dict[str, Any]:
    """Whether ``device`` has Tensor Cores, from the probe alone (no framework import):
    ``{"available", "emulated", "compute_capability", "precisions", "reason"}``."""
    from neurenix_core.contract import registry

    dev = as_device(device)
    try:
        record = registry().plugin_for(dev)
    except NeurenixError as exc:
        return {"available": False, "emulated": False, "compute_capability": None, "precisions": [], "reason": str(exc)}
    assert record.probe is not None
    ccs = record.probe.details.get("compute_capabilities") or []
    cc = tuple(ccs[dev.index]) if dev.index < len(ccs) else None
    precisions = list(tensor_core_precisions(cc)) if cc else []  # type: ignore[arg-type]
    reason = "" if precisions else f"{dev} has compute capability {cc[0]}.{cc[1]}; Tensor Cores need >= 7.0" if cc else "compute capability unknown"
    return {"available": bool(precisions), "emulated": record.emulated, "compute_capability": cc, "precisions": precisions, "reason": reason}


def is_tensor_cores_available(device: DeviceLike = "cuda:0") -> bool:
    """True when ``device`` is a CUDA device with Tensor Cores (an emulated one counts, like every
    emulated device in neurenix; ``tensor_cores_status()["emulated"]`` tells them apart)."""
    return bool(tensor_cores_status(device)["available"])


class TensorCoresBackend:
    """Tensor Core precision, model optimisation and switch management for one ``cuda`` device."""

    def __init__(self, device: DeviceLike | int = 0) -> None:
        self.device: Device = Device("cuda", device) if isinstance(device, int) else as_device(device)
        self.precision = "fp32"
        self._backend: CudaBackend | None = None

    # ------------------------------------------------------------------ lifecycle
    def initialize(self) -> bool:
        """Start the cuda backend and check the device has Tensor Cores; True on success.

        Raises BackendUnavailableError naming what is missing (driver, GPU, CUDA build of torch,
        or a GPU older than compute capability 7.0); an explicit request never falls back.
        """
        import neurenix_core as nx

        backend = nx.backend(self.device)
        cc = backend.compute_capability(self.device.index)  # type: ignore[attr-defined]
        if not has_tensor_cores(cc):
            raise BackendUnavailableError(
                f"{self.device} (compute capability {cc[0]}.{cc[1]}) has no Tensor Cores; they need compute capability >= 7.0 "
                "(Volta or newer). Use plain cuda:0 tensors, or a newer GPU"
            )
        self._backend = backend  # type: ignore[assignment]
        return True

    @property
    def backend(self) -> CudaBackend:
        if self._backend is None:
            raise BackendUnavailableError(f"TensorCoresBackend({self.device}) is not initialized: call initialize() first")
        return self._backend

    @property
    def emulated(self) -> bool:
        return self.backend.emulated

    @property
    def compute_capability(self) -> tuple[int, int]:
        return self.backend.compute_capability(self.device.index)

    def release(self) -> dict[str, bool]:
        """Restore every PyTorch switch this backend changed; return the restored values."""
        restored = self.backend.switches.restore()
        self._backend = None
        return restored

    close = release

    def __enter__(self) -> TensorCoresBackend:  # noqa: PYI034 - typing.Self needs Python 3.11; 3.10 is supported
        self.initialize()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    # ------------------------------------------------------------------ precision
    def set_precision(self, precision: str) -> str:
        """Choose "fp32" | "tf32" | "fp16" | "bf16" | "mixed" for later work on this device.

        "tf32" turns the TF32 switches on now, "fp32" turns them off (strict fp32); the switches
        are restored by :meth:`release`. Raises UnknownPrecisionError for an unknown string and
        UnsupportedDTypeError when the device's Tensor Cores lack the precision.
        """
        mode = check_precision(precision, self.compute_capability, str(self.device))
        if mode in ("tf32", "fp32"):
            for name in ("torch.backends.cuda.matmul.allow_tf32", "torch.backends.cudnn.allow_tf32"):
                self.backend.switches.set(name, mode == "tf32")
        self.precision = mode
        return mode

    def supported_precisions(self) -> tuple[str, ...]:
        have = tensor_core_precisions(self.compute_capability)
        return tuple(p for p in PRECISIONS if p == "fp32" or (("fp16" if p == "mixed" else p) in have))

    # ------------------------------------------------------------------ models
    def optimize_model(self, model: Any, precision: str | None = None, *, channels_last: bool = True,
                       compile: bool | str = False, cuda_graphs: bool = False, align: bool = False,
                       outputs: str = "device") -> torch.nn.Module:
        """An optimised PyTorch module for ``model`` (a neurenix_core.nn model, a Graph or a
        torch.nn.Module); ``.report`` lists every change. ``align=True`` first zero-pads
        misaligned layers (outputs unchanged, growth capped at 1.2x).

        Torch tensors in give torch tensors out; neurenix Tensors on this device and host data
        (NumPy, cpu tensors: copied in) give Tensors on this device, or NumPy arrays with
        ``outputs="host"`` (``neurenix_core.graph.compile.inputs``)."""

        from neurenix_cuda_tc.convert import to_torch_module
        from neurenix_cuda_tc.optimize import optimize_module

        check_outputs(outputs, self.device)
        mode = check_precision(precision or self.precision, self.compute_capability, str(self.device))
        module = to_torch_module(model)
        notes: list[str] = []
        if align:
            module, padded = align_model(module, precision="fp16" if mode == "mixed" else mode)
            notes = [f"zero-padded {p}" for p in padded]
        out = optimize_module(
            module, precision=mode, device=self.backend._native_device(self.device.index), switches=self.backend.switches,
            tf32_ok="tf32" in tensor_core_precisions(self.compute_capability), emulated=self.emulated,
            channels_last=channels_last, compile=compile, cuda_graphs=cuda_graphs,
            target=self.device, backend=self.backend, outputs=outputs,
        )
        out.report.changes[:0] = notes
        return out

    def validate(self, model: Any, precision: str | None = None, batch_size: int | None = None) -> list[Finding]:
        """Tensor Core alignment findings for ``model`` (see :func:`validate_model`)."""
        return validate_model(model, precision=parse_precision(precision or self.precision), batch_size=batch_size)

    def matmul(self, a: Any, b: Any) -> Any:
        """``a @ b`` on this device in the current precision (neurenix Tensors in and out)."""
        import neurenix_core as nx

        if self.precision in ("fp16", "bf16"):
            dt = nx.float16 if self.precision == "fp16" else nx.bfloat16
            a, b = nx.astype(a, dt), nx.astype(b, dt)
        return nx.matmul(a, b)
