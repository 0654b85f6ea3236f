"""The seed-style NPU API, served by the facade as ``neurenix.hardware.npu``::

    from neurenix.hardware.npu import NPUBackend, is_npu_available

    npu = NPUBackend()
    npu.initialize()                       # BackendUnavailableError naming the missing driver
    c = npu.matmul(a, b)                   # runs on npu:0 (OpenVINO)
    fast = npu.optimize_model(model, quantize=True, precision="int8", calibration=batches)

Everything goes through the core (device resolution, memory accounting, fallback policy); this
module only adds the NPU-specific entry points. It imports nothing heavy until used.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from neurenix_core.device import Device
from neurenix_core.errors import BackendUnavailableError, CompilationError, DeviceMismatchError, QuantizationError
from neurenix_core.graph import CompileOptions, Graph

if TYPE_CHECKING:
    from neurenix_core.tensor import Tensor
    from neurenix_npu_openvino.backend import NPUOpenVINOBackend
    from neurenix_npu_openvino.compiled import OpenVINOCompiledModel

__all__ = ["NPUBackend", "NPUModel", "is_npu_available", "PRECISIONS", "OPTIMIZE_FOR"]

PRECISIONS = ("int8", "int16", "fp16", "fp32")
OPTIMIZE_FOR = ("performance", "accuracy", "latency", "throughput")


def is_npu_available(*, allow_emulated: bool = True) -> bool:
    """True when an npu device can be used (an emulated one counts unless ``allow_emulated=False``)."""
    from neurenix_core._state import registry

    reg = registry()
    dev = Device("npu", 0)
    if not reg.has_device(dev):
        return False
    return allow_emulated or not reg.is_emulated(dev)


class NPUBackend:
    """The Intel NPU (through OpenVINO) as the seed documents describe it."""

    def __init__(self, device: int | str | Device = 0) -> None:
        self.device = device if isinstance(device, Device) else Device(device if isinstance(device, str) else f"npu:{int(device)}")
        if self.device.type != "npu":
            raise DeviceMismatchError(f"NPUBackend serves npu devices, not {self.device}; use the backend of that device type")
        self._backend: NPUOpenVINOBackend | None = None

    # ------------------------------------------------------------------ lifecycle
    def initialize(self) -> bool:
        """Start OpenVINO on the device. Raises BackendUnavailableError naming what is missing."""
        import neurenix_core as nx

        backend = nx.backend(self.device)
        from neurenix_npu_openvino.backend import NPUOpenVINOBackend

        if not isinstance(backend, NPUOpenVINOBackend):
            raise BackendUnavailableError(f"{self.device} is served by plugin {backend.name}, not npu-openvino; deny it with NEURENIX_BACKENDS=-{backend.name}")
        self._backend = backend
        return True

    @property
    def backend(self) -> NPUOpenVINOBackend:
        if self._backend is None:
            self.initialize()
        assert self._backend is not None
        return self._backend

    @property
    def emulated(self) -> bool:
        return self.backend.emulated

    def get_device_count(self) -> int:
        return self.backend.device_count()

    def get_device_info(self, index: int = 0) -> dict[str, Any]:
        """OpenVINO's full device name, supported precisions and capabilities, memory, emulation."""
        if not 0 <= index < self.get_device_count():
            from neurenix_core.errors import DeviceNotFoundError

            raise DeviceNotFoundError(f"npu:{index} does not exist: {self.get_device_count()} npu device(s)")
        return self.backend.device_info(index)

    # ------------------------------------------------------------------ ops
    def matmul(self, a: Any, b: Any) -> Tensor:
        """``a @ b`` on the NPU. Inputs on other devices are copied to it: asking the NPU
        backend for the product is the explicit request to move them."""
        import neurenix_core as nx

        return nx.matmul(self._on_device(a), self._on_device(b))

    def _on_device(self, x: Any) -> Tensor:
        import neurenix_core as nx

        if isinstance(x, nx.Tensor):
            return x if x.device == self.device else x.to(self.device)
        return nx.asarray(x, device=self.device)

    # ------------------------------------------------------------------ models
    def optimize_model(
        self,
        model: Any,
        quantize: bool | None = None,
        precision: str | None = None,
        optimize_for: str = "performance",
        *,
        calibration: Iterable[Any] | None = None,
        example_input: Any = None,
        threads: int | None = None,
    ) -> Any:
        """Compile ``model`` for the NPU.

        ``model`` is a neurenix ``nn.Module`` (through ``nx.compile``), a core ``Graph`` with
        static input shapes, or a ``torch.nn.Module`` (through ``openvino.convert_model``; needs
        ``example_input``). ``quantize=True`` means int8 unless ``precision`` says int16; the
        quantization parameters come from the core's calibration on ``calibration`` batches.
        """
        precision = _resolve_precision(quantize, precision, self.device)
        if optimize_for not in OPTIMIZE_FOR:
            raise CompilationError(f"{self.device}: optimize_for={optimize_for!r} is not one of {', '.join(OPTIMIZE_FOR)}")
        extra = {"optimize_for": optimize_for, **({"threads": threads} if threads is not None else {})}
        if isinstance(model, Graph):
            return self._compile_graph(model, precision, calibration, extra)
        if _is_torch_module(model):
            return self._compile_torch(model, precision, example_input, extra)
        return self._compile_nn(model, precision, calibration, extra)

    def _compile_graph(self, graph: Graph, precision: str | None, calibration: Any, extra: dict[str, Any]) -> NPUModel:
        from neurenix_npu_openvino.compiled import compile_graph

        plan = None
        if precision in ("int8", "int16"):
            plan = _calibrate(graph, precision, calibration, self.device)
        options = CompileOptions(device=self.device, precision=precision, quantization=plan, extra=extra)
        return NPUModel(self, compile_graph(self.backend, graph, options))

    def _compile_torch(self, module: Any, precision: str | None, example_input: Any, extra: dict[str, Any]) -> NPUModel:
        from neurenix_npu_openvino.compiled import compile_openvino_model
        from neurenix_npu_openvino.torch_import import convert_torch

        if precision in ("int8", "int16"):
            raise QuantizationError(
                f"{self.device}: int8/int16 for PyTorch modules needs NNCF, which this plugin does not use; "
                "build the model with neurenix nn (quantization from the core's calibration) or pass precision='fp32'/'fp16'"
            )
        ov_model = convert_torch(module, example_input, self.device)
        compiled = compile_openvino_model(self.backend, ov_model, precision=precision, optimize_for=extra["optimize_for"], threads=extra.get("threads"))
        return NPUModel(self, compiled)

    def _compile_nn(self, model: Any, precision: str | None, calibration: Any, extra: dict[str, Any]) -> Any:
        import neurenix_core as nx

        try:
            compile_fn = nx.compile
        except AttributeError as exc:
            raise CompilationError(
                f"{self.device}: {type(model).__name__} is not a Graph or torch module and this neurenix-core has no nx.compile; "
                "upgrade neurenix-core or pass model.to_graph(shape)"
            ) from exc
        quantize = precision in ("int8", "int16")
        return compile_fn(model, device=self.device, precision=precision, quantize=quantize or None, calibration=calibration, **_compile_extra(compile_fn, extra))

    # ------------------------------------------------------------------ memory
    def set_memory_limit(self, nbytes: int | None) -> None:
        """Limit the bytes tensors may hold on this device (OutOfMemoryError beyond it)."""
        self.backend.memory.set_limit(self.device.index, nbytes)

    def enable_memory_optimization(self, enabled: bool = True) -> None:
        """One OpenVINO stream per model and smaller compiled-graph caches."""
        self.backend.set_memory_optimization(enabled)

    def memory_stats(self) -> dict[str, Any]:
        return self.backend.memory.stats(self.device.index).as_dict()


class NPUModel:
    """A model compiled for the NPU: call it with arrays or npu tensors; returns npu tensors."""

    def __init__(self, owner: NPUBackend, compiled: OpenVINOCompiledModel) -> None:
        self.owner = owner
        self.compiled = compiled

    @property
    def summary(self) -> str:
        return self.compiled.summary

    def __call__(self, *inputs: Any) -> Any:
        from neurenix_core.tensor import wrap

        out = self.compiled(*(self._host(x) for x in inputs))
        be, dev = self.owner.backend, self.owner.device
        if isinstance(out, tuple):
            return tuple(wrap(o, be, dev, dev.index) for o in out)
        return wrap(out, be, dev, dev.index)

    def run_batches(self, batches: Iterable[Any], jobs: int | None = None) -> list[Any]:
        """Throughput path: many inputs through an AsyncInferQueue; NumPy results in order."""
        return self.compiled.run_batches([self._host(b) for b in batches], jobs)

    def _host(self, x: Any) -> np.ndarray:
        import neurenix_core as nx

        if isinstance(x, nx.Tensor):
            if x.device != self.owner.device:
                raise DeviceMismatchError(
                    f"the model is compiled for {self.owner.device} but its input is on {x.device}; move it with x.to('{self.owner.device}')"
                )
            return x.native
        return np.asarray(x)

    def layer_precisions(self) -> dict[str, tuple[str, str]]:
        return self.compiled.layer_precisions()

    def compute_layers(self) -> dict[str, str]:
        return self.compiled.compute_layers()


def _resolve_precision(quantize: bool | None, precision: str | None, device: Device) -> str | None:
    if precision is not None and precision not in PRECISIONS:
        raise CompilationError(f"{device}: precision={precision!r} is not one of {', '.join(PRECISIONS)}")
    if quantize and precision is None:
        return "int8"
    if quantize and precision not in ("int8", "int16"):
        raise QuantizationError(f"{device}: quantize=True asks for integer kernels but precision={precision!r}; use precision='int8' or 'int16'")
    if quantize is False and precision in ("int8", "int16"):
        raise QuantizationError(f"{device}: precision={precision!r} needs quantize=True (or leave quantize unset)")
    return precision


def _calibrate(graph: Graph, precision: str, calibration: Any, device: Device) -> Any:
    """The core's QuantizationPlan for ``graph`` from ``calibration`` batches."""
    if calibration is None:
        raise QuantizationError(
            f"{device}: precision={precision!r} needs calibration data (a few representative input batches): "
            "optimize_model(model, quantize=True, calibration=[x1, x2, ...])"
        )
    try:
        from neurenix_core import quantization
    except ImportError as exc:
        raise QuantizationError(f"{device}: this neurenix-core has no neurenix_core.quantization; upgrade neurenix-core") from exc
    return quantization.calibrate(graph, calibration, bits=8 if precision == "int8" else 16)


def _compile_extra(compile_fn: Any, extra: dict[str, Any]) -> dict[str, Any]:
    import inspect

    params = inspect.signature(compile_fn).parameters
    if "extra" in params:
        return {"extra": extra}
    return {k: v for k, v in extra.items() if k in params}


def _is_torch_module(model: Any) -> bool:
    # Checked by class path so that torch is never imported for a non-torch model.
    return any(c.__module__.startswith("torch.nn") and c.__name__ == "Module" for c in type(model).__mro__)
