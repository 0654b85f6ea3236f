"""Symbolic dimensions: node attributes that depend on the sizes of the graph's inputs.

An imported model is captured once, with one example input, but runs at any batch size (and,
for token ids, any sequence length). Attributes computed from input sizes (a reshape target
``(batch, seq, 4, 8)``, an ``expand`` to ``(batch, 1, 32)``, the end of a slice of the position
ids) are kept as :class:`SymDim` values: an integer expression over input dimensions, named
``d<input>_<axis>`` (``d0_1`` is axis 1 of the first input). ``Graph.with_input_shapes``
replaces every SymDim with its value for the concrete shapes, so backends only ever see static
graphs. The expression language is deliberately tiny (integers, + - * // %, min, max) and
evaluated without ``eval``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, final

import numpy as np

__all__ = ["ARANGE_CAP", "Bindings", "NotSymbolicError", "SymDim", "is_symbolic", "resolve", "variable"]

#: The largest size of an unbounded dynamic axis (the batch) that a range over it allows: the
#: importers build such a range as a slice of a constant this long (Graph.limits).
ARANGE_CAP = 4096

#: (input index, axis) -> size
Bindings = Mapping[tuple[int, int], int]

_VAR = re.compile(r"d(\d+)_(\d+)")


class NotSymbolicError(ValueError):
    """A size expression the symbolic form cannot hold (the importer then falls back to static shapes)."""


def variable(index: int, axis: int) -> str:
    """The name of axis ``axis`` of input ``index`` in a SymDim expression."""
    return f"d{index}_{axis}"


@final
@dataclass(frozen=True, slots=True)
class SymDim:
    """An integer expression over input dimensions, e.g. ``SymDim("4 * d0_0")``."""

    expr: str

    def __post_init__(self) -> None:
        _parse(self.expr)  # refuse anything outside the expression language at construction

    @property
    def variables(self) -> frozenset[tuple[int, int]]:
        return frozenset((int(i), int(a)) for i, a in _VAR.findall(self.expr))

    def evaluate(self, dims: Bindings) -> int:
        return int(_eval(_parse(self.expr), dims, self.expr))

    def __repr__(self) -> str:
        return f"SymDim({self.expr!r})"

    # Integer arithmetic, so that shape computations in an imported graph (ONNX Shape -> Gather
    # -> Mul -> Concat chains, held in NumPy object arrays) stay symbolic. Sizes are
    # non-negative, so ONNX's truncating integer Div is floor division here.
    def _op(self, other: Any, op: str, reverse: bool = False) -> SymDim | int:
        if isinstance(other, np.integer):
            other = int(other)
        if not isinstance(other, (int, SymDim)) or isinstance(other, bool):
            return NotImplemented
        if op == "*" and other == 1 or op in ("+", "-") and other == 0 and not reverse:
            return self
        a, b = (_text(other), self.expr) if reverse else (self.expr, _text(other))
        return SymDim(f"(({a}) {op} ({b}))")  # operands parenthesized: an expr may be "17*d0_0 + 1"

    def __add__(self, o: Any) -> Any: return self._op(o, "+")
    def __radd__(self, o: Any) -> Any: return self._op(o, "+", True)
    def __sub__(self, o: Any) -> Any: return self._op(o, "-")
    def __rsub__(self, o: Any) -> Any: return self._op(o, "-", True)
    def __mul__(self, o: Any) -> Any: return self._op(o, "*")
    def __rmul__(self, o: Any) -> Any: return self._op(o, "*", True)
    def __floordiv__(self, o: Any) -> Any: return self._op(o, "//")
    def __rfloordiv__(self, o: Any) -> Any: return self._op(o, "//", True)
    def __truediv__(self, o: Any) -> Any: return self._op(o, "//")
    def __rtruediv__(self, o: Any) -> Any: return self._op(o, "//", True)
    def __mod__(self, o: Any) -> Any: return self._op(o, "%")
    def __neg__(self) -> SymDim: return SymDim(f"(-({self.expr}))")


def _text(v: int | SymDim) -> str:
    return v.expr if isinstance(v, SymDim) else str(int(v))


@lru_cache(maxsize=4096)
def _parse(expr: str) -> ast.expr:
    try:
        tree = ast.parse(expr, mode="eval").body
    except SyntaxError as exc:
        raise NotSymbolicError(f"not a size expression: {expr!r}") from exc
    for node in ast.walk(tree):
        ok = isinstance(node, (ast.BinOp, ast.UnaryOp, ast.Constant, ast.Name, ast.Call, ast.Load,
                               ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod, ast.USub))
        if isinstance(node, ast.Constant) and type(node.value) is not int:
            ok = False
        if isinstance(node, ast.Name) and not (_VAR.fullmatch(node.id) or node.id in ("min", "max")):
            ok = False
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in ("min", "max") and not node.keywords):
            ok = False
        if not ok:
            raise NotSymbolicError(f"not a size expression: {expr!r} (allowed: integers, d<input>_<axis>, + - * // %, min, max)")
    return tree


def _eval(node: ast.expr, dims: Bindings, expr: str) -> int:
    if isinstance(node, ast.Constant):
        return int(node.value)  # type: ignore[arg-type]  # _parse admits int constants only
    if isinstance(node, ast.Name):
        m = _VAR.fullmatch(node.id)
        key = (int(m.group(1)), int(m.group(2))) if m else None
        if key is None or key not in dims:
            raise KeyError(f"size expression {expr!r} needs {node.id}, which the input shapes do not give")
        return int(dims[key])
    if isinstance(node, ast.UnaryOp):
        return -_eval(node.operand, dims, expr)
    if isinstance(node, ast.Call):
        args = [_eval(a, dims, expr) for a in node.args]
        return min(args) if node.func.id == "min" else max(args)  # type: ignore[attr-defined]
    assert isinstance(node, ast.BinOp)
    a, b = _eval(node.left, dims, expr), _eval(node.right, dims, expr)
    if isinstance(node.op, ast.Add):
        return a + b
    if isinstance(node.op, ast.Sub):
        return a - b
    if isinstance(node.op, ast.Mult):
        return a * b
    if isinstance(node.op, ast.FloorDiv):
        return a // b
    return a % b


def is_symbolic(value: Any) -> bool:
    """Whether ``value`` (an attribute: scalar, tuple, list or dict) holds a SymDim anywhere."""
    if isinstance(value, SymDim):
        return True
    if isinstance(value, (tuple, list)):
        return any(is_symbolic(v) for v in value)
    if isinstance(value, Mapping):
        return any(is_symbolic(v) for v in value.values())
    return False


def resolve(value: Any, dims: Bindings) -> Any:
    """``value`` with every SymDim replaced by its integer for ``dims`` (containers keep their type)."""
    if isinstance(value, SymDim):
        return value.evaluate(dims)
    if isinstance(value, tuple):
        return tuple(resolve(v, dims) for v in value)
    if isinstance(value, list):
        return [resolve(v, dims) for v in value]
    if isinstance(value, Mapping):
        return {k: resolve(v, dims) for k, v in value.items()}
    return value
