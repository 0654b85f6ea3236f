"""LiteRTBackend: host NumPy storage, LiteRT interpreters per device, cached single-op models.

Native storage is host ``numpy.ndarray`` (the Edge TPU has no addressable memory of its own:
LiteRT copies inputs to it on every invoke). Whole models compile to int8 TFLite (model.py);
eager ops run as cached single-op float32 TFLite models (eager.py) and fall back per policy.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from neurenix_core.contract import DTYPES, Backend, ProbeResult
from neurenix_core.errors import BackendUnavailableError, ConfigurationError, UnsupportedDTypeError
from neurenix_edgetpu import probe as probe_mod
from neurenix_edgetpu.amx import xnnpack_amx
from neurenix_edgetpu.native_log import native_stderr_to_logging
from neurenix_edgetpu.runtime import KERNELS, Runner, load_litert
from neurenix_edgetpu.verify import EDGETPU_CUSTOM_OP, ModelInfo

__all__ = ["LiteRTBackend"]


class LiteRTBackend(Backend):
    """Serves ``edgetpu:0..n-1``: real Coral devices through libedgetpu, or LiteRT's CPU interpreter."""

    trains = False  # an inference runtime: requires_grad and nx.compile_step refuse, naming the remedy

    def __init__(self, probe: ProbeResult) -> None:
        super().__init__(device_type="edgetpu", device_count=probe.device_count, emulated=probe.emulated)
        self.litert = load_litert()
        self.device_names: list[str] = list(probe.details.get("devices", [])) or [f"emulated:{i}" for i in range(probe.device_count)]
        self.library: str | None = probe.details.get("library")
        self._delegates: dict[int, Any] = {}
        self._lock = threading.Lock()
        from neurenix_edgetpu.eager import op_table

        self.ops = op_table(self)

    # ---------------------------------------------------------------- private surface
    def _from_host(self, array: np.ndarray, index: int) -> Any:
        return np.array(array, copy=True)  # our own copy: the caller may keep writing theirs

    def _to_host(self, native: Any) -> np.ndarray:
        return np.array(native, copy=True)

    def _dtype_of(self, native: Any) -> np.dtype[Any]:
        return np.dtype(native.dtype)

    def _native_dtype(self, dtype: np.dtype[Any]) -> Any:
        if str(dtype) not in DTYPES:
            raise UnsupportedDTypeError(f"edgetpu (backend edgetpu) stores host arrays of neurenix dtypes; {dtype} is not one")
        return dtype

    def _native_device(self, index: int) -> Any:
        return self.device_names[index]

    # ---------------------------------------------------------------- interpreters
    def interpreter(self, data: bytes, index: int, info: ModelInfo, *, source: str, num_threads: int | None = None, kernels: str | None = None) -> Runner:
        """A ready interpreter for ``data`` on device ``index`` (with the Edge TPU delegate on hardware).

        ``kernels`` picks LiteRT's CPU kernels in emulation: "xnnpack" (the default: LiteRT's
        default XNNPACK delegate, float32 and signed int8 QS8 kernels), "optimized" (TFLite's
        own optimized kernels, no delegate) or "reference" (TFLite's reference kernels: slow,
        and bit-exact with the core's integer reference ``run_quantized``; tests use them).
        """
        if info.compiled_for_edgetpu and self.emulated:
            raise BackendUnavailableError(
                f"{source} was compiled by edgetpu_compiler ({info.edgetpu_ops} {EDGETPU_CUSTOM_OP} op(s)) and runs only "
                f"through the Edge TPU delegate of {probe_mod.LIBRARY}, which the emulated edgetpu:{index} does not load. "
                "Load the uncompiled .tflite in emulation, or run on a Coral device with libedgetpu1-std installed."
            )
        kwargs: dict[str, Any] = {"model_content": data, "num_threads": num_threads}
        config: dict[str, Any] = {"runtime": f"LiteRT {self.version}", "threads": num_threads if num_threads is not None else "default"}
        if self.emulated:
            chosen = kernels or "xnnpack"
            kwargs["experimental_op_resolver_type"] = self._resolver(chosen)
            config["kernels"] = chosen
        else:
            kwargs["experimental_delegates"] = [self._delegate(index)]
            config["kernels"] = f"edgetpu delegate ({self.library or probe_mod.LIBRARY})"
        return Runner(self.litert.Interpreter(**kwargs), source, config)

    def xnnpack_amx(self) -> str:
        """Whether this process's XNNPACK runs int8 on AMX tiles ("granted") or not (another
        ``amx_state()`` value), read after making sure XNNPACK has initialised (``amx.xnnpack_amx``)."""
        return xnnpack_amx(self._start_xnnpack)

    def _start_xnnpack(self) -> None:
        # A one-op float32 model through LiteRT's default XNNPACK delegate: creating the delegate
        # initialises XNNPACK, which asks Linux for AMX then (if the CPU has it), as any model would.
        it = self.litert.Interpreter(model_content=_one_op_model(), num_threads=1, experimental_op_resolver_type=self._resolver("xnnpack"))
        with native_stderr_to_logging():
            it.allocate_tensors()

    @property
    def version(self) -> str:
        from importlib import metadata

        try:
            return metadata.version("ai-edge-litert")
        except metadata.PackageNotFoundError:
            return getattr(self.litert, "__version__", "unknown")

    def _resolver(self, kernels: str) -> Any:
        if kernels not in KERNELS:
            raise ConfigurationError(f"edgetpu: kernels must be one of {', '.join(KERNELS)}, got {kernels!r} (compile option kernels=..., or options={{'kernels': ...}})")
        return getattr(self.litert.OpResolverType, KERNELS[kernels])

    def _delegate(self, index: int) -> Any:
        with self._lock:
            if index not in self._delegates:
                name = self.device_names[index]
                try:
                    self._delegates[index] = self.litert.load_delegate(self.library or probe_mod.LIBRARY, {"device": name})
                except (ValueError, OSError, RuntimeError) as exc:
                    raise BackendUnavailableError(
                        f"edgetpu:{index} ({name}): loading the Edge TPU delegate from {self.library or probe_mod.LIBRARY} failed: {exc}. "
                        "Check that the device is plugged in and not used by another process, and reinstall libedgetpu1-std."
                    ) from exc
            return self._delegates[index]

    # ---------------------------------------------------------------- public
    def device_info(self, index: int) -> dict[str, Any]:
        info = super().device_info(index)
        info.update({
            "name": "Coral Edge TPU" + (" (emulated on the host CPU by LiteRT, no delegate)" if self.emulated else ""),
            "device_name": self.device_names[index],
            "runtime": self.litert.__name__,
            "delegate": None if self.emulated else (self.library or probe_mod.LIBRARY),
            "precisions": ["int8", "fp32"],
            "native_storage": "host numpy.ndarray",
        })
        return info

    def close(self) -> None:
        with self._lock:
            self._delegates.clear()


def _one_op_model() -> bytes:
    """A float32 RELU of one element as .tflite bytes (written here: no file to ship)."""
    import tflite

    from neurenix_edgetpu.tflite_writer import ModelBuilder

    m = ModelBuilder(description="neurenix edgetpu: XNNPACK start")
    x, y = m.tensor("x", (1, 1), np.float32), m.tensor("y", (1, 1), np.float32)
    m.op(tflite.BuiltinOperator.RELU, [x], [y])
    return m.finish([x], [y])
