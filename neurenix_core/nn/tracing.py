"""Walk a Module once into a :class:`neurenix_core.graph.ir.Graph` by calling it on symbols.

``Module.to_graph()`` calls the model with symbolic :class:`Symbol` stand-ins instead of tensors.
A leaf layer (Linear, Conv2d, ...) records one node; a container (Sequential, or a user's
Module whose ``forward`` only calls layers, functional forms, ``+`` and ``*``) runs its
``forward`` on the symbols, so residual blocks become DAGs. Anything else a forward does with a
symbol (``x.shape``, NumPy calls, Python branching on values) cannot be captured in a static
graph and raises :class:`CompilationError` naming the module.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from neurenix_core.errors import CompilationError, NeurenixError
from neurenix_core.graph.ir import Graph, Node, TensorSpec

__all__ = ["Symbol", "Tracer", "is_symbolic", "trace"]

class Module(Protocol):
    """What tracing asks of an ``nn.Module`` (module.py calls into this file, so this file names
    the methods it uses instead of importing the class)."""

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Any]]: ...
    def forward(self, *args: Any, **kwargs: Any) -> Any: ...
    def _is_leaf(self) -> bool: ...
    def _trace(self, tracer: Tracer, name: str, *args: Any, **kwargs: Any) -> Any: ...


_active: contextvars.ContextVar[Tracer | None] = contextvars.ContextVar("neurenix_tracer", default=None)


class Symbol:
    """A value in a graph being traced: the name of a graph input or of a node's output."""

    __slots__ = ("_name", "_tracer")

    def __init__(self, tracer: Tracer, name: str) -> None:
        self._tracer = tracer
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def __add__(self, other: Any) -> Symbol:
        return self._tracer.binary("add", self, other)

    __radd__ = __add__

    def __mul__(self, other: Any) -> Symbol:
        return self._tracer.binary("mul", self, other)

    __rmul__ = __mul__

    def __getattr__(self, attr: str) -> Any:
        # Attribute access means the forward inspects the value (x.shape, x.numpy()): the graph
        # would depend on data we do not have while tracing.
        raise CompilationError(
            f"module {self._tracer.where()!r} uses .{attr} on a traced value; a compiled graph holds only "
            "layers, nn functional forms, '+' and '*'. Rewrite the forward with those, or run it eagerly "
            "(nx.fallback_policy('allow') / call the model directly)"
        )

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise CompilationError(
            f"module {self._tracer.where()!r} converts a traced value to NumPy; that cannot be compiled into a graph"
        )

    def __bool__(self) -> bool:
        raise CompilationError(f"module {self._tracer.where()!r} branches on a traced value; graphs are static")

    def __repr__(self) -> str:
        return f"Symbol({self._name!r})"


class Tracer:
    """Collects nodes while a model runs on symbols."""

    def __init__(self, root: Module) -> None:
        self.paths: dict[int, str] = {id(m): name for name, m in root.named_modules()}
        self.nodes: list[Node] = []
        self.stack: list[str] = []
        self._used: dict[str, int] = {}

    def where(self) -> str:
        return self.stack[-1] if self.stack and self.stack[-1] else "<model>"

    def path_of(self, module: Module) -> str:
        return self.paths.get(id(module), type(module).__name__.lower())

    def _unique(self, name: str) -> str:
        # A layer called twice (weight sharing) gets "name#2": node names must be unique.
        n = self._used.get(name, 0) + 1
        self._used[name] = n
        return name if n == 1 else f"{name}#{n}"

    def record(self, name: str, op: str, inputs: Sequence[Symbol], attrs: Mapping[str, Any] | None = None,
               params: Mapping[str, np.ndarray] | None = None) -> Symbol:
        for s in inputs:
            if not isinstance(s, Symbol) or s._tracer is not self:
                raise CompilationError(
                    f"layer {name or op!r} ({op}) got a {type(s).__name__} where a traced value was expected; "
                    "constants and tensors created inside forward cannot be captured in a graph"
                )
        node_name = self._unique(name or op)
        self.nodes.append(Node(node_name, op, tuple(s._name for s in inputs), node_name, dict(attrs or {}), dict(params or {})))
        return Symbol(self, node_name)

    def functional(self, op: str, inputs: Sequence[Symbol], attrs: Mapping[str, Any] | None = None) -> Symbol:
        """A functional form (``F.relu(x)``) used inside a forward: named after the module calling it."""
        prefix = self.stack[-1] if self.stack else ""
        return self.record(f"{prefix}.{op}" if prefix else op, op, inputs, attrs)

    def binary(self, op: str, a: Any, b: Any) -> Symbol:
        if not (isinstance(a, Symbol) and isinstance(b, Symbol)):
            raise CompilationError(
                f"module {self.where()!r}: '{'+' if op == 'add' else '*'}' with a constant cannot be compiled; "
                "both operands must be layer outputs (use a layer for scaling or biases)"
            )
        return self.functional(op, (a, b))


def is_symbolic(args: Sequence[Any]) -> bool:
    return any(isinstance(a, Symbol) for a in args)


def call_module(module: Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``Module.__call__`` while tracing: leaves record a node, containers run their forward."""
    tracer = next(a._tracer for a in args if isinstance(a, Symbol))
    name = tracer.path_of(module)
    if module._is_leaf():
        return module._trace(tracer, name, *args, **kwargs)
    tracer.stack.append(name)
    try:
        return module.forward(*args, **kwargs)
    except NeurenixError:
        raise
    except Exception as exc:  # the user's forward did something a graph cannot hold
        raise CompilationError(
            f"module {name or '<model>'!r} ({type(module).__name__}) cannot be walked into a graph: "
            f"{type(exc).__name__}: {exc}. Compiled graphs hold layers, nn functional forms, '+' and '*'; "
            "call the model directly to run it eagerly"
        ) from exc
    finally:
        tracer.stack.pop()


def trace(root: Module, shapes: Sequence[tuple[int, ...] | None], dtype: str = "float32") -> Graph:
    """The graph of ``root`` for ``len(shapes)`` inputs (a shape may be None: set later by
    ``Graph.with_input_shapes``)."""
    tracer = Tracer(root)
    names = ["input"] if len(shapes) == 1 else [f"input_{i}" for i in range(len(shapes))]
    symbols = [Symbol(tracer, n) for n in names]
    token = _active.set(tracer)
    try:
        out = call_module(root, tuple(symbols), {})
    finally:
        _active.reset(token)
    outputs = out if isinstance(out, (tuple, list)) else (out,)
    for o in outputs:
        if not isinstance(o, Symbol):
            raise CompilationError(
                f"model {type(root).__name__} returned {type(o).__name__} while traced; a compiled model must return "
                "layer outputs (a tensor or a tuple of tensors)"
            )
    specs = tuple(TensorSpec(n, tuple(s) if s is not None else (), dtype) for n, s in zip(names, shapes))
    return Graph(specs, tuple(tracer.nodes), tuple(o._name for o in outputs))
