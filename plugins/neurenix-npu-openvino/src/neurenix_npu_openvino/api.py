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

import warnings
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from neurenix_core.contract import (
    CompileOptions,
    Device,
    DeviceBackend,
    check_outputs,
    deliver,
    device_available,
    to_device_input,
    to_device_inputs,
    user_stacklevel,
)
from neurenix_core.errors import CompilationError, NeurenixWarning, QuantizationError

if TYPE_CHECKING:
    from neurenix_core.contract import Tensor
    from neurenix_npu_openvino.backend import NPUOpenVINOBackend
    from neurenix_npu_openvino.compiled import OpenVINOCompiledModel

__all__ = ["OPTIMIZE_FOR", "PRECISIONS", "NPUBackend", "NPUModel", "is_npu_available"]

PRECISIONS = ("int8", "int16", "fp16", "fp32")
OPTIMIZE_FOR = ("performance", "accuracy", "latency", "throughput")


def is_npu_available(*, allow_emulated: bool = True) -> bool:
    """True when an npu device can be used (an emulated one counts unless ``allow_emulated=False``)."""
    return device_available("npu", allow_emulated=allow_emulated)


class NPUBackend(DeviceBackend):
    """The Intel NPU (through OpenVINO) as the seed documents describe it.

    ``get_device_info(i)`` gives OpenVINO's full device name, supported precisions and
    capabilities, memory and emulation.
    """

    device_type = "npu"
    backend_class = "neurenix_npu_openvino.backend:NPUOpenVINOBackend"
    backend: NPUOpenVINOBackend

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
        quantize: bool | str | None = None,
        precision: str | None = None,
        optimize_for: str = "performance",
        *,
        calibration: Iterable[Any] | None = None,
        example_input: Any = None,
        threads: int | None = None,
        outputs: str = "device",
    ) -> NPUModel:
        """Compile ``model`` for the NPU.

        ``model`` is a neurenix ``nn.Module`` or a core ``Graph`` (through ``nx.compile``: one
        OpenVINO compile per input shape), or a ``torch.nn.Module`` (through
        ``openvino.convert_model``; needs ``example_input``). ``quantize=True`` means int8 (int16
        when ``precision="int16"``) with parameters from the core's calibration on
        ``calibration`` batches; without calibration data it means dynamic int8 (Linear weights
        in int8, activations quantized at run time), with a warning saying so.

        The model takes host inputs (NumPy, cpu tensors: copied in) and npu tensors; results
        are npu tensors, or NumPy arrays with ``outputs="host"`` (``neurenix_core.graph.compile.inputs``).
        """
        precision = _resolve_precision(quantize, precision, self.device)
        check_outputs(outputs, self.device)
        if optimize_for not in OPTIMIZE_FOR:
            raise CompilationError(f"{self.device}: optimize_for={optimize_for!r} is not one of {', '.join(OPTIMIZE_FOR)}")
        extra: dict[str, Any] = {"optimize_for": optimize_for, "outputs": outputs}
        if threads is not None:
            extra["threads"] = int(threads)
        if _is_torch_module(model):
            return self._compile_torch(model, precision, example_input, extra)
        return self._compile_core(model, quantize, precision, calibration, extra)

    def _compile_core(self, model: Any, quantize: Any, precision: str | None, calibration: Any, extra: dict[str, Any]) -> NPUModel:
        import neurenix_core as nx

        self.backend  # noqa: B018 - start OpenVINO now: an unavailable NPU fails here, clearly
        if precision in ("int8", "int16") and calibration is None and not isinstance(quantize, str):
            if precision == "int16":
                raise QuantizationError(f"{self.device}: int16 quantization needs calibration data: optimize_model(..., calibration=[x1, x2, ...])")
            warnings.warn(
                f"{self.device}: quantize=True without calibration data gives dynamic int8 (Linear weights int8, activations "
                "quantized at run time; convolutions stay float). Pass calibration=[batches] for static int8 on every layer.",
                NeurenixWarning,
                stacklevel=user_stacklevel(),
            )
            return NPUModel(self, core=nx.compile(model, device=self.device, quantize="dynamic", **extra))
        # The resolved precision names the bit width ("int16" stays int16); "dynamic" passes through.
        quant: Any = None if precision not in ("int8", "int16") else ("dynamic" if quantize == "dynamic" else precision)
        prec = None if quant is not None else precision
        return NPUModel(self, core=nx.compile(model, device=self.device, precision=prec, quantize=quant, calibration=calibration, progress=False, **extra))

    def _compile_torch(self, module: Any, precision: str | None, example_input: Any, extra: dict[str, Any]) -> NPUModel:
        from neurenix_npu_openvino.compiled import compile_openvino_model
        from neurenix_npu_openvino.torch_import import convert_torch

        if precision in ("int8", "int16"):
            raise QuantizationError(
                f"{self.device}: int8/int16 for PyTorch modules needs NNCF, which this plugin does not use; import the model "
                "with nx.nn.from_torch(module) and quantize it with the core's calibration, or pass precision='fp32'/'fp16'"
            )
        ov_model = convert_torch(module, example_input, self.device)
        compiled = compile_openvino_model(self.backend, ov_model, precision=precision, optimize_for=extra["optimize_for"], threads=extra.get("threads"))
        return NPUModel(self, native=compiled, outputs=extra["outputs"])

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
    """A model compiled for the NPU: call it with host data (NumPy, cpu tensors) or npu tensors;
    returns npu tensors (NumPy arrays when compiled with ``outputs="host"``).

    ``core`` is the core's ``nx.compile`` result (neurenix models and graphs), ``native`` an
    OpenVINO model compiled directly (PyTorch modules). ``openvino(*shapes)`` gives the
    compiled OpenVINO model for those input shapes (runtime precisions, async batches).
    """

    def __init__(self, owner: NPUBackend, *, core: Any = None, native: OpenVINOCompiledModel | None = None, outputs: str = "device") -> None:
        self.owner = owner
        self.core = core
        self.native = native
        self.outputs = core.outputs if core is not None else outputs

    @property
    def summary(self) -> str:
        return self.core.summary if self.core is not None else self.native.summary  # type: ignore[union-attr]

    @property
    def precision(self) -> str | None:
        return self.core.precision if self.core is not None else self.native.precision  # type: ignore[union-attr]

    def __call__(self, *inputs: Any) -> Any:
        if self.core is not None:
            return self.core(*inputs)
        assert self.native is not None
        be, dev = self.owner.backend, self.owner.device
        return deliver(self.native(*to_device_inputs(inputs, dev, be)), dev, be, self.outputs)

    def openvino(self, *shapes: tuple[int, ...]) -> OpenVINOCompiledModel:
        """The compiled OpenVINO model for ``shapes`` (from the backend's cache when compiled)."""
        if self.native is not None:
            return self.native
        from neurenix_npu_openvino.compiled import compile_graph

        core = self.core
        graph = core.graph.with_input_shapes(*shapes)
        options = CompileOptions(device=self.owner.device, precision=core.precision, quantization=core.plan, extra=core.extra)
        return compile_graph(self.owner.backend, graph, options)

    def run_batches(self, batches: Sequence[Any], jobs: int | None = None) -> list[Any]:
        """Throughput path: many inputs through an AsyncInferQueue; NumPy results in order."""
        be, dev = self.owner.backend, self.owner.device
        hosts = [to_device_input(b, i, dev, be) for i, b in enumerate(batches)]
        if not hosts:
            return []
        return self.openvino(hosts[0].shape).run_batches(hosts, jobs)


def _resolve_precision(quantize: bool | str | None, precision: str | None, device: Device) -> str | None:
    if precision is not None and precision not in PRECISIONS:
        raise CompilationError(f"{device}: precision={precision!r} is not one of {', '.join(PRECISIONS)}")
    if quantize and precision is None:
        return quantize if quantize in ("int8", "int16") else "int8"
    if quantize and precision not in ("int8", "int16"):
        raise QuantizationError(f"{device}: quantize=True asks for integer kernels but precision={precision!r}; use precision='int8' or 'int16'")
    if quantize is False and precision in ("int8", "int16"):
        raise QuantizationError(f"{device}: precision={precision!r} needs quantize=True (or leave quantize unset)")
    return precision


def _is_torch_module(model: Any) -> bool:
    # Checked by class path so that torch is never imported for a non-torch model.
    return any(c.__module__.startswith("torch.nn") and c.__name__ == "Module" for c in type(model).__mro__)
