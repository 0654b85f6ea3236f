"""What every lowering handler module shares: the handler signature and small helpers.

A handler takes the lowering in progress, the node, its attributes completed with the opset's
defaults, and its input values (OpenVINO outputs), and returns the node's value; the driver
(lowering.py) converts it to the element type the opset infers.

The lowering in progress is typed as :class:`LoweringContext`, the part of ``lowering.Lowering``
handlers use, so that the handler modules need not import the driver that imports them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import numpy as np

from neurenix_core.contract import Node, ValueSpec

__all__ = ["Handler", "LoweringContext", "axis_of", "output", "pair"]


class LoweringContext(Protocol):
    """The lowering in progress as handlers see it (implemented by ``lowering.Lowering``, whose
    methods say what each does): the opset16 module, the specs of the values built so far, and
    the helpers for constants, dtypes, quantized weights and shape checks."""

    op: Any
    specs: dict[str, ValueSpec]

    def spec_of(self, node: Node) -> ValueSpec: ...

    def const(self, array: Any, dtype: Any = ...) -> Any: ...

    def axes(self, values: Any) -> Any: ...

    def shape(self, value: Any) -> tuple[int, ...]: ...

    def ov_type(self, dtype: str) -> Any: ...

    def to_dtype(self, value: Any, dtype: str) -> Any: ...

    def scalar_like(self, value: Any, number: float) -> Any: ...

    def weight(self, node: Node, key: str = ...) -> Any: ...

    def constant_operand(self, node: Node, index: int, value: Any, channel_axis: int | None) -> Any: ...

    def bias(self, node: Node) -> np.ndarray | None: ...

    def expect_rank(self, node: Node, value: Any, rank: int, what: str) -> tuple[int, ...]: ...

    def expect(self, node: Node, value: Any, rank: int | None, axis: int, size: int, what: str) -> tuple[int, ...]: ...

    def shape_error(self, node: Node, shape: tuple[int, ...], what: str) -> None: ...


Handler = Callable[[LoweringContext, Node, Mapping[str, Any], list[Any]], Any]


def output(node: Any) -> Any:
    """The first output of an OpenVINO node (values are passed around as outputs)."""
    return node.output(0) if hasattr(node, "output") and not hasattr(node, "get_node") else node


def pair(value: Any, n: int = 2) -> list[int]:
    if isinstance(value, (int, np.integer)):
        return [int(value)] * n
    return [int(v) for v in value]


def axis_of(axis: int, ndim: int) -> int:
    return axis + ndim if axis < 0 else axis
