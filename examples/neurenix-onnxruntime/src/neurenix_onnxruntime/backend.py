"""ORTBackend: tensors as host NumPy arrays, ops and models run by ONNX Runtime sessions.

Native storage is ``numpy.ndarray`` (ORT's Python API takes and returns host arrays). Device
``ort:i`` is the i-th execution provider present, best first. ``NEURENIX_ORT_PROVIDER`` asks for
one provider explicitly (``cuda``, ``CUDAExecutionProvider`` ...): when the installed ORT build
lacks it, starting the backend raises BackendUnavailableError listing the providers it has.
``NEURENIX_ORT_THREADS`` sets ORT's intra-op thread count (default: ORT's own choice).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
import onnxruntime as ort

from neurenix_core.contract import Backend
from neurenix_core.errors import BackendUnavailableError, ConfigurationError, UnsupportedDTypeError
from neurenix_onnxruntime import providers as prov
from neurenix_onnxruntime.eager import KernelCache
from neurenix_onnxruntime.kernels import build_op_table

__all__ = ["SUPPORTED_DTYPES", "ORTBackend", "ensure_provider"]

# ORT tensor types with NumPy equivalents that its Python API accepts; bfloat16 and complex have
# no CPU kernels worth the name, so they are refused up front instead of failing per op.
SUPPORTED_DTYPES: frozenset[str] = frozenset({
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32", "float64",
})


def ensure_provider(name: str, available: list[str]) -> str:
    """ORT's name for provider ``name``; raises when this ORT build does not carry it."""
    wanted = prov.resolve_name(name)
    if wanted not in available:
        raise BackendUnavailableError(
            f"ort (plugin onnxruntime): the installed ONNX Runtime {ort.__version__} has no execution provider {wanted!r}; "
            f"it has {', '.join(available)}. Install an ONNX Runtime build that carries it (for example onnxruntime-gpu for "
            "CUDAExecutionProvider), or unset NEURENIX_ORT_PROVIDER to use the best provider present."
        )
    return wanted


def _threads() -> int:
    raw = os.environ.get("NEURENIX_ORT_THREADS", "").strip()
    if not raw:
        return 0
    if not raw.isdigit():
        raise ConfigurationError(f"NEURENIX_ORT_THREADS={raw!r} is not a thread count: use a positive integer, or unset it")
    return int(raw)


class ORTBackend(Backend):
    """ONNX Runtime as a neurenix backend (device type ``ort``)."""

    def __init__(self, providers: list[str] | None = None, *, provider: str | None = None, threads: int | None = None) -> None:
        available = ort.get_available_providers()
        chosen = self._order(providers or [prov.CPU.name], available, provider or os.environ.get("NEURENIX_ORT_PROVIDER"))
        super().__init__(device_type="ort", device_count=len(chosen))
        self.providers = chosen
        self.available_providers = list(available)
        self.threads = _threads() if threads is None else threads
        self.kernels = KernelCache(self)
        self.ops = build_op_table(self)
        self._cpu_ops: dict[str, Callable[..., Any]] | None = None

    @staticmethod
    def _order(present: list[str], available: list[str], requested: str | None) -> list[str]:
        # A provider counts when the wheel carries it (ORT says so) and its hardware is here (probe).
        usable = [p for p in present if p in available] or [prov.CPU.name]
        if not requested:
            return usable
        wanted = ensure_provider(requested, available)
        if wanted not in usable:
            raise BackendUnavailableError(
                f"ort (plugin onnxruntime): {wanted} is built into ONNX Runtime {ort.__version__} but its hardware or driver "
                f"was not found on this machine (providers usable here: {', '.join(usable)}). Install the driver, or unset NEURENIX_ORT_PROVIDER."
            )
        return [wanted] + [p for p in usable if p != wanted]

    # ------------------------------------------------------------------ runtime
    @property
    def label(self) -> str:
        return f"{self.device_type}:0"

    @property
    def eager_providers(self) -> list[str]:
        """Eager ops run on ort:0's provider, with ORT's CPU provider for nodes it lacks."""
        first = self.providers[0]
        return [first] if first == prov.CPU.name else [first, prov.CPU.name]

    def providers_for(self, index: int) -> list[str]:
        p = self.providers[index]
        return [p] if p == prov.CPU.name else [p, prov.CPU.name]

    def session_options(self, threads: int | None = None) -> ort.SessionOptions:
        opts = ort.SessionOptions()
        n = self.threads if threads is None else threads
        opts.intra_op_num_threads = n
        opts.inter_op_num_threads = 1 if n else 0
        opts.log_severity_level = 3  # errors only: ORT's warnings would go to the user's stderr
        return opts

    def cpu_op(self, name: str) -> Callable[..., Any]:
        """The core CPU backend's kernel for ``name`` (host fallback; our storage is host NumPy)."""
        if self._cpu_ops is None:
            import neurenix_core

            self._cpu_ops = neurenix_core.backend("cpu").ops
        fn = self._cpu_ops.get(name)
        if fn is None:
            raise BackendUnavailableError(f"{name} runs neither on {self.label} (ONNX Runtime) nor on the host cpu backend")
        return fn

    # ------------------------------------------------------------------ private surface
    def _from_host(self, array: np.ndarray, index: int) -> Any:
        return np.array(array, copy=True)  # our own copy: later writes by the caller must not leak in

    def _to_host(self, native: Any) -> np.ndarray:
        return np.array(native, copy=True)

    def _dtype_of(self, native: Any) -> np.dtype[Any]:
        return np.dtype(native.dtype)

    def _native_dtype(self, dtype: np.dtype[Any]) -> Any:
        if str(dtype) not in SUPPORTED_DTYPES:
            raise UnsupportedDTypeError(
                f"{self.label} (backend {self.name}) does not support dtype {dtype}: ONNX Runtime has no kernels for it "
                f"here. Use one of {', '.join(sorted(SUPPORTED_DTYPES))}, or move the data to 'cpu'."
            )
        return np.dtype(dtype)

    def _native_device(self, index: int) -> Any:
        return self.providers[index]

    # ------------------------------------------------------------------ public
    def device_info(self, index: int) -> dict[str, Any]:
        info = super().device_info(index)
        provider = self.providers[index]
        info.update({
            "name": f"ONNX Runtime {provider}",
            "provider": provider,
            "onnxruntime": ort.__version__,
            "available_providers": list(self.available_providers),
            "hardware": "host CPU" if provider == prov.CPU.name else provider.removesuffix("ExecutionProvider"),
            "intra_op_threads": self.threads or "onnxruntime default",
            "cached_op_sessions": len(self.kernels),
            "rejected_op_signatures": len(self.kernels.rejected),
        })
        return info
