"""ONNX control flow (If, Loop, Scan, SequenceMap), sequences and optionals on cpu:0, one node each."""

from __future__ import annotations

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.errors import NeurenixError, UnsupportedOperationError

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _model(nodes: list[Any], inputs: list[Any], outputs: list[Any], opset: int = 18) -> Any:
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _run(model: Any, *inputs: Any) -> Any:
    compiled = nx.compile(nn.from_onnx(model.SerializeToString()), device="cpu", precision="fp32", outputs="host", progress=False)
    return compiled(*inputs)


def _seq(elem: int, name: str) -> Any:
    return helper.make_tensor_sequence_value_info(name, elem, None)


def _t(name: str, elem: int, shape: Any) -> Any:
    return helper.make_tensor_value_info(name, elem, shape)


def test_if_branches_read_outer_values() -> None:
    then_g = helper.make_graph([helper.make_node("Add", ["x", "x"], ["t"])], "then", [], [_t("t", F, [3])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [_t("e", F, [3])])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)
    model = _model([node], [_t("c", B, []), _t("x", F, [3])], [_t("y", F, [3])])
    x = np.array([1.0, -2.0, 3.5], np.float32)
    for cond, want in ((True, x + x), (False, -x)):
        got = _run(model, np.array(cond), x)
        assert got.dtype == np.float32 and got.shape == (3,)
        np.testing.assert_array_equal(got, want)


def test_loop_slices_by_iteration_and_stacks_scan_outputs() -> None:
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Constant", [], ["one"], value=helper.make_tensor("one", I64, [1], [1])),
         helper.make_node("Unsqueeze", ["i", "zero"], ["start"]),
         helper.make_node("Add", ["start", "one"], ["end"]),
         helper.make_node("Slice", ["data", "start", "end"], ["piece"]),
         helper.make_node("Add", ["acc_in", "piece"], ["acc_out"]),
         helper.make_node("Identity", ["acc_out"], ["scan"])],
        "body", [_t("i", I64, []), _t("cond_in", B, []), _t("acc_in", F, [1])],
        [_t("cond_out", B, []), _t("acc_out", F, [1]), _t("scan", F, [1])],
        initializer=[helper.make_tensor("zero", I64, [1], [0])])
    node = helper.make_node("Loop", ["m", "", "acc0"], ["acc", "all"], body=body)
    model = _model([node], [_t("m", I64, []), _t("acc0", F, [1]), _t("data", F, [4])], [_t("acc", F, [1]), _t("all", F, [4, 1])])
    data = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    acc, stacked = _run(model, np.array(4, np.int64), np.zeros(1, np.float32), data)
    np.testing.assert_allclose(acc, [10.0])
    np.testing.assert_allclose(stacked, np.cumsum(data).reshape(4, 1))
    assert stacked.dtype == np.float32


def test_scan_reverse_direction_and_two_states() -> None:
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "x"], ["s2"]), helper.make_node("Mul", ["p", "x"], ["p2"]), helper.make_node("Identity", ["s2"], ["out"])],
        "body", [_t("s", F, [2]), _t("p", F, [2]), _t("x", F, [2])], [_t("s2", F, [2]), _t("p2", F, [2]), _t("out", F, [2])])
    node = helper.make_node("Scan", ["s0", "p0", "xs"], ["s", "p", "outs"], body=body, num_scan_inputs=1, scan_input_directions=[1])
    model = _model([node], [_t("s0", F, [2]), _t("p0", F, [2]), _t("xs", F, [3, 2])],
                   [_t("s", F, [2]), _t("p", F, [2]), _t("outs", F, [3, 2])])
    xs = np.arange(1, 7, dtype=np.float32).reshape(3, 2)
    s, p, outs = _run(model, np.zeros(2, np.float32), np.ones(2, np.float32), xs)
    np.testing.assert_allclose(s, xs.sum(0))
    np.testing.assert_allclose(p, xs.prod(0))
    np.testing.assert_allclose(outs, np.cumsum(xs[::-1], axis=0))


def test_split_erase_insert_length_concat() -> None:
    nodes = [helper.make_node("SplitToSequence", ["x", "sizes"], ["seq"], axis=1),
             helper.make_node("SequenceErase", ["seq", "first"], ["rest"]),
             helper.make_node("SequenceInsert", ["rest", "extra", "first"], ["again"]),
             helper.make_node("SequenceLength", ["again"], ["n"]),
             helper.make_node("ConcatFromSequence", ["again"], ["cat"], axis=1)]
    model = _model(nodes, [_t("x", F, [2, 5]), _t("sizes", I64, [2]), _t("extra", F, [2, 1]), _t("first", I64, [])],
                   [_seq(F, "again"), _t("n", I64, []), _t("cat", F, [2, 4])])
    x = np.arange(10, dtype=np.float32).reshape(2, 5)
    extra = np.full((2, 1), -1.0, np.float32)
    seq, n, cat = _run(model, x, np.array([2, 3], np.int64), extra, np.array(0, np.int64))
    assert isinstance(seq, list) and [s.shape for s in seq] == [(2, 1), (2, 3)]
    assert n.dtype == np.int64 and int(n) == 2
    np.testing.assert_array_equal(cat, np.concatenate([extra, x[:, 2:]], axis=1))


def test_sequence_input_at_and_map() -> None:
    body = helper.make_graph([helper.make_node("Shape", ["e"], ["s"])], "body", [_t("e", F, None)], [_t("s", I64, [2])])
    nodes = [helper.make_node("SequenceAt", ["xs", "pos"], ["last"]),
             helper.make_node("SequenceMap", ["xs"], ["shapes"], body=body)]
    model = _model(nodes, [_seq(F, "xs"), _t("pos", I64, [])], [_t("last", F, [1, 3]), _seq(I64, "shapes")])
    xs = [np.ones((2, 2), np.float32), np.zeros((1, 3), np.float32)]
    last, shapes = _run(model, xs, np.array(-1, np.int64))
    np.testing.assert_array_equal(last, xs[1])
    assert [s.tolist() for s in shapes] == [[2, 2], [1, 3]] and shapes[0].dtype == np.int64
    with pytest.raises(NeurenixError, match="out of range"):
        _run(model, xs, np.array(2, np.int64))


def test_optionals() -> None:
    opt = helper.make_tensor_type_proto(F, [3])
    vi = helper.make_value_info("o", helper.make_optional_type_proto(opt))
    nodes = [helper.make_node("OptionalHasElement", ["o"], ["has"]), helper.make_node("OptionalGetElement", ["o"], ["v"])]
    model = _model(nodes, [vi], [_t("has", B, []), _t("v", F, [3])])
    x = np.array([1.0, 2.0, 3.0], np.float32)
    has, v = _run(model, x)
    assert has.dtype == np.bool_ and bool(has) and v.shape == (3,)
    np.testing.assert_array_equal(v, x)
    with pytest.raises(NeurenixError, match="empty"):
        _run(model, None)
    empty = _model([helper.make_node("Optional", [], ["e"], type=helper.make_sequence_type_proto(opt)),
                    helper.make_node("OptionalHasElement", ["e"], ["has"])], [], [_t("has", B, [])])
    assert not bool(_run(empty))


def test_sequence_at_without_static_shape_is_refused() -> None:
    node = helper.make_node("SequenceAt", ["xs", "pos"], ["y"])
    model = _model([node], [_seq(F, "xs"), _t("pos", I64, [])], [_t("y", F, None)])
    with pytest.raises(UnsupportedOperationError, match="no static shape"):
        nn.from_onnx(model.SerializeToString())


# ----------------------------------------------------------------------------- outputs whose shapes the model does not state
def _untyped(name: str, elem: int) -> Any:
    return helper.make_tensor_value_info(name, elem, None)


def test_if_on_a_constant_condition_is_its_branch() -> None:
    then_g = helper.make_graph([helper.make_node("Concat", ["x", "x"], ["t"], axis=0)], "then", [], [_untyped("t", F)])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [_untyped("e", F)])
    nodes = [helper.make_node("Constant", [], ["c"], value=helper.make_tensor("c", B, [], [True])),
             helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    model = _model(nodes, [_t("x", F, [2])], [_untyped("y", F)])
    x = np.array([1.5, -2.0], np.float32)
    got = _run(model, x)
    assert got.dtype == np.float32 and got.shape == (4,)
    np.testing.assert_array_equal(got, np.concatenate([x, x]))


def test_if_on_a_small_input_is_imported_per_value() -> None:
    """Branches of different shapes: the condition comes from a small graph input, so the model
    is built per value of it."""
    then_g = helper.make_graph([helper.make_node("Concat", ["x", "x"], ["t"], axis=0)], "then", [], [_untyped("t", F)])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [_untyped("e", F)])
    nodes = [helper.make_node("Greater", ["n", "zero"], ["c"]), helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    graph = helper.make_graph(nodes, "g", [_t("n", I64, []), _t("x", F, [3])], [_untyped("y", F)],
                              initializer=[helper.make_tensor("zero", I64, [], [0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    x = np.array([1.0, 2.0, 3.0], np.float32)
    np.testing.assert_array_equal(_run(model, np.array(1, np.int64), x), np.concatenate([x, x]))
    got = _run(model, np.array(-1, np.int64), x)
    assert got.shape == (3,)
    np.testing.assert_array_equal(got, -x)


def test_if_on_a_run_time_condition_takes_the_branches_common_shape() -> None:
    then_g = helper.make_graph([helper.make_node("Add", ["x", "x"], ["t"])], "then", [], [_untyped("t", F)])
    else_g = helper.make_graph([helper.make_node("Transpose", ["x"], ["e0"], perm=[1, 0]), helper.make_node("Transpose", ["e0"], ["e"], perm=[1, 0])],
                               "else", [], [_untyped("e", F)])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0), helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    graph = helper.make_graph(nodes, "g", [_t("x", F, [2, 3])], [_untyped("y", F)], initializer=[helper.make_tensor("zero", F, [], [0.0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(_run(model, x), x + x)
    np.testing.assert_array_equal(_run(model, -x - 1), -x - 1)


def test_if_with_branches_of_different_shapes_on_a_run_time_condition_is_refused() -> None:
    then_g = helper.make_graph([helper.make_node("Concat", ["x", "x"], ["t"], axis=0)], "then", [], [_untyped("t", F)])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [_untyped("e", F)])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0), helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    graph = helper.make_graph(nodes, "g", [_t("x", F, [100])], [_untyped("y", F)], initializer=[helper.make_tensor("zero", F, [], [0.0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(UnsupportedOperationError, match="no static shape"):
        nn.from_onnx(model.SerializeToString())


def test_scan_accumulator_types_follow_from_the_inputs() -> None:
    """An outer-product accumulator (the state) and a per-step read-out, with no types declared."""
    body = helper.make_graph(
        [helper.make_node("Unsqueeze", ["k", "neg1"], ["kc"]), helper.make_node("Unsqueeze", ["k", "neg2"], ["kr"]),
         helper.make_node("MatMul", ["kc", "kr"], ["outer"]), helper.make_node("Add", ["s", "outer"], ["s2"]),
         helper.make_node("MatMul", ["kr", "s2"], ["r"]), helper.make_node("Squeeze", ["r", "neg2"], ["o"])],
        "body", [_untyped("s", F), _untyped("k", F)], [_untyped("s2", F), _untyped("o", F)])
    nodes = [helper.make_node("Scan", ["s0", "ks"], ["s", "outs"], body=body, num_scan_inputs=1)]
    graph = helper.make_graph(nodes, "g", [_t("s0", F, [2, 3, 3]), _t("ks", F, [4, 2, 3])], [_untyped("s", F), _untyped("outs", F)],
                              initializer=[helper.make_tensor("neg1", I64, [1], [-1]), helper.make_tensor("neg2", I64, [1], [-2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    rng = np.random.default_rng(0)
    s0, ks = rng.standard_normal((2, 3, 3)).astype(np.float32), rng.standard_normal((4, 2, 3)).astype(np.float32)
    state, outs = _run(model, s0, ks)
    want, reads = s0.copy(), []
    for k in ks:
        want = want + k[:, :, None] * k[:, None, :]
        reads.append(np.einsum("bi,bij->bj", k, want))
    assert state.shape == (2, 3, 3) and outs.shape == (4, 2, 3) and outs.dtype == np.float32
    np.testing.assert_allclose(state, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(outs, np.stack(reads), rtol=1e-5, atol=1e-5)


def test_scan_whose_state_grows_is_refused() -> None:
    body = helper.make_graph([helper.make_node("Concat", ["s", "x"], ["s2"], axis=0), helper.make_node("Identity", ["x"], ["o"])],
                             "body", [_untyped("s", F), _untyped("x", F)], [_untyped("s2", F), _untyped("o", F)])
    node = helper.make_node("Scan", ["s0", "xs"], ["s", "outs"], body=body, num_scan_inputs=1)
    model = _model([node], [_t("s0", F, [1]), _t("xs", F, [100, 1])], [_untyped("s", F), _untyped("outs", F)])
    with pytest.raises(UnsupportedOperationError, match="no static shape"):
        nn.from_onnx(model.SerializeToString())


def _range_loop(start: Any) -> Any:
    """ONNX's Range function body: a Loop whose trip count is computed from its scalar inputs."""
    body = helper.make_graph([helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Add", ["prev", "delta"], ["cur"]),
                              helper.make_node("Identity", ["prev"], ["out"])],
                             "body", [_t("i", I64, []), _t("cond_in", B, []), _untyped("prev", F)],
                             [_t("cond_out", B, []), _untyped("cur", F), _untyped("out", F)])
    nodes = [helper.make_node("Sub", ["limit", "start"], ["span"]), helper.make_node("Div", ["span", "delta"], ["q"]),
             helper.make_node("Ceil", ["q"], ["c"]), helper.make_node("Relu", ["c"], ["r"]), helper.make_node("Cast", ["r"], ["n"], to=I64),
             helper.make_node("Cast", ["r"], ["go"], to=B), helper.make_node("Loop", ["n", "go", "start"], ["last", "y"], body=body)]
    return _model(nodes, [start, _t("limit", F, []), _t("delta", F, [])], [_untyped("y", F)])


def test_loop_with_a_trip_count_from_small_inputs_is_imported_per_value() -> None:
    model = _range_loop(_t("start", F, []))
    f = np.float32
    for start, limit, delta in ((1.0, 5.0, 2.0), (0.0, 3.0, 0.5), (3.0, 1.0, 1.0)):
        got = _run(model, np.array(start, f), np.array(limit, f), np.array(delta, f))
        want = np.arange(start, limit, delta, dtype=f)
        assert got.dtype == np.float32 and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_loop_whose_scan_length_depends_on_a_large_input_is_refused() -> None:
    body = helper.make_graph([helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Add", ["prev", "one"], ["cur"]),
                              helper.make_node("Identity", ["prev"], ["out"])],
                             "body", [_t("i", I64, []), _t("cond_in", B, []), _untyped("prev", F)],
                             [_t("cond_out", B, []), _untyped("cur", F), _untyped("out", F)])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0), helper.make_node("Cast", ["s"], ["n"], to=I64),
             helper.make_node("Loop", ["n", "", "x"], ["last", "y"], body=body)]
    graph = helper.make_graph(nodes, "g", [_t("x", F, [100])], [_untyped("last", F), _untyped("y", F)],
                              initializer=[helper.make_tensor("one", F, [], [1.0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(UnsupportedOperationError, match="output 1 .*no static shape"):
        nn.from_onnx(model.SerializeToString())


def test_scan_over_a_dynamic_axis_stacks_that_many_steps() -> None:
    body = helper.make_graph([helper.make_node("Add", ["s", "x"], ["s2"]), helper.make_node("Identity", ["s2"], ["out"])],
                             "body", [_t("s", F, [2]), _t("x", F, [2])], [_t("s2", F, [2]), _t("out", F, [2])])
    node = helper.make_node("Scan", ["s0", "xs"], ["s", "outs"], body=body, num_scan_inputs=1)
    model = _model([node], [_t("s0", F, [2]), _t("xs", F, ["T", 2])], [_t("s", F, [2]), _t("outs", F, ["T", 2])])
    compiled = nx.compile(nn.from_onnx(model.SerializeToString()), device="cpu", precision="fp32", outputs="host", progress=False)
    for steps in (3, 5):
        xs = np.arange(2 * steps, dtype=np.float32).reshape(steps, 2)
        s, outs = compiled(np.zeros(2, np.float32), xs)
        assert outs.shape == (steps, 2)
        np.testing.assert_array_equal(outs, np.cumsum(xs, axis=0))
        np.testing.assert_array_equal(s, xs.sum(0))


def test_scan8_keeps_its_batch_axis_after_conversion() -> None:
    """onnx.version_converter's Scan-9 has no batch axis; batched_scan8 scans each batch item."""
    from onnx import version_converter

    from neurenix_core.graph.importers.onnx_controlflow import batched_scan8

    body = helper.make_graph([helper.make_node("Add", ["s", "x"], ["s2"]), helper.make_node("Identity", ["s2"], ["out"])],
                             "body", [_t("s", F, [2]), _t("x", F, [2])], [_t("s2", F, [2]), _t("out", F, [2])])
    node = helper.make_node("Scan", ["", "s0", "xs"], ["s", "outs"], body=body, num_scan_inputs=1)
    original = _model([node], [_t("s0", F, [2, 2]), _t("xs", F, [2, 3, 2])], [_t("s", F, [2, 2]), _t("outs", F, [2, 3, 2])], opset=8)
    model = batched_scan8(original, version_converter.convert_version(original, 13))
    s0 = np.array([[0.0, 0.0], [10.0, 20.0]], np.float32)
    xs = np.arange(12, dtype=np.float32).reshape(2, 3, 2)
    s, outs = _run(model, s0, xs)
    assert s.shape == (2, 2) and outs.shape == (2, 3, 2)
    np.testing.assert_array_equal(outs, s0[:, None, :] + np.cumsum(xs, axis=1))
    np.testing.assert_array_equal(s, s0 + xs.sum(1))
