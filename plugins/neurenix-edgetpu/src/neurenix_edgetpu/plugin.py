"""Hook implementations of neurenix-edgetpu. Imports nothing heavy: LiteRT loads in the factory,
and in the host-runtime hook, which the core calls when it compiles a ``cpu:0`` model (host.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from neurenix_core.contract import (
    DTYPE_NAMES,
    Capabilities,
    CompileOption,
    Manifest,
    PriorityBand,
    ProbeContext,
    ProbeResult,
    hookimpl,
)
from neurenix_edgetpu import __version__, probe

if TYPE_CHECKING:
    from neurenix_core.contract import Backend, CompiledModel, HostRuntime

__all__ = [
    "neurenix_backend",
    "neurenix_compile",
    "neurenix_host_runtime",
    "neurenix_load_compiled",
    "neurenix_manifest",
    "neurenix_native_probe",
    "neurenix_probe",
    "neurenix_save_compiled",
]

#: Ops the backend runs through cached single-op TFLite models (see backend.py).
NATIVE_OPS = (
    "add", "subtract", "multiply", "maximum", "minimum", "divide", "matmul", "concat",
    "nn.linear", "nn.relu", "nn.softmax",
)
#: Op-level graph nodes the TFLite writer lowers (``lowering.py``, ``lower_tensor.py``). Only ops
#: that become TFLite builtins are declared; the core decomposes composites not listed here
#: (layer_norm, multihead_attention, global pools, embedding, conv1d) and places every other op
#: (div, exp, erf, cast, comparisons and isnan, where, expand, gather_elements: no TFLite builtin
#: the Edge TPU maps) on cpu:0 and names it in the placement.
GRAPH_OPS = (
    # layers: CONV_2D / DEPTHWISE_CONV_2D, TRANSPOSE_CONV (fp32), FULLY_CONNECTED, pools, MEAN
    "conv2d", "conv_transpose2d", "linear", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "batch_norm2d", "dropout", "identity", "constant",
    # elementwise and activations: ADD, SUB, MUL, RELU, LOGISTIC, TANH, HARD_SWISH, GELU, RSQRT, SOFTMAX,
    # MAXIMUM, MINIMUM, RELU6 / RELU_N1_TO_1 (clip)
    "add", "sub", "mul", "maximum", "minimum", "relu", "clip", "sigmoid", "tanh", "hardswish", "hardsigmoid", "silu", "gelu",
    "rsqrt", "softmax",
    # reductions: MEAN, SUM, REDUCE_MAX, REDUCE_MIN
    "reduce_mean", "reduce_sum", "reduce_max", "reduce_min",
    # data movement: RESHAPE, TRANSPOSE, CONCATENATION, STRIDED_SLICE, GATHER, GATHER_ND, PAD
    "flatten", "reshape", "squeeze", "unsqueeze", "transpose", "concat", "slice", "split", "gather", "gather_nd", "pad",
    # matmul and attention: FULLY_CONNECTED / BATCH_MATMUL, SOFTMAX
    "matmul", "scaled_dot_product_attention",
)
#: float32 activations (int8 inside the model from a QuantizationPlan); integer token ids and
#: GATHER indices; bool attention masks (SELECT_V2).
GRAPH_DTYPES = ("float32", "int32", "int64", "bool")
_NO_HARDWARE = (
    "no Coral Edge TPU found: no /dev/apex_* node (PCIe/M.2: install the gasket-dkms driver) and no USB "
    "device 1a6e:089a or 18d1:9302 (plug in the USB Accelerator); to run the LiteRT stack on the host CPU "
    "set NEURENIX_EMULATE=edgetpu"
)


#: The nx.compile options compiled.py reads; the values are lowering.IO_KINDS, runtime.KERNELS and
#: lower_s2d.STEMS, written out so the manifest loads without LiteRT (a test keeps them equal).
COMPILE_OPTIONS = (
    CompileOption(name="io", type="str", values=("float", "int8"), doc="the model's inputs and outputs: float32, or int8 as the Edge TPU compiler maps whole"),
    CompileOption(name="kernels", type="str|none", values=("xnnpack", "optimized", "reference"),
                  doc="LiteRT's CPU kernels for what the Edge TPU does not run (None: xnnpack)"),
    CompileOption(name="num_threads", type="int|none", doc="LiteRT interpreter threads (None: LiteRT's default)"),
    CompileOption(name="stem", type="str", values=("auto", "space_to_depth", "plain"),
                  doc="rewrite an int8 model's first convolution as space-to-depth ('auto': where it pays on this CPU)"),
)


@hookimpl
def neurenix_manifest() -> Manifest:
    return Manifest(
        name="edgetpu",
        distribution="neurenix-edgetpu",
        version=__version__,
        api=">=1.4,<2",
        device_types=("edgetpu",),
        band=PriorityBand.EDGE,
        priority=50,
        capabilities=Capabilities(
            # Storage is host NumPy, so every neurenix dtype can live on the device; the ops in
            # native_ops run float32 (eager) and int8/float32 (compiled models) through LiteRT.
            dtypes=DTYPE_NAMES,
            precisions=("int8", "fp32"),
            native_ops=NATIVE_OPS,
            compiles_models=True,
            graph_ops=GRAPH_OPS,
            graph_dtypes=GRAPH_DTYPES,
            quantization=("int8",),
            # float_layers: each float layer of a mixed-precision int8 plan runs on cpu:0 (the
            # writer refuses it by name), so the core mixes only plans it would refuse (graph/quantization/mixed.py)
            extra={"model_format": "tflite", "runtime": "LiteRT", "delegate": "libedgetpu.so.1", "float_layers": "host"},
            host_runtime="litert",  # LiteRT with XNNPACK compiles cpu:0 graphs too, fp32 (host.py)
            compile_options=COMPILE_OPTIONS,
        ),
        install_hint="pip install neurenix-edgetpu; apt-get install libedgetpu1-std (Coral runtime)",
        emulation="edgetpu",
        native_probe=True,
        description="Google Coral Edge TPU through LiteRT and libedgetpu; int8 TFLite models",
        exports={"neurenix.hardware.edgetpu": "neurenix_edgetpu.api"},
    )


@hookimpl
def neurenix_probe(context: ProbeContext) -> ProbeResult:
    runtime = probe.runtime_module()
    if context.emulate:
        if runtime is None:
            return ProbeResult.missing("NEURENIX_EMULATE=edgetpu needs LiteRT: pip install ai-edge-litert")
        count = probe.emulated_device_count()
        return ProbeResult.emulating(count, runtime=runtime, devices=[f"emulated:{i}" for i in range(count)])
    found = probe.scan()
    if not found.device_names:
        return ProbeResult.missing(_NO_HARDWARE)
    if found.library is None:
        return ProbeResult.missing(
            f"Coral device(s) {', '.join(found.device_names)} present but {probe.LIBRARY} is not installed: "
            "apt-get install libedgetpu1-std (https://coral.ai/software/#debian-packages)"
        )
    if runtime is None:
        return ProbeResult.missing("Coral device present but LiteRT is not installed: pip install ai-edge-litert")
    return ProbeResult.native(f"{probe.LIBRARY} found at {found.library}; asking it for its devices")


@hookimpl
def neurenix_native_probe(context: ProbeContext) -> ProbeResult:
    found = probe.scan()
    if found.library is None:
        return ProbeResult.missing(f"{probe.LIBRARY} disappeared between probes: apt-get install libedgetpu1-std")
    devices = probe.native_list_devices(found.library)
    if not devices:
        return ProbeResult.missing(
            f"{probe.LIBRARY} loads but lists no Edge TPU: check the USB cable / the apex driver "
            "(lsmod | grep apex) and that your user is in the plugdev/apex group"
        )
    return ProbeResult.found(len(devices), devices=[name for name, _ in devices], paths=[p for _, p in devices], library=found.library)


@hookimpl
def neurenix_backend(manifest: Manifest, probe: ProbeResult) -> Backend:
    from neurenix_edgetpu.backend import LiteRTBackend

    return LiteRTBackend(probe)


@hookimpl
def neurenix_compile(backend: Backend, graph: Any, options: Any) -> CompiledModel | None:
    from neurenix_edgetpu.compiled import compile_graph

    return compile_graph(backend, graph, options)


@hookimpl
def neurenix_host_runtime() -> HostRuntime:
    from neurenix_edgetpu.host import LiteRTHostRuntime

    return LiteRTHostRuntime(GRAPH_OPS, GRAPH_DTYPES)  # the fp32 writer lowers every declared op


@hookimpl
def neurenix_save_compiled(backend: Backend, model: CompiledModel, directory: Any) -> dict[str, Any]:
    from neurenix_edgetpu.artifact import save_compiled

    return save_compiled(backend, model, directory)  # type: ignore[arg-type]


@hookimpl
def neurenix_load_compiled(backend: Backend, directory: Any, meta: dict[str, Any], options: Any) -> CompiledModel:
    from neurenix_edgetpu.artifact import load_compiled

    return load_compiled(backend, directory, meta, options)  # type: ignore[arg-type]
