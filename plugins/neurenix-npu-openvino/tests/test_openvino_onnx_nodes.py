"""Values OpenVINO's Python binding has no element type for are refused by name at lowering
(the core then runs that segment on cpu:0), never as a RuntimeError from ``ov.Type``."""

from __future__ import annotations

import pytest
from neurenix_npu_openvino.lowering import lower_graph

from neurenix_core.errors import UnsupportedOperationError
from neurenix_core.graph.ir import Graph, Node, TensorSpec


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn", "int4"])
def test_graph_input_without_an_openvino_type_is_refused_by_name(dtype: str) -> None:
    graph = Graph((TensorSpec("x", (2, 3), dtype),), (Node("n", "identity", ("x",), "y", {}),), ("y",))
    with pytest.raises(UnsupportedOperationError, match=f"'x' is {dtype}"):
        lower_graph(graph)
