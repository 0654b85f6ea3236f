"""Graphs captured while autograd records: forward and backward compiled by neurenix.

Where dynamo captures a graph with gradients wanted (grad mode on, a parameter or input that
requires grad) on a device whose backend trains (cpu, cuda, tpu: ``Backend.trains``), PyTorch's
AOTAutograd splits it into a forward graph (which also returns what the backward needs) and a
backward graph, both in core ATen (``core_aten_decompositions``). Each is imported as it is
(``import_fx``: the parameters are inputs, not frozen, so ``optimizer.step()`` needs no
recompilation) and compiled with ``nx.compile`` for the device; PyTorch's autograd calls them
and the gradients reach the torch parameters as in eager. A graph with an op outside the
mapping runs in PyTorch, as an inference graph does (``fall_back``).

On a device that cannot train (npu, edgetpu) the backend compiles the inference graph instead,
and a backward through its outputs raises NotDifferentiableError naming the remedy (piece.py).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from neurenix_core.errors import UnsupportedOperationError
from neurenix_core.torch_compile.options import TorchCompileOptions
from neurenix_core.torch_compile.piece import count_ops, fall_back, policy, to_numpy, to_torch

__all__ = ["AtenPiece", "train_backend", "wants_grad"]

_numbers = itertools.count(1)


def wants_grad(example_inputs: list[Any]) -> bool:
    """Whether dynamo captured the graph for autograd (grad mode on, an input that requires grad)."""
    import torch

    return torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs)


class AtenPiece:
    """A forward or backward ATen graph compiled by neurenix; AOTAutograd calls it with a list."""

    def __init__(self, gm: Any, kind: str, options: TorchCompileOptions) -> None:
        self.gm, self.kind, self.options = gm, kind, options
        self.number = next(_numbers)
        self.torch_ops = count_ops(gm)
        self.compiled: Any = None
        self.template: list[tuple[str, Any]] = []
        self.in_torch: str | None = None
        # AOTAutograd's calling convention: one list of arguments, which the callee may free. An
        # instance attribute, so that dynamo's wrapper around the backward copies it.
        self._boxed_call = True

    @property
    def name(self) -> str:
        return f"{self.kind} graph {self.number}"

    @property
    def summary(self) -> str:
        head = f"{self.name}: {self.torch_ops} ATen ops"
        if self.in_torch is not None:
            return f"{head}\nruns in PyTorch: {self.in_torch}"
        if self.compiled is None:
            return f"{head}\nnot compiled yet: it compiles at its first call"
        return f"{head}, on {self.compiled.device}\n{self.compiled.summary}"

    @property
    def device(self) -> Any:
        return None if self.compiled is None else self.compiled.device

    def _build(self) -> None:
        from neurenix_core.graph.compile.compiler import compile as nx_compile
        from neurenix_core.graph.importers.torch_export import import_fx

        graph, self.template = import_fx(self.gm, {}, f"torch.compile {self.name}")
        if any(kind == "value" and not isinstance(v, (int, float, type(None))) for kind, v in self.template):
            raise UnsupportedOperationError(f"{self.name} returns a symbolic size; compile the training step with torch.compile(dynamic=False)")
        kwargs = self.options.compile_kwargs()
        kwargs.pop("calibration"), kwargs.pop("quantize")  # training graphs run in float
        self.compiled = nx_compile(graph, self.options.device, outputs="host", progress=False, **kwargs)

    def __call__(self, *given: Any) -> list[Any]:
        # boxed (one list: the forward) or not (the backward, through a wrapper that drops the flag)
        args = given[0] if len(given) == 1 and isinstance(given[0], list) else list(given)
        if self.in_torch is None and self.compiled is None:
            with policy(self.options):
                try:
                    self._build()
                except UnsupportedOperationError as exc:
                    self.in_torch = fall_back(self.name, self.torch_ops, self.options, exc)
        if self.in_torch is not None:
            return list(self.gm(*args))
        import torch

        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        with policy(self.options):
            outs = self.compiled(*(to_numpy(t) for t in tensors))
        outs = outs if isinstance(outs, tuple) else (outs,)
        where = tensors[0].device if tensors else None
        result = []
        for kind, v in self.template:
            result.append(to_torch(outs[v], where) if kind == "graph" else args[v] if kind == "input" else v)
        args.clear()  # boxed calling convention: the caller's list is ours to free
        return result


def _decompositions() -> dict[Any, Any]:
    """Core ATen, and PyTorch's own decompositions of the training ops it keeps whole (batch norm
    with batch statistics, max-pool's backward) into ops the importer maps."""
    import torch
    from torch._decomp import core_aten_decompositions, get_decompositions

    aten = torch.ops.aten
    table = dict(core_aten_decompositions())
    table.update(get_decompositions([aten._native_batch_norm_legit_functional, aten.max_pool2d_with_indices_backward]))
    return table


def train_backend(gm: Any, example_inputs: list[Any], options: TorchCompileOptions, record: list[Any]) -> Callable[..., Any]:
    """AOTAutograd with neurenix compiling the forward and the backward (recorded in ``record``)."""
    from torch._dynamo.backends.common import aot_autograd

    def compiler(kind: str) -> Callable[[Any, list[Any]], Any]:
        def compile_graph(graph: Any, inputs: list[Any]) -> Any:
            piece = AtenPiece(graph, kind, options)
            record.append(piece)
            return piece

        return compile_graph

    aot = aot_autograd(fw_compiler=compiler("forward"), bw_compiler=compiler("backward"), decompositions=_decompositions())
    return aot(gm, example_inputs)
