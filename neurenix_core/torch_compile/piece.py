"""One graph dynamo hands the backend, imported and compiled by neurenix for one device.

``Piece(gm, example_inputs, options)`` freezes the graph's weights (``freeze``), imports it through
``torch.export`` (the same op mapping as ``nx.nn.from_torch``), compiles it with ``nx.compile``
on the options' device, and is the callable dynamo runs in place of the graph: torch tensors in,
torch tensors out, on the device of the inputs. On cpu:0 the arrays cross without a copy (NumPy
views of the tensors, tensors over the result arrays); on a device whose backend declares DLPack
they cross by ``nx.from_dlpack`` and ``torch.from_dlpack`` (exchange.py).

Before each call the piece checks that the weights are still the ones it froze (same tensors,
same version counters); where one changed it compiles again from the current values, so a model
updated between calls never runs with stale weights (``recompilations`` counts it).
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Iterator
from typing import Any

from neurenix_core.errors import FallbackError, NotDifferentiableError, UnsupportedOperationError
from neurenix_core.torch_compile.exchange import HOST, Exchange, plan, to_numpy, to_torch
from neurenix_core.torch_compile.freeze import Frozen, Split, freeze, input_names, split
from neurenix_core.torch_compile.options import TorchCompileOptions
from neurenix_core.user_frame import user_stacklevel

__all__ = ["Piece", "count_ops", "fall_back", "policy", "to_numpy", "to_torch"]


@contextlib.contextmanager
def policy(options: TorchCompileOptions) -> Iterator[None]:
    """The options' fallback policy inside the block (the process's own where none is given)."""
    if options.fallback is None:
        yield
        return
    from neurenix_core.tensor.fallback import fallback_policy

    with fallback_policy(options.fallback):
        yield


def fall_back(name: str, torch_ops: int, options: TorchCompileOptions, exc: UnsupportedOperationError) -> str:
    """PyTorch runs graph ``name`` from now on: said once (FallbackWarning), or refused under the
    fallback policy 'error' (FallbackError). Returns the reason, for the summary."""
    from neurenix_core.tensor.fallback import FallbackWarning, get_fallback_policy

    where = options.device if options.device is not None else "the default device"
    if get_fallback_policy() == "error":
        raise FallbackError(f"torch.compile(backend='neurenix'): {name} cannot run on {where} and the fallback "
                            f"policy is 'error': {exc}") from exc
    if get_fallback_policy() == "warn":
        warnings.warn(f"torch.compile(backend='neurenix'): {name} ({torch_ops} torch ops) runs in PyTorch, "
                      f"not on {where}: {exc}", FallbackWarning, stacklevel=user_stacklevel())
    return str(exc)


def count_ops(gm: Any) -> int:
    return sum(1 for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module"))


class Piece:
    """A dynamo graph compiled by neurenix; call it as dynamo calls the graph."""

    def __init__(self, gm: Any, example_inputs: list[Any], options: TorchCompileOptions) -> None:
        self.number = 1  # set by the backend: graphs are numbered per backend
        self.gm = gm
        self.options = options
        self.torch_ops = count_ops(gm)
        self.recompilations = 0
        self.compiled: Any = None
        #: how tensors cross between torch and the device (exchange.py), decided at each compile
        self.exchange: Exchange = HOST
        self.frozen: Frozen | None = None
        #: positions among the live inputs of those the graph writes in place (a static key/value
        #: cache): their new values are the compiled graph's first outputs, copied back after a call
        self.written: list[int] = []
        #: why a dynamic graph compiles per shape instead of per power-of-two bucket, else None
        self.buckets_refused: str | None = None
        #: why a backward through this graph is refused (a device that cannot train), else None
        self.no_backward: str | None = None
        #: why PyTorch runs this graph instead (it could not be imported), else None
        self.in_torch: str | None = None
        try:
            self.parts = split(gm, example_inputs)
        except UnsupportedOperationError as exc:  # inputs that are not tensors or their sizes
            self.parts = Split((), (), {}, ())
            with policy(options):
                self._fall_back(exc)

    @property
    def name(self) -> str:
        return f"graph {self.number}"

    @property
    def summary(self) -> str:
        """The compile summary of this graph (``nx.compile``'s), headed by what dynamo gave."""
        head = f"{self.name}: {self.torch_ops} torch ops, {len(self.parts.live)} input(s), {len(self.parts.weights)} weights frozen"
        if self.in_torch is not None:
            return f"{head}\nruns in PyTorch: {self.in_torch}"
        if self.compiled is None:
            return f"{head}\nnot compiled yet: torch.compile compiles a graph at its first call"
        if self.recompilations:
            head += f", compiled again {self.recompilations}x (weights changed)"
        tail = f"\nshape buckets refused, compiled per shape: {self.buckets_refused}" if self.buckets_refused else ""
        return f"{head}, on {self.compiled.device}; {self.exchange.describe}\n{self.compiled.summary}{tail}"

    def _build(self, args: list[Any] | tuple[Any, ...]) -> None:
        from neurenix_core.graph.importers.torch_export import import_module

        module = freeze(self.gm, list(args), self.parts)
        live = tuple(args[i] for i in self.parts.live)
        spec = self._dynamic_shapes()
        self.written = []
        graph = import_module(module, live, {}, dynamic_shapes=spec, static=spec is None, share_weights=True, written=self.written,
                              input_names=input_names(self.gm, self.parts))
        self.exchange = plan(self.options.device, graph, self.gm, self.parts, live, len(self.written))
        self.compiled = self._compile(graph, bucketed=spec is not None and self.options.buckets is None)
        self.frozen = Frozen(self.parts.weights, list(args))

    def _compile(self, graph: Any, bucketed: bool) -> Any:
        """nx.compile of the imported graph. A graph dynamo made dynamic gets power-of-two shape
        buckets on its dynamic axes where padding is proven safe (a growing batch then compiles
        once per bucket, not once per size); where it is not (a cache joined by concat), it
        compiles per shape, and ``buckets_refused`` says why."""
        from neurenix_core.graph.compile.buckets.policy import PaddingRefusedError
        from neurenix_core.graph.compile.compiler import compile as nx_compile

        kwargs = self.options.compile_kwargs()
        outputs = self.exchange.outputs
        if bucketed:
            try:
                return nx_compile(graph, self.options.device, outputs=outputs, progress=False, **(kwargs | {"buckets": True}))
            except PaddingRefusedError as exc:
                self.buckets_refused = str(exc)
        return nx_compile(graph, self.options.device, outputs=outputs, progress=False, **kwargs)

    def _dynamic_shapes(self) -> tuple[Any, ...] | None:
        """torch.export's spec for the axes dynamo made dynamic; None where all are static."""
        if not any(self.parts.dynamic):
            return None
        from torch.export import Dim

        # the frozen module's forward is GraphModule's ``(*args)``: one entry, a spec per tensor
        return (tuple({axis: Dim.DYNAMIC for axis in axes} or None for axes in self.parts.dynamic),)

    @property
    def device(self) -> Any:
        return self.compiled.device

    def _fall_back(self, exc: UnsupportedOperationError) -> None:
        self.in_torch = fall_back(self.name, self.torch_ops, self.options, exc)

    def __call__(self, *args: Any) -> Any:
        if self.in_torch is not None:
            return self.gm(*args)
        if self.options.fallback is None:  # the hot path: no policy context to enter
            return self._call(args)
        with policy(self.options):
            return self._call(args)

    def _call(self, args: tuple[Any, ...]) -> Any:
        if self.frozen is None or not self.frozen.current(args):
            # The first call compiles (outside dynamo's trace, where torch.export runs as it does
            # for from_torch); a later one only where the weights changed.
            self.recompilations += self.frozen is not None
            try:
                self._build(args)
            except UnsupportedOperationError as exc:
                self._fall_back(exc)
                return self.gm(*args)
        if self.no_backward is not None and _tracks_grad(args):
            return _no_backward(self, args)
        return self.run(args)

    def run(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """The compiled graph on the live inputs, as torch tensors."""
        live = [args[i] for i in self.parts.live]
        if self.exchange.device is not None:
            return self._run_device(live)
        outs = self.compiled(*[to_numpy(t) for t in live])
        outs = outs if type(outs) is tuple else (outs,)
        where = live[0].device if live else None
        if self.written:
            with _no_grad():
                for k, pos in enumerate(self.written):  # the in-place writes, as eager makes them
                    live[pos].copy_(to_torch(outs[k], where))
            outs = outs[len(self.written):]
        return tuple([to_torch(o, where) for o in outs])

    def _run_device(self, live: list[Any]) -> tuple[Any, ...]:
        """``run`` where tensors cross by DLPack: Tensors on the device in and out."""
        exchange = self.exchange
        outs = self.compiled(*exchange.inputs(live))
        outs = outs if type(outs) is tuple else (outs,)
        where = live[0].device if live else None
        if self.written:
            with _no_grad():
                for k, pos in enumerate(self.written):  # the in-place writes, as eager makes them
                    live[pos].copy_(exchange.written(outs[k], where))
            outs = outs[len(self.written):]
        return tuple([exchange.result(k, o, where) for k, o in enumerate(outs)])


def _no_grad() -> Any:
    import torch

    return torch.no_grad()


def _tracks_grad(args: tuple[Any, ...]) -> bool:
    import torch

    return torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)


def _no_backward(piece: Piece, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The piece's outputs as autograd sees them on a device that cannot train: they require
    grad as eager's would, and a backward through them raises ``piece.no_backward``."""
    return _refusing_function().apply(piece, *args)


@functools.cache
def _refusing_function() -> Any:
    import torch

    class NoBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, piece: Piece, *inputs: Any) -> tuple[Any, ...]:
            outs = piece.run(inputs)
            ctx.message = piece.no_backward
            ctx.mark_non_differentiable(*(o for o in outs if not o.is_floating_point()))
            return outs

        @staticmethod
        def backward(ctx: Any, *grads: Any) -> Any:
            raise NotDifferentiableError(ctx.message)

    return NoBackward
