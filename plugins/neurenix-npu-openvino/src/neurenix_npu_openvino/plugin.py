"""Hook implementations of neurenix-npu-openvino (entry point ``npu-openvino``).

Imported by ``import neurenix_core``: it imports nothing heavy. OpenVINO is imported by the
backend factory, the first time an npu device is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from neurenix_core.contract import (
    OPSET_NAMES,
    Capabilities,
    CompileOption,
    Manifest,
    PriorityBand,
    ProbeContext,
    ProbeResult,
    hookimpl,
)
from neurenix_core.errors import BackendUnavailableError
from neurenix_npu_openvino import probe as _probe

if TYPE_CHECKING:
    from neurenix_core.contract import Backend, CompiledModel, HostRuntime

__all__ = [
    "neurenix_backend",
    "neurenix_compile",
    "neurenix_host_runtime",
    "neurenix_load_compiled",
    "neurenix_manifest",
    "neurenix_probe",
    "neurenix_save_compiled",
]

_VERSION: Final = "0.1.0"
# Kept in sync with eager.NATIVE_OPS (a test checks it) so the manifest stays import-free.
_NATIVE_OPS: Final = (
    "abs", "exp", "log", "sqrt", "negative", "sin", "cos", "tan", "tanh", "floor", "ceil", "sign",
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "pow", "matmul",
    "nn.linear", "nn.conv2d", "nn.relu", "nn.gelu", "nn.sigmoid", "nn.tanh", "nn.softmax",
    "nn.max_pool2d", "nn.avg_pool2d", "nn.adaptive_avg_pool2d", "nn.batch_norm", "nn.layer_norm",
)

#: Ops beyond the portable opset that the lowering takes, declared by name: scatter_elements is
#: how a transformers StaticCache writes its key/value cache (index_copy_), so without it every
#: decode step splits the npu graph around the cache updates.
_EXTRA_GRAPH_OPS: Final[tuple[str, ...]] = ("scatter_elements",)

# The op-level opset ops lowering.HANDLERS lowers to opset16 (a test keeps the two equal): the
# whole portable opset, composites included, so the core decomposes and partitions none of it,
# and _EXTRA_GRAPH_OPS.
_GRAPH_OPS: Final = tuple(sorted(OPSET_NAMES + _EXTRA_GRAPH_OPS))
# Values a lowered graph carries: f32 compute, int64/int32 token ids and indices, bool masks.
_GRAPH_DTYPES: Final = ("float32", "int64", "int32", "bool")

_STORAGE_DTYPES: Final = (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64",
)


#: The nx.compile options compiled.py reads (config.OPTIMIZE_FOR's keys, written out so the
#: manifest loads without OpenVINO; tests/test_openvino_api.py keeps them equal).
COMPILE_OPTIONS: Final = (
    CompileOption(name="optimize_for", type="str|none", values=("performance", "accuracy", "latency", "throughput"),
                  doc="OpenVINO's performance goal (None: 'performance')"),
    CompileOption(name="threads", type="int|none", doc="INFERENCE_NUM_THREADS of the compiled model (None: OpenVINO's default)"),
    CompileOption(name="ov_properties", type="mapping|none",
                  doc="OpenVINO compile properties passed as they are, overriding neurenix's (not INFERENCE_PRECISION_HINT: use precision=)"),
)


@hookimpl
def neurenix_manifest() -> Manifest:
    return Manifest(
        name="npu",
        distribution="neurenix-npu-openvino",
        version=_VERSION,
        api=">=1.9,<2",  # 1.7: its host runtime keeps a cache (compile_stateful); 1.8: and stores it (load_stateful); 1.9: compressed tables
        device_types=("npu",),
        band=PriorityBand.NPU,
        priority=50,
        capabilities=Capabilities(
            # Storage is host memory, so every real dtype can live on the device; the NPU computes
            # float16/float32 (compute_dtypes), other dtypes run their ops under the fallback policy.
            dtypes=_STORAGE_DTYPES,
            precisions=("fp32", "fp16", "int8"),
            native_ops=_NATIVE_OPS,
            graph_ops=_GRAPH_OPS,
            graph_dtypes=_GRAPH_DTYPES,
            compiles_models=True,
            # "-int8-activations": on the CPU device (emulation); the Intel NPU refuses them by name.
            quantization=("int8", "int8-weights", "int4-weights", "int8-weights-int8-activations", "int4-weights-int8-activations"),
            dlpack=False,
            extra={"runtime": "OpenVINO", "async_batches": True, "compute_dtypes": ("float32", "float16")},
            host_runtime="openvino",  # OpenVINO's CPU device compiles cpu:0 graphs too (host.py)
            compile_options=COMPILE_OPTIONS,
        ),
        install_hint="pip install neurenix-npu-openvino (OpenVINO) and the Intel NPU driver (intel_vpu, linux-npu-driver)",
        emulation="npu",
        description="Intel NPU through OpenVINO: compiled graphs, int8 through FakeQuantize",
        exports={"neurenix.hardware.npu": "neurenix_npu_openvino.api"},
    )


@hookimpl
def neurenix_probe(context: ProbeContext) -> ProbeResult:
    if context.emulate:
        if not _probe.runtime_installed():
            return ProbeResult.missing(f"NEURENIX_EMULATE=npu needs the OpenVINO runtime: {_probe.missing_runtime_reason()}")
        return ProbeResult.emulating(1, reason="emulated: OpenVINO's CPU device runs the NPU code path (NEURENIX_EMULATE=npu)")
    found = _probe.scan()
    if not found.available:
        return ProbeResult.missing(found.reason)
    # OpenVINO exposes all Intel NPUs of a machine as one "NPU" device.
    return ProbeResult.found(1, device_nodes=list(found.device_nodes), plugin_library=str(found.plugin_library))


@hookimpl
def neurenix_backend(manifest: Manifest, probe: ProbeResult) -> Backend:
    if not probe.available:
        raise BackendUnavailableError(f"npu (plugin npu-openvino) is not available: {probe.reason}")
    from neurenix_npu_openvino.backend import NPUOpenVINOBackend

    return NPUOpenVINOBackend(device_count=probe.device_count, emulated=probe.emulated)


@hookimpl
def neurenix_compile(backend: Backend, graph: Any, options: Any) -> CompiledModel | None:
    from neurenix_npu_openvino.backend import NPUOpenVINOBackend
    from neurenix_npu_openvino.compiled import compile_graph

    if not isinstance(backend, NPUOpenVINOBackend):
        raise TypeError(f"npu-openvino's neurenix_compile got a {type(backend).__name__}, not its own backend")
    return compile_graph(backend, graph, options)


@hookimpl
def neurenix_host_runtime() -> HostRuntime:
    from neurenix_npu_openvino.host import OpenVINOHostRuntime

    return OpenVINOHostRuntime(_GRAPH_DTYPES)


@hookimpl
def neurenix_save_compiled(backend: Backend, model: CompiledModel, directory: Any) -> dict[str, Any]:
    from neurenix_npu_openvino.artifact import save_compiled

    return save_compiled(backend, model, directory)  # type: ignore[arg-type]


@hookimpl
def neurenix_load_compiled(backend: Backend, directory: Any, meta: dict[str, Any], options: Any) -> CompiledModel:
    from neurenix_npu_openvino.artifact import load_compiled

    return load_compiled(backend, directory, meta)  # type: ignore[arg-type]
