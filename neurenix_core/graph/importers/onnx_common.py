"""What every ONNX op handler uses: the node as the importer sees it and the operand helpers.

A handler (``Handler``) takes the :class:`~neurenix_core.graph.importers.builder.GraphBuilder`
and one :class:`OnnxNode` and returns the Value of the node's output, or a list with one Value
per ONNX output (an op with several outputs emits one graph node per output, each computing its
own result, as ``split`` does with ``index``). Handlers are grouped by ONNX family, one module
each (``onnx_math``, ``onnx_nn``, ``onnx_tensor`` ...), each exporting ``HANDLERS``;
``onnx_import`` merges them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from neurenix_core.errors import UnsupportedOperationError
from neurenix_core.graph.importers.builder import Const, GraphBuilder, Value
from neurenix_core.graph.ir.symbolic import SymDim

__all__ = ["REMEDY", "Handler", "OnnxNode", "ValueInputNeeded", "const", "dims", "fail", "ints", "outputs_used", "simple", "symbolic_const", "variadic"]

REMEDY = "re-export the model with supported ops (the opset is listed in docs/models.md) or run it in ONNX Runtime"


class OnnxNode:
    """One ONNX node with resolved inputs and attributes as Python values."""

    def __init__(self, proto: Any, index: int, inputs: list[Value | None], attrs: dict[str, Any]) -> None:
        self.proto = proto
        self.op = proto.op_type
        self.name = proto.name or f"{proto.op_type}_{index}"
        self.inputs = inputs
        self.attrs = attrs

    def input(self, i: int) -> Value | None:
        return self.inputs[i] if i < len(self.inputs) else None

    def required(self, b: GraphBuilder, i: int = 0) -> Value:
        """Input ``i``, which the op requires: an omitted one (None) is refused, naming the node."""
        x = self.input(i)
        if x is None:
            raise fail(b, self, f"has no input {i}, which {self.op} requires; re-export the model")
        return x


Handler = Callable[[GraphBuilder, OnnxNode], Any]


def fail(b: GraphBuilder, n: OnnxNode, why: str) -> UnsupportedOperationError:
    return b.unsupported(n.name, n.op, why, REMEDY)


class ValueInputNeeded(UnsupportedOperationError):
    """A graph input is used where the import needs a value (a Reshape's shape, a Slice's starts,
    reduction axes ...): the model is imported per value of that input (a "value input", see
    ``onnx_import.build_for_values``), as static-shape runtimes treat shape tensors."""

    def __init__(self, message: str, input_name: str) -> None:
        super().__init__(message)
        self.input_name = input_name


def const(b: GraphBuilder, n: OnnxNode, i: int, what: str) -> np.ndarray | None:
    """Operand ``i`` as an array known at import time (None when the optional operand is absent).
    A graph input there makes the model value-specialized (ValueInputNeeded); any other run-time
    value is refused."""
    v = n.input(i)
    if v is None:
        return None
    if not isinstance(v, Const):
        source = _value_source(b, v)
        if source is not None:
            raise ValueInputNeeded(str(fail(b, n, f"takes its {what} from graph input {source!r}")), source)
        raise fail(b, n, f"takes its {what} from a value computed at run time; it must be a constant (initializer)")
    return v.array


#: A graph input this small (elements) may become a value input: shape-like operands are a few
#: numbers, and a model is built (and compiled) once per distinct value of its value inputs.
VALUE_INPUT_LIMIT = 64


def _value_source(b: GraphBuilder, value: str) -> str | None:
    """The first graph input ``value`` is computed from when it is computed from small graph
    inputs and constants only (built per value of those inputs, the chain folds to a constant);
    None otherwise."""
    inputs = {spec.name: spec for spec in b.inputs}
    producers = {node.output: node for node in b.nodes}
    pending, seen, found = [value], set(), []
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in inputs:
            if int(np.prod(inputs[name].shape)) > VALUE_INPUT_LIMIT:
                return None
            found.append(name)
            continue
        node = producers.get(name)
        if node is None:
            return None
        pending.extend(node.inputs)
    return found[0] if found else None


def ints(v: Any) -> tuple[int, ...]:
    return tuple(int(i) for i in np.asarray(v).ravel())


def dims(v: Any) -> tuple[int | SymDim, ...]:
    """Like _ints, keeping symbolic sizes (object arrays from a symbolic Shape)."""
    return tuple(i if isinstance(i, SymDim) else int(i) for i in np.asarray(v).ravel())


def symbolic_const(v: Value | None) -> bool:
    return isinstance(v, Const) and v.array.dtype == object


def simple(op: str, **fixed: Any) -> Handler:
    return lambda b, n: b.emit(n.name, op, [v for v in n.inputs if v is not None], fixed)


def variadic(op: str) -> Handler:
    def run(b: GraphBuilder, n: OnnxNode) -> Value:
        out = n.inputs[0]
        for i, v in enumerate(n.inputs[1:]):
            out = b.emit(f"{n.name}" if i == len(n.inputs) - 2 else f"{n.name}.{i}", op, [out, v])  # type: ignore[list-item]
        return out  # type: ignore[return-value]

    return run




def outputs_used(n: OnnxNode) -> list[bool]:
    """Which of the node's ONNX outputs the model names (an optional output left out is "")."""
    return [bool(o) for o in n.proto.output]
