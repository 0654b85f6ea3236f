"""OpenVINO as cpu:0's host runtime holds 64-bit integers as 32-bit ones: it must not take a graph
whose int64 values are more than indices, or the answer is silently wrong beyond 2**31. An int64
input read as data by a layer with a non-int64 result is taken, and checked to fit 32 bits on every call."""

from __future__ import annotations

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.errors import UnsupportedOperationError
from neurenix_core.graph.ir import Graph, Node, TensorSpec
from neurenix_core.graph.reference.run import run_graph

pytest.importorskip("openvino")


def _div() -> Graph:
    return Graph((TensorSpec("x", (1,), "int64"), TensorSpec("y", (1,), "int64")),
                 (Node("d", "div", ("x", "y"), "q"),), ("q",))


def test_openvino_itself_truncates_int64_the_reason_for_the_rule() -> None:
    """What the rule guards against, on OpenVINO directly (its lowering, compiled for CPU)."""
    from neurenix_npu_openvino.host import OpenVINOHostRuntime

    from neurenix_core.graph.ir.host import HostOptions

    x, y = np.array([2**62 + 1], np.int64), np.array([3], np.int64)
    runtime = OpenVINOHostRuntime(("float32", "int64"))
    assert runtime.covers(_div()) is not None  # the rule; compiled anyway, to show why
    assert runtime.compile(_div(), HostOptions())(x, y)[0].tolist() != [(2**62 + 1) // 3]


def test_int64_arithmetic_is_refused_with_the_reason_and_runs_exactly_elsewhere() -> None:
    x, y = np.array([2**62 + 1], np.int64), np.array([3], np.int64)
    with pytest.raises(UnsupportedOperationError, match=r"openvino holds 64-bit integers as 32-bit ones: layer 'd' \(div\)"):
        nx.compile(_div(), device="cpu", runtime="openvino")(x, y)
    assert nx.compile(_div(), device="cpu")(x, y).numpy().tolist() == [(2**62 + 1) // 3]


def test_int64_indices_are_taken() -> None:
    """Token ids into an embedding (BERT's only int64 values): exact as int32, so OpenVINO runs them."""
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((50, 8)).astype(np.float32)
    graph = Graph((TensorSpec("ids", (2, 5), "int64"),), (Node("e", "embedding", ("ids",), "h", {}, {"weight": weight}),), ("h",))
    ids = rng.integers(0, 50, (2, 5)).astype(np.int64)
    compiled = nx.compile(graph, device="cpu", runtime="openvino")
    np.testing.assert_array_equal(compiled(ids).numpy(), run_graph(graph, ids))
    assert "runtime openvino" in compiled.summary


def _mask_to_float() -> Graph:
    """BERT's use of its attention mask: an int64 input read as data, by a cast whose result is float."""
    return Graph((TensorSpec("mask", (2, 4), "int64"),), (Node("c", "cast", ("mask",), "m", {"to": "float32"}),), ("m",))


def test_an_int64_input_read_as_data_is_taken_and_checked_on_every_call() -> None:
    from neurenix_core.errors import OperationError

    compiled = nx.compile(_mask_to_float(), device="cpu", runtime="openvino")
    mask = np.array([[1, 1, 0, 0], [1, 1, 1, -(2**31)]], np.int64)
    np.testing.assert_array_equal(compiled(mask).numpy(), mask.astype(np.float32))
    assert "runtime openvino" in compiled.summary
    with pytest.raises(OperationError, match=r"input 0 holds 4294967296, beyond 2\*\*31; compile with runtime='onnxruntime'"):
        compiled(np.full((2, 4), 2**32, np.int64))
    with pytest.raises(OperationError, match=r"holds -2147483649"):
        compiled(np.full((2, 4), -(2**31) - 1, np.int64))


def test_an_int64_constant_read_as_data_is_taken_only_when_it_fits() -> None:
    from neurenix_npu_openvino.host import OpenVINOHostRuntime

    def graph(value: int) -> Graph:
        return Graph((TensorSpec("x", (2,), "float32"),),
                     (Node("k", "constant", (), "k", {}, {"value": np.array([value, 1], np.int64)}),
                      Node("c", "cast", ("k",), "kf", {"to": "float32"}), Node("a", "add", ("x", "kf"), "y")), ("y",))

    runtime = OpenVINOHostRuntime(("float32", "int64", "bool"))
    assert runtime.covers(graph(7)) is None
    assert runtime.covers(graph(2**40)) == ("openvino holds 64-bit integers as 32-bit ones: layer 'c' (cast) reads int64 'k' as data, "
                                            "which would be wrong beyond 2**31")


def _positions_to_angles(then: str = "cast") -> Graph:
    """A language model's position ids: an int64 input unsqueezed, expanded, then cast for the
    rotary angles (``then="add"``: int64 arithmetic on the moved values instead)."""
    nodes = [Node("u", "unsqueeze", ("pos",), "pu", {"axes": (2,)}),
             Node("e", "expand", ("pu",), "pe", {"shape": (1, 3, 4)})]
    if then == "cast":
        nodes += [Node("c", "cast", ("pe",), "pf", {"to": "float32"}), Node("m", "mul", ("pf", "freq"), "angles")]
    else:
        nodes += [Node("a", "add", ("pe", "pe"), "angles")]
    return Graph((TensorSpec("pos", (1, 3), "int64"), TensorSpec("freq", (1, 1, 4), "float32")), tuple(nodes), ("angles",))


def test_int64_moved_by_shape_layers_then_cast_is_taken_and_its_input_checked() -> None:
    """unsqueeze/expand only move the position ids' elements: exact as int32 wherever the input
    fits, so the graph runs on OpenVINO and the input is checked on every call; int64 arithmetic
    on the moved values is still refused."""
    from neurenix_npu_openvino.host import OpenVINOHostRuntime

    from neurenix_core.errors import OperationError

    pos = np.array([[5, 6, 7]], np.int64)
    freq = np.linspace(0.1, 1.0, 4, dtype=np.float32).reshape(1, 1, 4)
    compiled = nx.compile(_positions_to_angles(), device="cpu", runtime="openvino")
    np.testing.assert_allclose(compiled(pos, freq).numpy(), run_graph(_positions_to_angles(), pos, freq), rtol=1e-6)
    assert "runtime openvino" in compiled.summary
    with pytest.raises(OperationError, match=r"input 0 holds 4294967296"):
        compiled(np.full((1, 3), 2**32, np.int64), freq)
    runtime = OpenVINOHostRuntime(("float32", "int64", "bool"))
    assert runtime.covers(_positions_to_angles("add")) == ("openvino holds 64-bit integers as 32-bit ones: layer 'a' (add) computes "
                                                           "int64 values, which would be wrong beyond 2**31")
