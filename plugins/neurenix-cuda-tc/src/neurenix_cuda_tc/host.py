"""PyTorch CPU as a host runtime for ``cpu:0`` (``runtime="torch"``, API 1.2).

The cuda device's lowering (``lowering.lower_graph``: the whole opset as a ``torch.nn.Module``
of real layers and torch functions), kept on the CPU in float32, traced into straight-line code
with ``torch.fx`` (static shapes, as ``compiled.TorchCompiledModel`` does), run under
``torch.inference_mode()``. This is PyTorch's CPU kernels (oneDNN, MKL/OpenBLAS) doing what they
are for, not CUDA emulation: the device stays ``cpu:0``.

* Precision: float32 weights and activations, computed in float32. PyTorch lets a process run
  float32 matmuls/convolutions through oneDNN in bf16 or tf32 (``torch.backends.mkldnn.*.
  fp32_precision``, set by ``torch.set_float32_matmul_precision("medium")``): the runtime refuses
  to compile while such a setting is in force, rather than return results 1e-2 off.
* Weights are the graph's own float32 arrays (``lower_graph(share_weights=True)``): every shape
  compiled from one graph, and the model the graph was imported from, share one copy.
* Inputs arrive by ``torch.from_numpy`` (no copy), results leave by ``.numpy()`` (no copy; a
  result that is a model constant is copied, so a caller writing into it cannot change the model).
* Threads: PyTorch's intra-op pool is process-wide (``torch.set_num_threads``). ``threads=`` is
  not applied: the core compiles every candidate runtime while choosing, so changing the pool
  here would change the user's PyTorch for a runtime that may not even be chosen, and switching it
  around each call would rebuild the OpenMP pool per call. ``HostModel.threads`` reads back
  ``torch.get_num_threads()``; the summary says both.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

import numpy as np

from neurenix_core.contract import Graph, HostModel, HostOptions, HostRuntime
from neurenix_core.errors import BackendUnavailableError, CompilationError

__all__ = ["TorchHostModel", "TorchHostRuntime"]

_WHO: Final = "host runtime torch (plugin cuda)"


class TorchHostModel(HostModel):
    """A lowered graph on PyTorch's CPU kernels, float32, eval mode, no autograd."""

    def __init__(self, torch: Any, runner: Any, state: frozenset[int], summary: str) -> None:
        self._torch = torch
        self._runner = runner
        self._state = state  # storages of the model's weights and constants (see __call__)
        self.threads = int(torch.get_num_threads())
        self.summary = summary

    def __call__(self, *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
        torch = self._torch
        # from_numpy shares the array (no copy). A read-only array (a NumPy view of another
        # runtime's buffer) is copied first: torch would warn that it cannot mark it read-only.
        xs = [torch.from_numpy(x if x.flags.writeable else x.copy()) for x in inputs]
        with torch.inference_mode():
            out = self._runner(*xs)
        outs = out if isinstance(out, tuple) else (out,)
        return tuple(self._host(o) for o in outs)

    def _host(self, t: Any) -> np.ndarray:
        # .numpy() shares the tensor's memory: fine for a fresh result, not for a graph output that
        # is one of the model's own constants, which a caller could then overwrite.
        if t.untyped_storage().data_ptr() in self._state:
            return t.numpy().copy()
        return t.numpy()


class TorchHostRuntime(HostRuntime):
    """PyTorch's CPU kernels, imported once per process."""

    name = "torch"

    def __init__(self, graph_dtypes: Iterable[str]) -> None:
        # The dtypes come from the manifest (plugin.py hands them over): importing plugin.py here
        # would make the two modules import each other.
        try:
            import torch
        except ImportError as exc:
            raise BackendUnavailableError(f"{_WHO}: PyTorch is not importable ({exc}); pip install torch -c constraints.txt") from exc
        from neurenix_cuda_tc.lowering import LOWERED_OPS

        self.torch = torch
        self.version = str(torch.__version__)
        self.graph_ops = frozenset(LOWERED_OPS)
        self.graph_dtypes = frozenset(graph_dtypes)

    def compile(self, graph: Graph, options: HostOptions) -> TorchHostModel:
        from neurenix_cuda_tc.lowering import lower_graph

        torch = self.torch
        if options.precision != "fp32":
            raise CompilationError(f"{_WHO} compiles cpu:0 graphs in fp32, not {options.precision!r}")
        _check_fp32(torch)
        module = lower_graph(graph, share_weights=True).to(device="cpu", dtype=torch.float32).eval()  # raises UnsupportedOperationError naming the node
        runner = _traced(torch, module)
        state = frozenset(t.untyped_storage().data_ptr() for t in (*module.parameters(), *module.buffers()))
        kind = "torch.fx GraphModule" if runner is not module else "torch.nn.Module"
        summary = f"PyTorch {torch.__version__} CPU on cpu:0, fp32, {kind}, {torch.get_num_threads()} thread(s) (process-wide){_threads_note(options.threads)}"
        return TorchHostModel(torch, runner, state, summary)


#: Where PyTorch (2.9 and later) lets oneDNN run float32 matmuls/convolutions in bf16 or tf32;
#: "none" inherits from the level above, "ieee" is float32. ``set_float32_matmul_precision("medium")``
#: sets the matmul one to bf16.
_FP32_SWITCHES: Final = ("backends", "backends.mkldnn", "backends.mkldnn.matmul", "backends.mkldnn.conv")


def _check_fp32(torch: Any) -> None:
    """Refuse while a process-wide setting lets PyTorch's CPU kernels compute float32 in less."""
    reduced = []
    for path in _FP32_SWITCHES:
        obj: Any = torch
        for part in path.split("."):
            obj = getattr(obj, part, None)
        value = getattr(obj, "fp32_precision", "none")  # absent in older PyTorch: float32 only
        if value not in ("none", "ieee"):
            reduced.append(f"torch.{path}.fp32_precision={value!r}")
    if reduced:
        raise CompilationError(
            f"{_WHO}: {', '.join(reduced)} is in force in this process, so PyTorch would compute float32 matmuls or convolutions in "
            "lower precision; cpu:0 models are fp32: set it back to 'ieee', or pass runtime='auto' to use another runtime"
        )


def _traced(torch: Any, module: Any) -> Any:
    """Straight-line code (torch.fx) for a graph with static shapes: the node loop's dictionary
    traffic is gone (the cuda path does the same: ``compiled.TorchCompiledModel``)."""
    return torch.fx.symbolic_trace(module) if getattr(module, "static", False) else module


def _threads_note(threads: int | None) -> str:
    if threads is None:
        return ""
    return f"; threads={threads} not applied: PyTorch's pool is process-wide (torch.set_num_threads)"
