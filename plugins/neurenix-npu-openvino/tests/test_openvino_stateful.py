"""cpu:0's OpenVINO runtime keeps a step graph's cache in OpenVINO state (stateful.py, API 1.7):
the core's conformance check for such runtimes, the refusal of two specializations that lower
differently, and the lowering forms OpenVINO's fused key/value-cache attention reads."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from neurenix_core.errors import CompilationError
from neurenix_core.graph.ir import Graph, Node, TensorSpec
from neurenix_core.graph.ir.host import HostOptions
from neurenix_core.graph.ir.host_state import StateSpec
from neurenix_core.testing.stateful import check_stateful_runtime

pytest.importorskip("openvino")

if TYPE_CHECKING:
    from neurenix_npu_openvino.host import OpenVINOHostRuntime


def _runtime() -> OpenVINOHostRuntime:
    from neurenix_npu_openvino.host import OpenVINOHostRuntime

    return OpenVINOHostRuntime(("float32",))


@pytest.mark.parametrize("threads", [1, 2])
def test_conformance_check_passes(threads: int) -> None:
    """Calls of 4, 1, 1 and 3 new entries at batch 2, a reset, then batch 3: every output equals
    the float64 reference fed the past the host kept (neurenix_core.testing.stateful)."""
    check_stateful_runtime(_runtime(), threads=threads)


def _joined(batch: int, new: int, past: int, *, sized: bool = False) -> Graph:
    fresh, old = (batch, 2, new, 8), (batch, 2, past, 8)
    nodes = [Node("j", "concat", ("past", "x"), "joined", {"axis": 2}), Node("s", "reduce_sum", ("joined",), "y", {"axes": (2,), "keepdims": False})]
    if sized:  # a slice ending at the past's length: lowered as that number
        nodes.append(Node("c", "slice", ("joined",), "old", {"starts": (0,), "ends": (past,), "axes": (2,), "steps": (1,)}))
    return Graph((TensorSpec("x", fresh), TensorSpec("past", old)), tuple(nodes), ("old" if sized else "y", "joined"))


def test_state_outside_a_fused_attention_is_refused() -> None:
    """A joined value that no attention reads stays a plain ReadValue / Assign, whose state OpenVINO
    2026.4's CPU device does not reset reliably: refused, by name, rather than risk stale values."""
    with pytest.raises(CompilationError, match=r"fused 0 attention layer\(s\) with the cache, for 1 cache values.*cache='fixed'"):
        _runtime().compile_stateful(_joined(5, 37, 47), _joined(7, 41, 59), (StateSpec(past=1, joined=1, axis=2),), HostOptions())


def test_specializations_that_lower_differently_are_refused() -> None:
    with pytest.raises(CompilationError, match="lowers to different OpenVINO models at two sets of input sizes"):
        _runtime().compile_stateful(_joined(5, 37, 47, sized=True), _joined(7, 41, 59, sized=True),
                                    (StateSpec(past=1, joined=1, axis=2),), HostOptions())


def test_a_static_plan_is_refused() -> None:
    with pytest.raises(CompilationError, match="keeps a cache for float steps"):
        _runtime().compile_stateful(_joined(5, 37, 47), _joined(7, 41, 59), (StateSpec(1, 1, 2),), HostOptions(precision="int8"))


def test_slice_to_the_end_and_unsqueeze_lower_without_sizes() -> None:
    """A slice over everything lowers to nothing and an unsqueeze to Unsqueeze: the forms
    ``x[:, :, None]`` of a cache takes on its way to OpenVINO's fused attention."""
    from neurenix_npu_openvino.lowering import lower_graph

    nodes = (Node("s", "slice", ("x",), "a", {"starts": (0,), "ends": (2**63 - 1,), "axes": (2,), "steps": (1,)}),
             Node("u", "unsqueeze", ("a",), "b", {"axes": (2,)}),
             Node("t", "slice", ("b",), "c", {"starts": (1,), "ends": (2**63 - 1,), "axes": (3,), "steps": (1,)}))
    model = lower_graph(Graph((TensorSpec("x", (1, 3, 5, 8)),), nodes, ("c",)), device="cpu:0")
    kinds = [op.get_type_name() for op in model.get_ordered_ops()]
    assert kinds.count("Slice") == 1 and "Unsqueeze" in kinds and "Reshape" not in kinds
