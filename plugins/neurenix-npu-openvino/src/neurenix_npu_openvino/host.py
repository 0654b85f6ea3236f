"""OpenVINO's CPU device as a host runtime for ``cpu:0`` (``runtime="openvino"``, API 1.2).

The same lowering as the npu device (``lowering.lower_graph``), compiled for OpenVINO's ``CPU``
device in f32: ``INFERENCE_PRECISION_HINT=f32`` always (the CPU device defaults to bf16 on CPUs
that have it, which would put a matmul ~1e-2 off), ``PERFORMANCE_HINT=LATENCY``, and
``INFERENCE_NUM_THREADS`` when ``threads=`` is given (read back from the compiled model).
This is OpenVINO doing what it is for, not emulation: the device stays ``cpu:0``.

Static int8/int16 models (API 1.5, ``quantized_precisions``): the core's plan becomes FakeQuantize
nodes (``quantize.py``, as for the npu device) that OpenVINO's low-precision pass folds into
integer Convolution / FullyConnected kernels (u8 activations x i8 weights, VNNI or AMX where
the CPU has them); the rest of the graph stays in f32. Compiled with
``QUANTIZED_CPU_PROPERTIES`` (Snippets off: its fused int8 MLP subgraphs are wrong with small
biases), and the summary says how many conv/FC layers run in integers, read back from the
compiled model's runtime graph.

Weight-only int8 / int4 models (``weight_schemes``): the core's weight plan becomes the npu
device's compressed-weight constants (integer codes, a Convert and the scales: the pattern the CPU
device runs as a FullyConnected that decompresses inside its kernel), with float activations
(``DYNAMIC_QUANTIZATION_GROUP_SIZE=0``: the CPU device would otherwise quantize them at run time);
the ``"-int8-activations"`` schemes ask for exactly that run-time quantization (groups of 32),
once ``activation_probe`` has seen this CPU do it. A language model's int8 weights are a quarter
of its float ones, in every compiled shape.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np

from neurenix_core.contract import (
    WEIGHT_SCHEMES,
    Graph,
    HostModel,
    HostOptions,
    HostRuntime,
    QuantizationPlan,
    StatefulModel,
    StateSpec,
    scheme_of,
)
from neurenix_core.errors import BackendUnavailableError, CompilationError
from neurenix_npu_openvino.config import weights_summary
from neurenix_npu_openvino.int64_guard import check_fits_int32, int64_use
from neurenix_npu_openvino.shape_sharing import ShapeSharing, SharedModel, first_line, signature

__all__ = ["OpenVINOHostModel", "OpenVINOHostRuntime"]


class OpenVINOHostModel(HostModel):
    """One compiled model on OpenVINO's CPU device with one infer request (calls are serialized)."""

    def __init__(self, shared: SharedModel, tensor: Any, threads: int | None, guarded: tuple[int, ...] = ()) -> None:
        self._shared = shared
        self._guarded = guarded  # int64 inputs read as data: checked to fit 32 bits on every call
        self._tensor = tensor
        self._lock = threading.Lock()
        self._version, self._request, self._infer = -1, None, None
        self._outputs = len(shared.compiled.outputs)  # the same for every model of the signature
        shared.users.add(self)
        compiled = shared.compiled
        self.threads = int(compiled.get_property("INFERENCE_NUM_THREADS")) or threads
        hint = compiled.get_property("INFERENCE_PRECISION_HINT")
        hint = hint.get_type_name() if hasattr(hint, "get_type_name") else str(hint)
        self.summary = f"OpenVINO {compiled.get_property('EXECUTION_DEVICES')[0]} on cpu:0, INFERENCE_PRECISION_HINT={hint}, {self.threads or 'default'} thread(s)"

    @property
    def compiled(self) -> Any:
        """The OpenVINO compiled model this shape runs on (shared with other shapes: shape_sharing.py)."""
        return self._shared.compiled

    def _current(self) -> tuple[Any, Any]:
        """(infer request, its native infer) on the shared model as it is now: made on the first
        call and again after the model was replaced (a later shape made an axis dynamic), read
        into locals so that a replacement dropping them meanwhile cannot pull them from a call."""
        from neurenix_npu_openvino.compiled import _native_infer

        request, infer = self._request, self._infer
        if request is None or infer is None or self._version != self._shared.version:
            self._version, request = self._shared.request_for()
            infer = _native_infer(request)
            self._request, self._infer = request, infer
        return request, infer

    def release(self) -> None:
        """Drop the request on the shared model (its replacement calls this under the model's
        lock; a call running on the request keeps its own reference until it returns): the old
        model, and its copy of the weights, goes before the new one is compiled."""
        self._request = self._infer = None

    def __call__(self, *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
        for i in self._guarded:
            check_fits_int32(inputs[i], i)
        with self._lock:
            request, infer = self._current()
            # Inputs wrapped without a copy; outputs copied, since the request reuses its buffers.
            infer(request, {i: self._tensor(np.ascontiguousarray(x), shared_memory=True) for i, x in enumerate(inputs)}, True, False)
            return tuple(request.get_output_tensor(i).data.copy() for i in range(self._outputs))

    def call_one(self, x: np.ndarray) -> np.ndarray:
        # __call__ for one input and one output, without its dict comprehension and tuple
        # generator: about 0.8 µs of a 12 µs call on a small model (benchmarks/cpu.py, mlp_small).
        if self._guarded:
            check_fits_int32(x, 0)
        with self._lock:
            request, infer = self._current()
            infer(request, {0: self._tensor(np.ascontiguousarray(x), shared_memory=True)}, True, False)
            return request.get_output_tensor(0).data.copy()


class OpenVINOHostRuntime(HostRuntime):
    """OpenVINO's CPU device, started once per process."""

    name = "openvino"
    keeps_state = True  # compile_stateful: stateful.py
    stores_state_models = True  # compile_stateful(folder=), load_stateful: stateful.py

    def __init__(self, graph_dtypes: tuple[str, ...]) -> None:
        from neurenix_npu_openvino.telemetry import keep_telemetry_out

        keep_telemetry_out()  # before the first import: OpenVINO's telemetry forks (see telemetry.py)
        try:
            import openvino as ov
        except ImportError as exc:
            raise BackendUnavailableError(f"host runtime openvino (plugin npu-openvino): OpenVINO is not importable ({exc}); pip install openvino") from exc
        from neurenix_npu_openvino.lowering import HANDLERS

        self.ov = ov
        self.core = ov.Core()
        if "CPU" not in self.core.available_devices:
            raise BackendUnavailableError(f"host runtime openvino: OpenVINO {ov.get_version()} lists no CPU device ({self.core.available_devices})")
        self.version = str(ov.get_version())
        self.graph_ops = frozenset(HANDLERS)
        self.graph_dtypes = frozenset(graph_dtypes)  # the plugin's declaration, handed over (host.py does not import plugin.py)
        # The precisions whose integer kernels the CPU device reports (INT8 on every x86-64 CPU
        # OpenVINO supports; INT16 is not reported by today's CPU plugin).
        caps = set(self.core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
        self.quantized_precisions = frozenset(p for p, cap in (("int8", "INT8"), ("int16", "INT16")) if cap in caps)
        # With "-int8-activations", the CPU device's run-time activation quantization (checked per
        # process by activation_probe before such a model compiles).
        self.weight_schemes = frozenset(WEIGHT_SCHEMES)
        self._sharing = ShapeSharing()

    def covers(self, graph: Graph) -> str | None:
        why = super().covers(graph)
        return why if why is not None else int64_use(graph)[0]

    def compile_stateful(self, graph: Graph, other: Graph, states: tuple[StateSpec, ...], options: HostOptions,
                         folder: Path | None = None) -> StatefulModel:
        from neurenix_npu_openvino.stateful import compile_stateful

        return compile_stateful(self.core, self.ov.Tensor, graph, other, states, options, folder)

    def load_stateful(self, folder: Path, options: HostOptions) -> StatefulModel:
        from neurenix_npu_openvino.stateful import load_stateful

        return load_stateful(self.core, self.ov.Tensor, folder, options)

    def compile(self, graph: Graph, options: HostOptions) -> OpenVINOHostModel:
        from neurenix_npu_openvino.activation_probe import check_activation_quantization
        from neurenix_npu_openvino.compile_cache import host_compile_cached
        from neurenix_npu_openvino.compiled import runtime_config
        from neurenix_npu_openvino.config import QUANTIZED_CPU_PROPERTIES, cpu_host_properties
        from neurenix_npu_openvino.lowering import lower_graph
        from neurenix_npu_openvino.quantize import check_plan, cpu_placement

        plan, weights = options.plan, options.weights
        if options.precision != "fp32" and (plan is None or options.precision not in self.quantized_precisions):
            raise CompilationError(f"host runtime openvino compiles cpu:0 graphs in fp32 or, with the core's static plan, in "
                                   f"{' or '.join(sorted(self.quantized_precisions)) or 'no integer precision'}; not {options.precision!r}")
        if plan is not None:
            check_plan(plan, options.precision, "host runtime openvino (cpu:0)")
        # The lowered (and cache-keyed) plan leaves out roundings inside fused activation chains.
        lowered = cpu_placement(graph, plan) if plan is not None else None
        # f32 for the float parts in every case: a quantized model's FakeQuantize layers run in
        # integers, everything between them in f32.
        scheme = None if weights is None else scheme_of(weights)
        check_activation_quantization(self.core, scheme, "host runtime openvino (cpu:0)")
        props = cpu_host_properties(options.threads, scheme=scheme)
        if plan is not None:
            props.update(QUANTIZED_CPU_PROPERTIES)
        if weights is not None:
            lowered = weights

        # Lowered first: a model already compiled for other input shapes runs this one too where
        # the two lower to the same OpenVINO model up to their input sizes (shape_sharing.py).
        ov_model = lower_graph(graph, lowered, device="cpu:0")

        def compile_model(model: Any) -> Any:
            try:
                return self.core.compile_model(model, "CPU", props)
            except RuntimeError as exc:
                raise CompilationError(f"host runtime openvino could not compile the cpu:0 graph: {first_line(exc)}") from exc

        def compile_first(model: Any) -> Any:
            # The first shape of a signature, static: a later process imports the compiled blob.
            result = host_compile_cached(self.core, self.version, graph, props, lambda: compile_model(model), lowered)
            if result.state != "off":
                cache_lines.append(result.line())
            return result.value

        cache_lines: list[str] = []  # the compile cache's line, where this shape compiled through it
        shapes = tuple(tuple(int(d) for d in s.shape) for s in graph.inputs)
        shared, reused = self._sharing.model_for(signature(ov_model, props), ov_model, shapes, compile_first, compile_model)
        model = OpenVINOHostModel(shared, self.ov.Tensor, options.threads, int64_use(graph)[1])
        if plan is not None and lowered is not None:
            # The low-precision pass may leave a layer in f32 (a pattern it does not fold): the
            # count read back from the runtime graph says so rather than claiming int8 throughout.
            layers = runtime_config(shared.compiled).get("integer_layers", "?")
            model.summary += (f", {options.precision} with the core's plan ({layers} conv/FC layers in integer precision; "
                              f"{_placement_line(plan, lowered)})")
        if scheme is not None:
            model.summary += f", {weights_summary(scheme)}"
        model.summary += _sharing_line(shared, reused, graph)
        model.summary += "".join(f", {line}" for line in cache_lines)
        return model


def _sharing_line(shared: SharedModel, reused: bool, graph: Graph) -> str:
    """What the summary says of a compiled model other input shapes run on too."""
    if shared.note:
        return f", {shared.note}"
    if len(shared.served) < 2:
        return ""
    axes = ", ".join(f"{graph.inputs[i].name}[{a}]" for i, a in shared.dynamic_axes)
    how = "runs on the compiled model" if reused else "compiled one model"
    return (f", {how} of {len(shared.served)} input shapes with the same lowering ({axes} dynamic): "
            "one copy of the weights")


def _placement_line(plan: QuantizationPlan, lowered: QuantizationPlan) -> str:
    """How many of the plan's activations were rounded on the device (``quantize.cpu_placement``)."""
    left = len(plan.activations) - len(lowered.activations)
    if not left:
        return f"FakeQuantize on all {len(plan.activations)} planned activations"
    return (f"FakeQuantize on {len(lowered.activations)} of {len(plan.activations)} planned activations, "
            f"{left} read only by fused activations kept in f32")
