"""What every lowering handler module shares: the handler signature and small helpers.

A handler takes the lowering in progress, the node, its attributes completed with the opset's
defaults, and its input values (OpenVINO outputs), and returns the node's value; the driver
(lowering.py) converts it to the element type the opset infers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from neurenix_core.graph.ir import Node

if TYPE_CHECKING:
    from neurenix_npu_openvino.lowering import Lowering

__all__ = ["Handler", "axis_of", "output", "pair"]

Handler = Callable[["Lowering", Node, Mapping[str, Any], list[Any]], Any]


def output(node: Any) -> Any:
    """The first output of an OpenVINO node (values are passed around as outputs)."""
    return node.output(0) if hasattr(node, "output") and not hasattr(node, "get_node") else node


def pair(value: Any, n: int = 2) -> list[int]:
    if isinstance(value, (int, np.integer)):
        return [int(value)] * n
    return [int(v) for v in value]


def axis_of(axis: int, ndim: int) -> int:
    return axis + ndim if axis < 0 else axis
