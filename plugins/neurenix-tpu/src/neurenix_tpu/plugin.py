"""Hook implementations of neurenix-tpu (entry point ``tpu`` in group ``neurenix.backends``).

Imported by ``import neurenix_core``: nothing heavy here. JAX is imported by the backend
factory and the compile hook, which the core calls only when a ``tpu`` device is used, and by
the host-runtime hook, which the core calls when it compiles a ``cpu:0`` model (XLA:CPU).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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
from neurenix_tpu import __version__
from neurenix_tpu.probe import probe

if TYPE_CHECKING:
    from neurenix_core.contract import Backend, CompiledModel, HostRuntime

#: Precision modes nx.compile accepts for tpu devices (None means "bf16", the TPU default);
#: int8/int16 need the core's quantization plan (quantize=..., calibration=...).
PRECISIONS: tuple[str, ...] = ("bf16", "fp32", "int8", "int16")

#: Ops beyond the portable opset that the lowering takes, declared by name: ONNX Conv /
#: ConvTranspose over 1-3 spatial axes with the weight and bias as inputs (the convolutions of
#: training graphs, whose weights are values), and the ops of the transformers sweep that cut
#: models into cpu:0 round trips (issue #41): cumsum, mod, scatter_elements, scatter_nd,
#: softplus, topk, trilu.
EXTRA_GRAPH_OPS: tuple[str, ...] = (
    "conv", "conv_transpose", "cumsum", "mod", "scatter_elements", "scatter_nd", "softplus", "topk", "trilu",
)

#: The opset ops ``neurenix_compile`` lowers (``neurenix_tpu.optable.LOWERINGS``; a test keeps the
#: two equal): the whole portable opset and EXTRA_GRAPH_OPS, so nx.compile hands imported models
#: over without decomposing or partitioning. The core's names-only tuple: importing the opset or
#: JAX at plugin import is too heavy.
GRAPH_OPS: tuple[str, ...] = tuple(sorted(OPSET_NAMES + EXTRA_GRAPH_OPS))

#: Value dtypes the compiled program takes: float32 activations (bf16 or fp32 inside, by
#: precision), int32/int64 token ids and indices (int64 stays int64: the backend enables JAX's
#: x64 mode), bool masks.
GRAPH_DTYPES: tuple[str, ...] = ("bool", "float32", "int32", "int64")


#: The nx.compile options compiled.py reads.
COMPILE_OPTIONS = (
    CompileOption(name="batch_buckets", type="sequence|none",
                  doc="batch sizes compiled once each, a batch padded to the next (the plugin's own; buckets= is the core's)"),
    CompileOption(name="data_parallel", type="bool|int|none",
                  doc="shard each batch over the local chips: True for all from the compiled index, or a count"),
)


@hookimpl
def neurenix_manifest() -> Manifest:
    return Manifest(
        name="tpu",
        distribution="neurenix-tpu",
        version=__version__,
        api=">=1.4,<2",
        device_types=("tpu",),
        band=PriorityBand.ACCELERATOR,
        priority=50,
        capabilities=Capabilities(
            dtypes=("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                    "float16", "bfloat16", "float32", "float64", "complex64", "complex128"),
            precisions=PRECISIONS,
            native_ops=("*",),
            compiles_models=True,
            graph_ops=GRAPH_OPS,
            graph_dtypes=GRAPH_DTYPES,
            quantization=("int8", "int16"),
            dlpack=True,
            extra={"data_parallel": True, "batch_buckets": True, "runtime": "JAX/PJRT"},
            host_runtime="xla",  # XLA:CPU compiles cpu:0 graphs too, on JAX's CPU device (host.py)
            host_runtime_start_s=1.2,  # importing JAX: 1.2 s on a 2-vCPU Xeon (Python 3.11)
            compile_options=COMPILE_OPTIONS,
        ),
        install_hint="pip install 'neurenix-tpu[tpu]' on a Cloud TPU VM (JAX with libtpu)",
        emulation="tpu",
        description="Cloud TPU through JAX/PJRT (whole models fused into one XLA program)",
        exports={"neurenix.hardware.tpu": "neurenix_tpu.api"},
    )


@hookimpl
def neurenix_probe(context: ProbeContext) -> ProbeResult:
    return probe(context)


@hookimpl
def neurenix_backend(manifest: Manifest, probe: ProbeResult) -> Backend:
    from neurenix_tpu.backend import JaxTPUBackend

    return JaxTPUBackend(emulated=probe.emulated)


@hookimpl
def neurenix_compile(backend: Backend, graph: Any, options: Any) -> CompiledModel | None:
    from neurenix_tpu.compiled import compile_graph

    return compile_graph(backend, graph, options)


@hookimpl
def neurenix_host_runtime() -> HostRuntime:
    from neurenix_tpu.host import XLAHostRuntime

    return XLAHostRuntime(GRAPH_DTYPES)


@hookimpl
def neurenix_save_compiled(backend: Backend, model: CompiledModel, directory: Any) -> dict[str, Any]:
    from neurenix_tpu.artifact import save_compiled

    return save_compiled(backend, model, directory)  # type: ignore[arg-type]


@hookimpl
def neurenix_load_compiled(backend: Backend, directory: Any, meta: dict[str, Any], options: Any) -> CompiledModel:
    from neurenix_tpu.artifact import load_compiled

    return load_compiled(backend, directory, meta, options)  # type: ignore[arg-type]
