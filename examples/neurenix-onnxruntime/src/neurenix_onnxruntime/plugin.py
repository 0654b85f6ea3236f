"""Hook implementations of the neurenix-onnxruntime backend (entry point ``onnxruntime``).

Imported at ``import neurenix_core``: it imports nothing heavy. ONNX Runtime and onnx are
imported by ``backend.py`` and ``lowering.py`` when the backend factory or the compile hook runs.

Ranking: the manifest is static (it is read before the probe), so the band must be right for
every machine the wheel lands on. ``onnxruntime`` from PyPI carries only the CPU provider, which
is a CPU: band ``CPU`` at priority 40, below the built-in NumPy ``cpu`` backend (50). ``ort:0``
is therefore never chosen automatically; users select it with ``NEURENIX_DEVICE=ort:0``,
``nx.device("ort:0")`` or ``NEURENIX_BACKENDS=onnxruntime,cpu`` (the allow list outranks bands).
See README.md, "Ranking".
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
from neurenix_onnxruntime import __version__

if TYPE_CHECKING:
    from neurenix_core.contract import Backend, CompiledModel, HostRuntime

__all__ = ["GRAPH_DTYPES", "GRAPH_OPS", "NATIVE_OPS"]

#: Ops the backend runs through ONNX Runtime sessions (everything else: fallback policy).
NATIVE_OPS: tuple[str, ...] = (
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "pow",
    "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
    "logical_and", "logical_or", "logical_xor", "logical_not",
    "abs", "negative", "exp", "log", "sqrt", "sin", "cos", "tanh", "floor", "ceil", "reciprocal",
    "matmul", "permute_dims", "reshape", "sum", "mean", "max", "min", "where",
    "nn.linear", "nn.conv2d", "nn.relu", "nn.sigmoid", "nn.tanh", "nn.softmax", "nn.gelu",
    "nn.max_pool2d", "nn.avg_pool2d",
)

#: The op-level graph ops its ``neurenix_compile`` exports to ONNX (``onnx_export.GRAPH_OPS``: the
#: whole opset; the core's names-only tuple, so the manifest loads without onnx; a test keeps the two
#: equal).
GRAPH_OPS: tuple[str, ...] = OPSET_NAMES
#: Value dtypes of those graphs: float activations, int64 token ids / indices, bool masks.
GRAPH_DTYPES: tuple[str, ...] = ("float32", "int64", "bool")


#: What ``compiled.py`` reads from ``CompileOptions.extra``. Declared, the core checks names and
#: types at ``nx.compile`` and the compile hook sees nothing else (docs/vendors.md).
COMPILE_OPTIONS: tuple[CompileOption, ...] = (
    CompileOption(name="provider", type="str|none", doc="an execution provider by name ('cuda', 'CUDAExecutionProvider'); refused when this ONNX Runtime lacks it"),
    CompileOption(name="threads", type="int", doc="ONNX Runtime intra-op threads (default: NEURENIX_ORT_THREADS, else ORT's)"),
)


@hookimpl
def neurenix_manifest() -> Manifest:
    return Manifest(
        name="ort",
        distribution="neurenix-onnxruntime",
        version=__version__,
        api=">=1.4,<2",
        device_types=("ort",),
        band=PriorityBand.CPU,
        priority=40,
        capabilities=Capabilities(
            dtypes=("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32", "float64"),
            precisions=("fp32", "fp16", "int8"),
            native_ops=NATIVE_OPS,
            compiles_models=True,
            graph_ops=GRAPH_OPS,
            graph_dtypes=GRAPH_DTYPES,
            quantization=("int8",),
            dlpack=False,
            extra={"runtime": "ONNX Runtime", "devices": "one per execution provider present, best first"},
            host_runtime="onnxruntime",  # its CPU provider also compiles cpu:0 graphs (host.py)
            compile_options=COMPILE_OPTIONS,  # API 1.4: the core refuses other names and wrong types
        ),
        install_hint="pip install neurenix-onnxruntime (pulls onnxruntime and onnx from PyPI)",
        emulation=None,
        description="ONNX Runtime execution providers (CPU here); third-party example backend",
        exports={"neurenix.hardware.ort": "neurenix_onnxruntime.api"},
    )


@hookimpl
def neurenix_probe(context: ProbeContext) -> ProbeResult:
    from neurenix_onnxruntime.probe import probe

    return probe(context)


@hookimpl
def neurenix_backend(manifest: Manifest, probe: ProbeResult) -> Backend:
    from neurenix_onnxruntime.backend import ORTBackend

    return ORTBackend(providers=list(probe.details.get("providers", ["CPUExecutionProvider"])))


@hookimpl
def neurenix_compile(backend: Backend, graph: Any, options: Any) -> CompiledModel | None:
    from neurenix_onnxruntime.compiled import compile_graph

    return compile_graph(backend, graph, options)


@hookimpl
def neurenix_host_runtime() -> HostRuntime:
    from neurenix_onnxruntime.host import ORTHostRuntime

    return ORTHostRuntime(GRAPH_OPS, GRAPH_DTYPES)
