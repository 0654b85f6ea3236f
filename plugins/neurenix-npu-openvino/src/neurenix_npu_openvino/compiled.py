"""Compiled whole models: lowering + compile properties + the (graph, shapes, precision, device)
cache, and the CompiledModel that runs them (one infer request per call, or an AsyncInferQueue
for batches of inputs)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from neurenix_core.contract import (
    CompiledModel,
    CompileOptions,
    Graph,
    QuantizationPlan,
    is_weight_plan,
    quantizes_activations,
    scheme_of,
)
from neurenix_core.errors import QuantizationError, ShapeError, UnsupportedDTypeError, UnsupportedOperationError
from neurenix_npu_openvino.activation_probe import check_activation_quantization
from neurenix_npu_openvino.compile_cache import compile_cached
from neurenix_npu_openvino.config import activation_group, check_precision, precision_hint, user_properties, weights_summary
from neurenix_npu_openvino.lowering import lower_graph
from neurenix_npu_openvino.quantize import check_plan, check_plan_scales

if TYPE_CHECKING:
    from neurenix_npu_openvino.backend import NPUOpenVINOBackend

__all__ = [
    "CONFIG_PROPERTIES",
    "OpenVINOCompiledModel",
    "compile_graph",
    "compile_openvino_model",
    "resolve_precision",
    "runtime_config",
]

#: Layer types whose runtime precision tells whether quantization reached the kernels.
COMPUTE_LAYERS = frozenset({"Convolution", "GroupConvolution", "FullyConnected", "MatMul", "Deconvolution"})
_INTEGER_PRECISIONS = frozenset({"u8", "i8", "u16", "i16", "u4", "i4"})
#: Compiled-model properties that decide speed; benchmarks compare them between two models.
CONFIG_PROPERTIES = ("INFERENCE_NUM_THREADS", "NUM_STREAMS", "INFERENCE_PRECISION_HINT", "PERFORMANCE_HINT", "EXECUTION_MODE_HINT",
                     "ENABLE_CPU_PINNING", "SCHEDULING_CORE_TYPE", "ENABLE_HYPER_THREADING", "OPTIMAL_NUMBER_OF_INFER_REQUESTS")


def runtime_config(compiled: Any) -> dict[str, str]:
    """The effective configuration of an ``openvino.CompiledModel``, read back with get_property,
    plus how many conv/FC layers run in integer precision. Properties a device does not report
    are left out."""
    supported = set(compiled.get_property("SUPPORTED_PROPERTIES"))
    out = {name: str(compiled.get_property(name)) for name in CONFIG_PROPERTIES if name in supported}
    try:
        layers = [(rt["layerType"].astype(str), rt["runtimePrecision"].astype(str))
                  for rt in (op.get_rt_info() for op in compiled.get_runtime_model().get_ordered_ops())]
    except RuntimeError:  # devices without a runtime graph (the NPU compiler)
        return out
    compute = [p for kind, p in layers if kind in COMPUTE_LAYERS]
    out["integer_layers"] = f"{sum(1 for p in compute if p.lower() in _INTEGER_PRECISIONS)}/{len(compute)}"
    return out


class OpenVINOCompiledModel(CompiledModel):
    """A compiled OpenVINO model with the static input shapes it was compiled for."""

    def __init__(self, backend: NPUOpenVINOBackend, compiled: Any, *, precision: str, input_specs: Sequence[tuple[str, tuple[int, ...], np.dtype[Any]]],
                 optimize_for: str | None, nodes: int, source: str, cache: str = "", constants: int = 0) -> None:
        self.backend = backend
        self.compiled = compiled
        self.precision = precision
        self.input_specs = tuple(input_specs)
        self.optimize_for = optimize_for or "performance"
        self._request = compiled.create_infer_request()
        self._infer = _native_infer(self._request)
        self._tensor = backend.ov.Tensor
        self._lock = threading.Lock()
        self._outputs = len(compiled.outputs)
        self._single = self.input_specs[0] if len(self.input_specs) == 1 and self._outputs == 1 else None
        where = f"OpenVINO {backend.ov_device}" + (" (emulating npu: NEURENIX_EMULATE=npu)" if backend.emulated else "")
        self.summary = (
            f"{where}, precision {precision} (INFERENCE_PRECISION_HINT={precision_hint(precision)}), "
            f"optimize_for={self.optimize_for}, {nodes} {source} node(s){f' and {constants} constant(s)' if constants else ''}, "
            f"{self._int_summary()}"
        ) + (f", {cache}" if cache else "")

    @property
    def input_shapes(self) -> tuple[tuple[int, ...], ...]:
        return tuple(shape for _, shape, _ in self.input_specs)

    @property
    def emulated(self) -> bool:
        return self.backend.emulated

    @property
    def config(self) -> dict[str, str]:
        """The effective configuration OpenVINO reports for this compiled model."""
        return runtime_config(self.compiled)

    # ------------------------------------------------------------------ running
    def _check(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        if len(inputs) != len(self.input_specs):
            raise ShapeError(f"{self.backend.device_label()}: the compiled model takes {len(self.input_specs)} input(s), got {len(inputs)}")
        arrays = []
        for value, (name, shape, dtype) in zip(inputs, self.input_specs):
            array = np.asarray(value)
            if tuple(array.shape) != shape:
                raise ShapeError(
                    f"{self.backend.device_label()}: input {name!r} of the compiled model must have shape {shape}, got {tuple(array.shape)}; "
                    "compile again for this shape (nx.compile does so per shape) or reshape the input"
                )
            if array.dtype != dtype:
                raise UnsupportedDTypeError(
                    f"{self.backend.device_label()}: input {name!r} must be {dtype}, got {array.dtype}; cast it first (x.astype({dtype}))"
                )
            arrays.append(array if array.flags.c_contiguous else np.ascontiguousarray(array))
        return arrays

    def _run(self, *inputs: Any) -> Any:
        single = self._single
        if single is not None and len(inputs) == 1:
            x = inputs[0]
            # The common call: one contiguous array of the compiled shape and dtype, wrapped
            # without a copy (shared_memory) and one output copied out of the request.
            if type(x) is np.ndarray and x.shape == single[1] and x.dtype == single[2] and x.flags.c_contiguous:
                request = self._request
                with self._lock:
                    self._infer(request, self._tensor(x, shared_memory=True), True, False)
                    return request.get_output_tensor(0).data.copy()
        arrays = self._check(inputs)
        with self._lock:
            outs = infer_shared(self._request, self._tensor, arrays, self._outputs)
        return outs[0] if len(outs) == 1 else outs

    def run_batches(self, batches: Iterable[Any], jobs: int | None = None) -> list[Any]:
        """Run many inputs through OpenVINO's AsyncInferQueue; results keep the input order.

        ``jobs`` parallel infer requests (default: the compiled model's optimal number). Each
        item of ``batches`` is one input array or a tuple of inputs.
        """
        from openvino import AsyncInferQueue

        items = [self._check(b if isinstance(b, tuple) else (b,)) for b in batches]
        jobs = jobs or int(self.compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))
        queue = AsyncInferQueue(self.compiled, max(1, jobs))
        results: list[Any] = [None] * len(items)

        def done(request: Any, index: int) -> None:
            outs = tuple(np.array(request.get_output_tensor(i).data, copy=True) for i in range(self._outputs))
            results[index] = outs[0] if len(outs) == 1 else outs

        queue.set_callback(done)
        for i, arrays in enumerate(items):
            queue.start_async(arrays, userdata=i)
        queue.wait_all()
        return results

    # ------------------------------------------------------------------ inspection
    def layer_precisions(self) -> dict[str, tuple[str, str]]:
        """Each layer of the runtime graph: (layer type, runtime precision) as OpenVINO ran it."""
        out: dict[str, tuple[str, str]] = {}
        for op in self.compiled.get_runtime_model().get_ordered_ops():
            rt = op.get_rt_info()
            out[op.get_friendly_name()] = (rt["layerType"].astype(str), rt["runtimePrecision"].astype(str))
        return out

    def compute_layers(self) -> dict[str, str]:
        """Convolution / fully connected layers and their runtime precision."""
        return {name: prec for name, (kind, prec) in self.layer_precisions().items() if kind in COMPUTE_LAYERS}

    def _int_summary(self) -> str:
        try:
            layers = self.compute_layers()
        except RuntimeError as exc:
            # Some devices (the NPU compiler) expose no runtime graph; say so instead of guessing.
            return f"runtime precisions unavailable ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
        ints = sum(1 for p in layers.values() if p.lower() in _INTEGER_PRECISIONS)
        return f"{ints}/{len(layers)} conv/FC layer(s) in integer precision"


def _native_infer(request: Any) -> Any:
    """OpenVINO's C++ ``InferRequest.infer(inputs, share_outputs, decode_strings)`` (the class
    ``openvino.InferRequest`` derives from). The Python ``infer()`` runs its data dispatcher and
    wraps every output in an OVDict on each call, about 1-2 µs that a 40 µs batch-1 inference
    notices; the inputs here are already OpenVINO tensors and the outputs are read from the
    request, so neither is needed. Outputs are shared (not copied) by this call."""
    return type(request).__mro__[1].infer


def infer_shared(request: Any, tensor: Any, arrays: Sequence[np.ndarray], outputs: int) -> tuple[np.ndarray, ...]:
    """One synchronous inference that wraps the inputs without copying them and copies the outputs.

    Shared input tensors + the C++ infer skip the Python data dispatcher of ``request.infer(list)``,
    which costs about as much as a small model's whole inference on this machine. Outputs are
    copied because the request reuses its buffers on the next call.
    """
    _native_infer(request)(request, {i: tensor(array, shared_memory=True) for i, array in enumerate(arrays)}, True, False)
    return tuple(request.get_output_tensor(i).data.copy() for i in range(outputs))


# ---------------------------------------------------------------------- compilation
def resolve_precision(backend: NPUOpenVINOBackend, precision: str | None, plan: QuantizationPlan | None) -> str:
    """The explicit precision to compile with; never the device's silent default."""
    if is_weight_plan(plan):  # weight-only: the activations' precision is the user's (fp32 by default)
        assert plan is not None
        check_plan_scales(plan, backend.device_label())
        plan = None
    if precision is None:
        precision = f"int{plan.bits}" if plan is not None else ("fp32" if backend.emulated or "FP32" in backend.capabilities else "fp16")
    check_precision(precision, backend.device_label(), backend.capabilities)
    if precision in ("int8", "int16"):
        if plan is None:
            raise QuantizationError(
                f"{backend.device_label()}: precision={precision!r} needs quantization parameters from calibration; "
                "pass calibration data (nx.compile(model, device='npu', precision='int8', calibration=batches))"
            )
        check_plan(plan, precision, backend.device_label())
    elif plan is not None:
        raise QuantizationError(f"{backend.device_label()}: a {plan.bits}-bit quantization plan was given with precision={precision!r}; use precision='int{plan.bits}'")
    return precision



def _weight_properties(backend: NPUOpenVINOBackend, plan: QuantizationPlan) -> dict[str, Any]:
    """The activations' precision of a weight plan on OpenVINO's CPU device: float for weight-only
    schemes (the device would otherwise quantize them at run time in groups of 32, its default
    for compressed weights; ov_properties can still ask for it), int8 in groups of 32 for the
    "-int8-activations" schemes. The Intel NPU's compiler chooses its own activation precision,
    so it takes only the weight-only schemes."""
    scheme = scheme_of(plan)
    if backend.ov_device != "CPU":
        if quantizes_activations(plan):
            raise QuantizationError(f"{backend.device_label()}: {scheme} asks for int8 activations in groups of 32, which the "
                                    f"Intel NPU's compiler does not take; use quantize='{scheme.split('-')[0]}-weights'")
        return {}
    check_activation_quantization(backend.core, scheme, backend.device_label())
    return {"DYNAMIC_QUANTIZATION_GROUP_SIZE": activation_group(scheme)}


def compile_graph(backend: NPUOpenVINOBackend, graph: Graph, options: CompileOptions) -> OpenVINOCompiledModel:
    """Lower and compile ``graph`` (static input shapes) for the npu device; cached."""
    plan = options.quantization
    precision = resolve_precision(backend, options.precision, plan)
    optimize_for = options.extra.get("optimize_for")
    threads = options.extra.get("threads", backend.threads)
    properties = user_properties(options.extra.get("ov_properties"), backend.device_label())
    if is_weight_plan(plan):
        properties = {**_weight_properties(backend, plan), **properties}
    key = ("graph", graph.fingerprint(), precision, backend.ov_device, None if plan is None else plan.fingerprint(), optimize_for, threads, backend.memory_optimization,
           tuple(sorted(properties.items())))

    def compile_now() -> Any:
        model = lower_graph(graph, plan, device=backend.device_label())
        return backend.compile_model(model, precision, optimize_for, threads=threads, properties=properties)

    def build() -> tuple[Any, str]:
        # The persistent cache (other processes' compiles) behind this process's own.
        props = backend.compile_properties(precision, optimize_for, threads, properties)
        result = compile_cached(backend, graph, plan, props, compile_now, fingerprint=key[1])
        return result.value, result.line()

    compiled, cache_line = backend.cached_model(key, build)
    specs = [(s.name, tuple(s.shape), np.dtype(s.dtype)) for s in graph.inputs]
    model = OpenVINOCompiledModel(backend, compiled, precision=precision, input_specs=specs, optimize_for=optimize_for,
                                  # operations, as the core's placement counts them; constants apart
                                  nodes=sum(n.op != "constant" for n in graph.nodes), constants=sum(n.op == "constant" for n in graph.nodes),
                                  source="neurenix graph", cache=cache_line)
    if is_weight_plan(plan) and backend.ov_device == "CPU":
        assert plan is not None
        model.summary += f", {weights_summary(scheme_of(plan))}"
    # What compiled.save needs to write the IR again and compile it the same way (artifact.py).
    model.source_graph, model.plan, model.threads, model.properties = graph, plan, threads, dict(properties)
    return model


def compile_openvino_model(backend: NPUOpenVINOBackend, model: Any, *, precision: str | None, optimize_for: str | None, threads: int | None = None) -> OpenVINOCompiledModel:
    """Compile an ``openvino.Model`` (e.g. from openvino.convert_model) with static shapes."""
    precision = resolve_precision(backend, precision, None)
    specs = []
    for param in model.get_parameters():
        shape = param.get_partial_shape()
        if shape.is_dynamic:
            raise ShapeError(f"{backend.device_label()}: input {param.get_friendly_name()!r} has dynamic shape {shape}; pass example_input with the real shape")
        specs.append((param.get_friendly_name(), tuple(int(d) for d in shape.to_shape()), np.dtype(param.get_element_type().to_dtype())))
    if not specs:
        raise UnsupportedOperationError(f"{backend.device_label()}: the model has no inputs")
    compiled = backend.compile_model(model, precision, optimize_for, threads=threads)
    return OpenVINOCompiledModel(backend, compiled, precision=precision, input_specs=specs, optimize_for=optimize_for, nodes=len(model.get_ops()), source="OpenVINO")
