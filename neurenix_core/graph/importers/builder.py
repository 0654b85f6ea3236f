"""What both importers build with: a Graph under construction, with constant folding.

A value is either a graph value (a name, with its static shape and dtype) or a :class:`Const`
(a NumPy array known at import time: weights, buffers, index tensors, masks built from shapes).
``emit`` folds an op whose inputs are all constants with the opset's reference semantics, so
weight reshapes and mask arithmetic never reach the graph; a constant that feeds a real node
becomes a ``constant`` node once.

Attributes may hold :class:`~neurenix_core.graph.ir.symbolic.SymDim` sizes (dynamic input axes):
the builder infers shapes with the example's sizes (``bindings``) and keeps the symbolic
attributes on the node; an op with a symbolic attribute is never folded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, final

import numpy as np

from neurenix_core.errors import ModelFormatError, ShapeError, UnsupportedOperationError
from neurenix_core.graph import opset
from neurenix_core.graph.ir import Graph, Node, TensorSpec, fresh_name
from neurenix_core.graph.ir.shapes import ValueSpec, node_spec
from neurenix_core.graph.ir.symbolic import SymDim, is_symbolic, resolve

__all__ = ["MAX_FOLDED_BYTES", "Const", "GraphBuilder", "Value", "check_constant_bytes"]

#: The largest constant an import may build by folding (ConstantOfShape, Range, Expand, Tile ...
#: of constants) when it is larger than its operands: a model file of a few bytes must not make
#: the importer allocate terabytes. Real models fold masks and index grids of megabytes.
MAX_FOLDED_BYTES = 2 * 2**30


def check_constant_bytes(source: str, node: str, op: str, shape: Sequence[int], dtype: Any, operand_bytes: int = 0) -> None:
    """Refuse, before allocating it, a folded constant of ``shape`` that is above
    MAX_FOLDED_BYTES and larger than its operands (copying a large weight is not growth)."""
    if any(int(d) < 0 for d in shape):
        raise ShapeError(f"{source}: node {node!r} ({op}) would build a constant of shape {tuple(shape)}; sizes are 0 or more; "
                         "re-export or fix the model")
    nbytes = int(np.prod([int(d) for d in shape], dtype=object)) * np.dtype(dtype).itemsize
    if nbytes > MAX_FOLDED_BYTES and nbytes > operand_bytes:
        raise ModelFormatError(f"{source}: node {node!r} ({op}) would build a constant of shape {tuple(int(d) for d in shape)} "
                               f"({nbytes} bytes) at import, above the limit of {MAX_FOLDED_BYTES} bytes for folded constants; "
                               "make that value an input of the model, or re-export it with smaller sizes")


@final
@dataclass(frozen=True, slots=True)
class Const:
    """A value known at import time."""

    array: np.ndarray


Value = str | Const


class GraphBuilder:
    """Collects inputs, nodes and outputs; names nodes after the source node they come from."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.inputs: list[TensorSpec] = []
        self.nodes: list[Node] = []
        self.specs: dict[str, ValueSpec] = {}
        self._const_names: dict[int, tuple[np.ndarray, str]] = {}
        self._used: set[str] = set()
        #: the example's size of every input axis: what SymDims evaluate to while importing
        self.bindings: dict[tuple[int, int], int] = {}
        #: caps on dynamic axes (Graph.limits)
        self.limits: dict[tuple[int, int], int] = {}

    # ------------------------------------------------------------------ names and values
    def unique(self, name: str) -> str:
        return fresh_name(name, self._used)

    def add_input(self, name: str, shape: Sequence[int], dtype: str, dynamic: Sequence[int] = ()) -> str:
        """A graph input with the example's ``shape``; ``dynamic`` axes may change per call."""
        name = self.unique(name)
        index = len(self.inputs)
        self.inputs.append(TensorSpec(name, tuple(int(d) for d in shape), dtype, tuple(sorted(int(a) for a in dynamic))))
        self.specs[name] = ValueSpec(tuple(int(d) for d in shape), dtype)
        self.bindings.update({(index, a): int(d) for a, d in enumerate(shape)})
        return name

    def example(self, value: Any) -> Any:
        """``value`` (an int, SymDim or container of them) at the example's sizes."""
        return resolve(value, self.bindings)

    def spec(self, value: Value) -> ValueSpec:
        if isinstance(value, Const):
            return ValueSpec(tuple(int(d) for d in value.array.shape), opset._const_dtype(value.array))
        return self.specs[value]

    def materialize(self, value: Value, hint: str = "const") -> str:
        """A graph value name for ``value`` (a constant becomes one ``constant`` node)."""
        if not isinstance(value, Const):
            return value
        key = id(value.array)
        hit = self._const_names.get(key)
        if hit is not None:
            return hit[1]
        name = self._append(hint, "constant", (), {}, {"value": value.array})
        self._const_names[key] = (value.array, name)  # keep the array alive so its id stays unique
        return name

    # ------------------------------------------------------------------ nodes
    def _append(self, name: str, op: str, inputs: Sequence[str], attrs: Mapping[str, Any], params: Mapping[str, Any]) -> str:
        node = Node(self.unique(name), op, tuple(inputs), "", dict(attrs), {k: v for k, v in params.items() if v is not None})
        node = Node(node.name, node.op, node.inputs, node.name, node.attrs, node.params)
        concrete = Node(node.name, node.op, node.inputs, node.output, self.example(dict(attrs)), node.params) if is_symbolic(attrs) else node
        self.specs[node.name] = node_spec(concrete, [self.specs[i] for i in node.inputs])
        self.nodes.append(node)
        return node.name

    def emit(self, name: str, op: str, inputs: Sequence[Value], attrs: Mapping[str, Any] | None = None,
             params: Mapping[str, Any] | None = None) -> Value:
        """Append ``op`` (or fold it when every input is a constant); returns the output value."""
        attrs, params = dict(attrs or {}), dict(params or {})
        if op.startswith("reduce_") and attrs.get("axes") and inputs and not self.spec(inputs[0]).shape:
            # PyTorch reduces a 0-d tensor over dim 0 or -1 (the one element: sum, max, mean...);
            # the opset's axes must exist, so a 0-d reduction is written over all (no) axes
            attrs["axes"] = None
        if all(isinstance(v, Const) for v in inputs) and op != "constant" and not is_symbolic(attrs):
            arrays = [v.array for v in inputs]  # type: ignore[union-attr]
            self._check_fold(name, op, inputs, attrs, params)
            return Const(opset.evaluate(op, attrs, arrays, {k: v for k, v in params.items() if v is not None}))
        names = [self.materialize(v, f"{name}.const") for v in inputs]
        return self._append(name, op, names, attrs, params)

    def _check_fold(self, name: str, op: str, inputs: Sequence[Value], attrs: Mapping[str, Any], params: Mapping[str, Any]) -> None:
        """The folded result's size from the opset's shape rule, before evaluating it."""
        specs = [self.spec(v) for v in inputs]
        try:
            out = node_spec(Node(name, op, tuple(f"in{i}" for i in range(len(inputs))), name, dict(attrs), dict(params)), specs)
        except Exception:  # noqa: BLE001 - no estimate: evaluating the op raises its own error for operands it cannot take
            return
        if out.dtype in ("object", "sequence", "optional") or not all(isinstance(d, int) for d in out.shape):
            return
        try:
            dtype = opset._np_dtype(out.dtype)
        except TypeError:
            return  # a non-array result (a sequence or optional): its size is its operands'
        in_bytes = sum(v.array.nbytes for v in inputs if isinstance(v, Const))
        check_constant_bytes(self.source, name, op, out.shape, dtype, in_bytes)

    def reshape(self, name: str, x: Value, target: Sequence[int | SymDim], source: Sequence[int | SymDim] | None = None) -> Value:
        """A reshape that merges the trailing axes is the first release's ``flatten`` (which
        every plugin lowers); anything else is ``reshape``. With symbolic sizes, ``source`` is
        the input's symbolic shape: flatten only where the kept axes are the same expressions."""
        shape: Sequence[int | SymDim] = self.spec(x).shape if source is None else tuple(source)
        target = tuple(d if isinstance(d, SymDim) else int(d) for d in target)
        start = len(target) - 1
        if is_symbolic(target) or is_symbolic(shape):
            merged = shape[start:] if 0 < start < len(shape) - 1 else ()
            if merged and not is_symbolic(merged) and target[:start] == tuple(shape[:start]) and target[start] == int(np.prod(merged)):  # type: ignore[arg-type]  # not is_symbolic(merged): ints
                return self.emit(name, "flatten", [x], {"start_dim": start, "end_dim": -1})
            return self.emit(name, "reshape", [x], {"shape": target})
        if 0 < start < len(shape) - 1 and target[:start] == shape[:start] and target[start] == int(np.prod(shape[start:])):  # type: ignore[arg-type]  # neither shape is symbolic here
            return self.emit(name, "flatten", [x], {"start_dim": start, "end_dim": -1})
        return self.emit(name, "reshape", [x], {"shape": target})

    def cast_to(self, name: str, value: Value, dtype: str) -> Value:
        """``value`` as ``dtype`` (a cast node only where the dtype differs)."""
        if isinstance(value, Const):
            target = np.float32 if dtype == "float32" else opset._np_dtype(dtype)
            return Const(value.array.astype(target))
        if self.specs[value].dtype == dtype:
            return value
        return self.emit(name + ".cast", "cast", [value], {"to": dtype})

    def unsupported(self, node: str, op: str, why: str, remedy: str) -> UnsupportedOperationError:
        return UnsupportedOperationError(f"{self.source}: node {node!r} (op {op}) {why}; {remedy}")

    def graph(self, outputs: Sequence[Value]) -> Graph:
        names = []
        for i, v in enumerate(outputs):
            name = self.materialize(v, f"output_{i}")
            if name in names or any(s.name == name for s in self.inputs):
                name = self.emit(f"output_{i}", "identity", [name])  # type: ignore[assignment]
            names.append(name)
        limits = tuple((i, a, most) for (i, a), most in sorted(self.limits.items()))
        return Graph(tuple(self.inputs), tuple(self.nodes), tuple(names), limits)
