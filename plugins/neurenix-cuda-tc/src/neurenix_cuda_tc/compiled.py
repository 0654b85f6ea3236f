"""Compiled models on the cuda backend: a lowered graph (``lowering.lower_graph``) placed on one
device and run under one precision; ``compile_graph`` is the ``neurenix_compile`` hook's body."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from neurenix_core.contract import CompiledModel
from neurenix_core.errors import CompilationError
from neurenix_cuda_tc.capability import parse_precision
from neurenix_cuda_tc.lowering import lower_graph

if TYPE_CHECKING:
    import torch

    from neurenix_core.contract import Graph

__all__ = ["TorchCompiledModel", "compile_graph"]


_TORCH_DTYPES = {"fp16": "float16", "bf16": "bfloat16", "mixed": "float32", "fp32": "float32", "tf32": "float32"}


class TorchCompiledModel(CompiledModel):
    """A lowered graph on one cuda device (or the CPU when emulated), run under one precision."""

    def __init__(self, module: torch.nn.Module, *, device: Any, precision: str, emulated: bool, switches: Any) -> None:
        import torch

        self.precision = precision
        self.dtype = getattr(torch, _TORCH_DTYPES[precision])
        self.module = module.to(device=device, dtype=self.dtype).eval()
        # A graph with static shapes traces into straight-line code (torch.fx): the node loop's
        # dictionary traffic is gone (ViT block: about 1.5x faster per call on the CPU). Traced
        # after .to(): the GraphModule shares the layers but copies buffer references.
        self._runner = torch.fx.symbolic_trace(self.module) if getattr(self.module, "static", False) else self.module
        self.device = device
        self.emulated = emulated
        self._switches = switches
        where = "emulated on the host CPU (PyTorch CPU)" if emulated else f"on {device}"
        kind = "torch.fx GraphModule" if self._runner is not self.module else "torch.nn.Module"
        self.summary = f"PyTorch {torch.__version__} {kind}, {precision} ({self.dtype}), {where}"

    def _run(self, *inputs: Any) -> Any:
        import torch

        # Float inputs run in the model's precision; integer token ids and bool masks keep their dtype.
        xs = [x.to(device=self.device, dtype=self.dtype) if x.is_floating_point() else x.to(device=self.device) for x in inputs]
        with torch.inference_mode(), self._precision_context():
            out = self._runner(*xs)
        # Float results come back as float32 (the model boundary), whatever precision ran inside.
        back = lambda t: t.to(torch.float32) if t.is_floating_point() else t
        return tuple(back(o) for o in out) if isinstance(out, tuple) else back(out)

    def _precision_context(self) -> Any:
        import torch

        if self.precision == "mixed":
            return torch.autocast(device_type=self.device.type, dtype=torch.float16)
        if self.device.type == "cuda":
            # fp32 means fp32: cuDNN would otherwise use TF32 for convolutions by default, and a
            # user's torch.backends.cuda.matmul.allow_tf32 = True would reach the matmuls.
            return _tf32(self.precision == "tf32")
        return contextlib.nullcontext()


@contextlib.contextmanager
def _tf32(allow: bool) -> Iterator[None]:
    """TF32 on or off for matmuls and convolutions during one run; the global flags are put back."""
    import torch

    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = allow
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def compile_graph(backend: Any, graph: Graph, options: Any) -> TorchCompiledModel:
    """``neurenix_compile``: lower ``graph`` and place it on ``options.device`` of ``backend``."""
    from neurenix_cuda_tc.capability import check_precision

    requested = options.precision or "fp32"
    if requested in ("int8", "int16"):
        if options.quantization is None:
            raise CompilationError(f"plugin cuda: precision {requested} needs a QuantizationPlan (pass calibration= to nx.compile)")
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
    model.input_specs = tuple((tuple(s.shape), s.dtype) for s in graph.inputs)  # what compiled.save exports for (artifact.py)
    return model
