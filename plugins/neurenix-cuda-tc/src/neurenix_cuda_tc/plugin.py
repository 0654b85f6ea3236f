"""Hook implementations of neurenix-cuda-tc (imports nothing heavy: no torch here)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from neurenix_core.contract import OPSET_NAMES, Capabilities, Manifest, PriorityBand, ProbeContext, ProbeResult, hookimpl
from neurenix_cuda_tc import __version__
from neurenix_cuda_tc import probe as _probe

if TYPE_CHECKING:
    from neurenix_core.contract import Backend, CompiledModel, HostRuntime

NATIVE_OPS = (
    "matmul", "add", "multiply", "nn.linear", "nn.conv2d", "nn.relu", "nn.gelu", "nn.softmax",
    "nn.max_pool2d", "nn.avg_pool2d", "nn.adaptive_avg_pool2d", "nn.batch_norm", "nn.layer_norm",
    "nn.sigmoid", "nn.tanh",
)

#: Ops beyond the portable opset that the lowering takes, declared by name: ONNX Conv /
#: ConvTranspose over 1-3 spatial axes with the weight and bias as inputs (the convolutions of
#: training graphs, whose weights are values), F.conv*d / F.conv_transpose*d.
EXTRA_GRAPH_OPS: tuple[str, ...] = ("conv", "conv_transpose")

#: The op-level graph ops ``neurenix_compile`` lowers (``lowering.LOWERED_OPS``: the whole portable
#: opset, composites included, so nx.compile hands the graph over undecomposed: attention stays one
#: F.scaled_dot_product_attention, linear/conv stay nn.Linear/nn.Conv2d for optimize_model and
#: align_model; and EXTRA_GRAPH_OPS). The core's names-only tuple, so the manifest loads without
#: torch or the opset module; a test keeps it equal to LOWERED_OPS.
GRAPH_OPS: tuple[str, ...] = tuple(sorted(OPSET_NAMES + EXTRA_GRAPH_OPS))
#: Value dtypes of those graphs: float activations, int64 token ids / indices, bool masks.
GRAPH_DTYPES = ("float32", "int64", "bool")


@hookimpl
def neurenix_manifest() -> Manifest:
    return Manifest(
        name="cuda",
        distribution="neurenix-cuda-tc",
        version=__version__,
        api=">=1.4,<2",
        device_types=("cuda",),
        band=PriorityBand.ACCELERATOR,
        priority=60,
        capabilities=Capabilities(
            dtypes=("float32", "float16", "bfloat16", "float64", "complex64", "complex128", "int8", "int16", "int32", "int64", "uint8", "bool"),
            precisions=("fp32", "tf32", "fp16", "bf16", "mixed"),
            native_ops=NATIVE_OPS,
            compiles_models=True,
            graph_ops=GRAPH_OPS,
            graph_dtypes=GRAPH_DTYPES,
            quantization=(),
            dlpack=True,
            extra={"tensor_cores": "compute capability >= 7.0", "runtime": "PyTorch"},
            host_runtime="torch",  # PyTorch's CPU kernels compile cpu:0 graphs too, in float32 (host.py)
            host_runtime_start_s=1.5,  # importing torch: 1.3-1.7 s on a 2-vCPU Xeon (the CPU wheel)
            compile_options=(),  # its compile hook reads no option: precision= says everything
        ),
        install_hint="pip install neurenix-cuda-tc -c constraints.txt (needs an NVIDIA driver; NEURENIX_EMULATE=cuda runs on the CPU)",
        emulation="cuda",
        native_probe=True,
        description="NVIDIA GPUs through PyTorch, with Tensor Core precision, alignment and profiling",
        exports={"neurenix.hardware": "neurenix_cuda_tc.api", "neurenix.hardware.tensor_cores": "neurenix_cuda_tc.api"},
    )


@hookimpl
def neurenix_probe(context: ProbeContext) -> ProbeResult:
    return _probe.probe(context)


@hookimpl
def neurenix_native_probe(context: ProbeContext) -> ProbeResult:
    return _probe.native_probe(context)


@hookimpl
def neurenix_backend(manifest: Manifest, probe: ProbeResult) -> Backend:
    from neurenix_cuda_tc.backend import CudaBackend

    return CudaBackend.create(probe)


@hookimpl
def neurenix_compile(backend: Backend, graph: Any, options: Any) -> CompiledModel | None:
    from neurenix_cuda_tc.compiled import compile_graph

    return compile_graph(backend, graph, options)


@hookimpl
def neurenix_host_runtime() -> HostRuntime:
    from neurenix_cuda_tc.host import TorchHostRuntime

    return TorchHostRuntime(GRAPH_DTYPES)


@hookimpl
def neurenix_save_compiled(backend: Backend, model: CompiledModel, directory: Any) -> dict[str, Any]:
    from neurenix_cuda_tc.artifact import save_compiled

    return save_compiled(backend, model, directory)


@hookimpl
def neurenix_load_compiled(backend: Backend, directory: Any, meta: dict[str, Any], options: Any) -> CompiledModel:
    from neurenix_cuda_tc.artifact import load_compiled

    return load_compiled(backend, directory, meta, options)
