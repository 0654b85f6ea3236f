"""The NPU backend: OpenVINO's ``Core`` driving device "NPU" (or "CPU" when emulated).

Native storage is host ``numpy.ndarray``: OpenVINO takes host arrays as inputs and the NPU
shares system memory, so a "transfer" is a real copy into memory this backend owns. Eager ops
run as cached one-op graphs (eager.py); whole models are lowered (lowering.py) and compiled
(compiled.py). OpenVINO is imported here, when the core first uses an npu device.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Final

import numpy as np

from neurenix_core.contract import DTYPES, Backend
from neurenix_core.errors import BackendUnavailableError, CompilationError, UnsupportedDTypeError, UnsupportedOperationError
from neurenix_npu_openvino.config import QUANTIZED_CPU_PROPERTIES, check_precision, performance_properties, precision_hint
from neurenix_npu_openvino.telemetry import keep_telemetry_out

__all__ = ["NPUOpenVINOBackend"]

#: Host storage handles every real dtype OpenVINO has an element type for; complex has none.
_STORABLE: Final = frozenset(name for name in DTYPES if not name.startswith("complex"))
_MODEL_CACHE_SIZE: Final = 64


class NPUOpenVINOBackend(Backend):
    """Intel NPU through OpenVINO. ``emulated=True`` runs the same code on OpenVINO's CPU device."""

    trains = False  # an inference runtime: requires_grad and nx.compile_step refuse, naming the remedy

    def __init__(self, *, device_count: int = 1, emulated: bool = False, threads: int | None = None) -> None:
        super().__init__(device_type="npu", device_count=device_count, emulated=emulated)
        keep_telemetry_out()  # before the first import: OpenVINO's telemetry forks (see telemetry.py)
        import openvino as ov

        from neurenix_npu_openvino.eager import EagerKernels

        self.ov = ov
        self.core = ov.Core()
        self.ov_device = "CPU" if emulated else "NPU"
        self._check_device()
        self.capabilities: tuple[str, ...] = tuple(self.core.get_property(self.ov_device, "OPTIMIZATION_CAPABILITIES"))
        self._supported = set(self.core.get_property(self.ov_device, "SUPPORTED_PROPERTIES"))
        #: INFERENCE_NUM_THREADS for every model this backend compiles (None: OpenVINO decides).
        self.threads = threads
        self.memory_optimization = False
        self.eager = EagerKernels(self)
        self.ops = self.eager.table()
        self._models: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self._models_lock = threading.Lock()
        self._host_ops: dict[str, Callable[..., Any]] | None = None

    def _check_device(self) -> None:
        available = list(self.core.available_devices)
        if not any(d == self.ov_device or d.startswith(self.ov_device + ".") for d in available):
            raise BackendUnavailableError(
                f"npu (plugin npu-openvino): OpenVINO {self.ov.get_version()} lists devices {available} but no {self.ov_device}: "
                "check that the intel_vpu kernel driver and the Intel NPU user-space driver (linux-npu-driver) are installed, "
                "or set NEURENIX_EMULATE=npu to run on the host CPU"
            )

    # ---------------------------------------------------------------- private surface
    def _from_host(self, array: np.ndarray, index: int) -> np.ndarray:
        # A copy: later writes to the caller's array must not change the tensor.
        return np.array(array, copy=True, order="C")

    def _to_host(self, native: Any) -> np.ndarray:
        return np.array(native, copy=True)

    def _dtype_of(self, native: Any) -> np.dtype[Any]:
        return np.dtype(native.dtype)

    def _native_dtype(self, dtype: np.dtype[Any]) -> Any:
        if str(dtype) not in _STORABLE:
            raise UnsupportedDTypeError(
                f"npu (backend {self.name}, OpenVINO {self.ov_device}) does not support dtype {dtype}: OpenVINO has no complex "
                "element type. Keep complex data on the cpu device."
            )
        if str(dtype) == "bfloat16":
            return self.ov.Type.bf16  # ml_dtypes' bfloat16 is unknown to OpenVINO's dtype map
        return self.ov.Type(dtype)

    def _native_device(self, index: int) -> str:
        return self.ov_device

    # ---------------------------------------------------------------- facts
    def device_label(self, index: int = 0) -> str:
        return f"{self.device_type}:{index}"

    def full_device_name(self) -> str:
        return str(self.core.get_property(self.ov_device, "FULL_DEVICE_NAME"))

    def runs_dtype(self, dtype: np.dtype[Any]) -> bool:
        """Whether eager graphs compute ``dtype`` on the device (f32 always, f16 when reported)."""
        return dtype == np.float32 or (dtype == np.float16 and "FP16" in self.capabilities)

    def device_info(self, index: int) -> dict[str, Any]:
        info = super().device_info(index)
        info.update({
            "name": self.full_device_name(),
            "openvino_device": self.ov_device,
            "openvino_version": self.ov.get_version(),
            "precisions": self.precisions(),
            "capabilities": list(self.capabilities),
            "native_ops": sorted(self.ops),
            "memory": self.memory.stats(index).as_dict(),
            "memory_optimization": self.memory_optimization,
        })
        if self.emulated:
            info["note"] = "emulated: OpenVINO's CPU device runs the NPU code path (NEURENIX_EMULATE=npu)"
        return info

    def precisions(self) -> list[str]:
        """neurenix precisions this device can run, read from OpenVINO's capabilities."""
        out = ["fp32"]
        out += [p for p, cap in (("fp16", "FP16"), ("bf16", "BF16"), ("int8", "INT8"), ("int16", "INT16")) if cap in self.capabilities]
        return out

    def host_op(self, name: str) -> Callable[..., Any]:
        """The core CPU backend's implementation of ``name`` (for fallbacks inside native ops)."""
        if self._host_ops is None:
            from neurenix_core.contract import Device, registry

            reg = registry()
            self._host_ops = reg.backend(reg.plugin_for(Device("cpu", 0))).ops
        fn = self._host_ops.get(name)
        if fn is None:
            raise UnsupportedOperationError(f"{name} cannot run on {self.device_label()} with these operands and the cpu backend has no {name} either")
        return fn

    # ---------------------------------------------------------------- compilation
    def properties(self, precision: str, optimize_for: str | None = None, threads: int | None = None) -> dict[str, Any]:
        """Compile properties, keeping only those this OpenVINO device supports."""
        props = performance_properties(optimize_for, precision, threads if threads is not None else self.threads)
        if self.memory_optimization:
            # One stream: one set of intermediate buffers instead of one per stream.
            props["NUM_STREAMS"] = 1
        props = {k: v for k, v in props.items() if k in self._supported}
        if self.ov_device == "CPU" and precision in ("int8", "int16"):
            props.update(QUANTIZED_CPU_PROPERTIES)
        return props

    def compile_eager(self, model: Any, dtype: np.dtype[Any]) -> Any:
        precision = "fp16" if dtype == np.float16 else "fp32"
        props = {"INFERENCE_PRECISION_HINT": precision_hint(precision), "PERFORMANCE_HINT": "LATENCY"}
        if self.threads is not None:
            props["INFERENCE_NUM_THREADS"] = self.threads
        return self.core.compile_model(model, self.ov_device, {k: v for k, v in props.items() if k in self._supported})

    def compile_properties(self, precision: str, optimize_for: str | None, threads: int | None,
                           properties: Mapping[str, Any] | None) -> dict[str, Any]:
        """The properties a model is compiled with: neurenix's, then the user's ``ov_properties``
        over them (also what an import from the persistent compile cache is given)."""
        return {**self.properties(precision, optimize_for, threads), **(properties or {})}

    def compile_model(self, model: Any, precision: str, optimize_for: str | None = None, *, threads: int | None = None,
                      properties: Mapping[str, Any] | None = None) -> Any:
        """Compile an ``openvino.Model`` with an explicit precision; errors keep OpenVINO's cause.
        ``properties`` (``nx.compile(..., ov_properties={...})``) override neurenix's own."""
        check_precision(precision, self.device_label(), self.capabilities)
        props = self.compile_properties(precision, optimize_for, threads, properties)
        try:
            return self.core.compile_model(model, self.ov_device, props)
        except RuntimeError as exc:
            raise CompilationError(
                f"{self.device_label()} (OpenVINO {self.ov_device}) could not compile model {model.get_friendly_name()!r} "
                f"for {precision}: {str(exc).strip().splitlines()[0] if str(exc).strip() else exc}. "
                "Try precision='fp32' or compile for device='cpu'."
            ) from exc

    def cached_model(self, key: tuple[Any, ...], build: Callable[[], Any]) -> Any:
        """A compiled model from the (graph, shapes, precision, device, options) cache."""
        with self._models_lock:
            hit = self._models.get(key)
            if hit is not None:
                self._models.move_to_end(key)
                return hit
        model = build()
        with self._models_lock:
            self._models[key] = model
            limit = 4 if self.memory_optimization else _MODEL_CACHE_SIZE
            while len(self._models) > limit:
                self._models.popitem(last=False)
        return model

    @property
    def cached_models(self) -> int:
        return len(self._models)

    def set_memory_optimization(self, enabled: bool) -> None:
        """Fewer streams and smaller caches: less memory held by compiled graphs."""
        self.memory_optimization = bool(enabled)
        self.eager.capacity = 16 if enabled else 256
        if enabled:
            with self._models_lock:
                while len(self._models) > 4:
                    self._models.popitem(last=False)

    def close(self) -> None:
        self.eager.clear()
        with self._models_lock:
            self._models.clear()
