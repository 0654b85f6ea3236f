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

from collections.abc import Callable
from typing import Any

from neurenix_core.errors import UnsupportedOperationError
from neurenix_core.torch_compile.options import TorchCompileOptions
from neurenix_core.torch_compile.piece import count_ops, fall_back, policy, to_numpy, to_torch

__all__ = ["AtenPiece", "train_backend", "wants_grad"]

def wants_grad(example_inputs: list[Any]) -> bool:
    """Whether dynamo captured the graph for autograd (grad mode on, an input that requires grad)."""
    import torch

    return torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs)


class AtenPiece:
    """A forward or backward ATen graph compiled by neurenix; AOTAutograd calls it with a list."""

    def __init__(self, gm: Any, kind: str, options: TorchCompileOptions) -> None:
        self.gm, self.kind, self.options = gm, kind, options
        self.number = 1  # set by the backend: graphs are numbered per backend
        self.torch_ops = count_ops(gm)
        self.compiled: Any = None  # the last call's
        #: compiled graphs by call sizes (one entry, key (), where the graph is static)
        self.built: dict[Any, tuple[Any, list[tuple[str, Any]]]] = {}
        self.symbolic = self._symbolic()
        self.in_torch: str | None = None
        # AOTAutograd's calling convention: one list of arguments, which the callee may free. An
        # instance attribute, so that dynamo's wrapper around the backward copies it.
        self._boxed_call = True

    @property
    def name(self) -> str:
        return f"{self.kind} graph {self.number}"

    @property
    def summary(self) -> str:
        head = f"{self.name}: {self.torch_ops} ATen ops" + (f", compiled at {len(self.built)} sizes" if self.symbolic else "")
        if self.in_torch is not None:
            return f"{head}\nruns in PyTorch: {self.in_torch}"
        if self.compiled is None:
            return f"{head}\nnot compiled yet: it compiles at its first call"
        return f"{head}, on {self.compiled.device}\n{self.compiled.summary}"

    @property
    def device(self) -> Any:
        return None if self.compiled is None else self.compiled.device

    def _symbolic(self) -> bool:
        import torch

        vals = [n.meta.get("val") for n in self.gm.graph.nodes if n.op == "placeholder"]
        return any(isinstance(v, torch.SymInt) or (isinstance(v, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in v.shape))
                   for v in vals)

    def _at_call_sizes(self, args: list[Any]) -> Any:
        """The graph at this call's sizes. AOTAutograd's graph is symbolic where dynamo made an axis
        dynamic (a second batch size); traced again over fake tensors of the call's shapes
        (nothing is computed) it is static, which every device compiles."""
        if not self.symbolic:
            return self.gm
        from torch.fx.experimental.proxy_tensor import make_fx

        traced = make_fx(self.gm, tracing_mode="fake")(*args)
        for node, value in zip((n for n in traced.graph.nodes if n.op == "placeholder"), args):
            if isinstance(value, int):  # a size, now a number: make_fx leaves its placeholder without a value
                node.meta["val"] = value
        return traced

    def _build(self, args: list[Any]) -> tuple[Any, list[tuple[str, Any]]]:
        from neurenix_core.graph.compile.compiler import compile as nx_compile
        from neurenix_core.graph.importers.torch_export import import_fx

        graph, template = import_fx(self._at_call_sizes(args), f"torch.compile {self.name}")
        kwargs = self.options.compile_kwargs()
        kwargs.pop("calibration"), kwargs.pop("quantize")  # training graphs run in float
        return nx_compile(graph, self.options.device, outputs="host", progress=False, **kwargs), template

    def __call__(self, *given: Any) -> list[Any]:
        import torch

        # boxed (one list: the forward) or not (the backward, through a wrapper that drops the flag)
        args = given[0] if len(given) == 1 and isinstance(given[0], list) else list(given)
        key = tuple(tuple(a.shape) if isinstance(a, torch.Tensor) else a for a in args) if self.symbolic else ()
        if self.in_torch is None and key not in self.built:
            with policy(self.options):
                try:
                    self.built[key] = self._build(args)
                except UnsupportedOperationError as exc:
                    self.in_torch = fall_back(self.name, self.torch_ops, self.options, exc)
        if self.in_torch is not None:
            return list(self.gm(*args))
        compiled, template = self.built[key]
        self.compiled = compiled
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        with policy(self.options):
            outs = compiled(*(to_numpy(t) for t in tensors))
        outs = outs if isinstance(outs, tuple) else (outs,)
        where = tensors[0].device if tensors else None
        result = [to_torch(outs[v], where) if kind == "graph" else args[v] if kind == "input" else v for kind, v in template]
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
            piece.number = len(record) + 1
            record.append(piece)
            return piece

        return compile_graph

    aot = aot_autograd(fw_compiler=compiler("forward"), bw_compiler=compiler("backward"), decompositions=_decompositions())
    return aot(gm, example_inputs)
