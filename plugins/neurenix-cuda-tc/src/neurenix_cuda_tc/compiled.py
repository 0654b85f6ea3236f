"""Compiled models on the cuda backend: a lowered graph (``lowering.lower_graph``) placed on one
device and run under one precision; ``compile_graph`` is the ``neurenix_compile`` hook's body."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from neurenix_core.errors import CompilationError
from neurenix_core.plugins.backend import CompiledModel

from neurenix_cuda_tc.capability import parse_precision
from neurenix_cuda_tc.lowering import lower_graph

if TYPE_CHECKING:
    import torch

    from neurenix_core.graph.ir import Graph

__all__ = ["TorchCompiledModel", "compile_graph"]


_TORCH_DTYPES = {"fp16": "float16", "bf16": "bfloat16", "mixed": "float32", "fp32": "float32", "tf32": "float32"}


class TorchCompiledModel(CompiledModel):
    """A lowered graph on one cuda device (or the CPU when emulated), run under one precision."""

    def __init__(self, module: torch.nn.Module, *, device: Any, precision: str, emulated: bool, switches: Any) -> None:
        import torch

        self.precision = precision
        self.dtype = getattr(torch, _TORCH_DTYPES[precision])
        self.module = module.to(device=device, dtype=self.dtype).eval()
        self.device = device
        self.emulated = emulated
        self._switches = switches
        where = "emulated on the host CPU (PyTorch CPU)" if emulated else f"on {device}"
        self.summary = f"PyTorch {torch.__version__} torch.nn.Module, {precision} ({self.dtype}), {where}"

    def _run(self, *inputs: Any) -> Any:
        import torch

        first = inputs[0]
        xs = [x.to(device=self.device, dtype=self.dtype) for x in inputs]
        with torch.inference_mode(), self._precision_context():
            out = self.module(*xs)
        back = (lambda t: t.to(first.dtype)) if first.is_floating_point() else (lambda t: t)
        return tuple(back(o) for o in out) if isinstance(out, tuple) else back(out)

    def _precision_context(self) -> Any:
        import contextlib

        import torch

        if self.precision == "mixed":
            return torch.autocast(device_type=self.device.type, dtype=torch.float16)
        if self.device.type == "cuda":
            # fp32 means fp32: cuDNN would otherwise use TF32 for convolutions by default.
            return torch.backends.cudnn.flags(enabled=True, allow_tf32=self.precision == "tf32")
        return contextlib.nullcontext()


def compile_graph(backend: Any, graph: Graph, options: Any) -> TorchCompiledModel:
    """``neurenix_compile``: lower ``graph`` and place it on ``options.device`` of ``backend``."""
    from neurenix_cuda_tc.capability import check_precision

    requested = options.precision or "fp32"
    if requested in ("int8", "int16"):
        if options.quantization is None:
            raise CompilationError(f"cuda-tc: precision {requested} needs a QuantizationPlan (pass calibration= to nx.compile)")
        precision = "fp32"
    else:
        precision = parse_precision(requested)
    index = getattr(options.device, "index", 0)
    check_precision(precision, backend.compute_capability(index), f"cuda:{index}")
    module = lower_graph(graph, options.quantization)
    model = TorchCompiledModel(module, device=backend._native_device(index), precision=precision, emulated=backend.emulated,
                               switches=backend.switches)
    if requested in ("int8", "int16"):
        model.summary += f"; {requested} fake-quantized from the core's QuantizationPlan ({options.quantization.method})"
    return model
