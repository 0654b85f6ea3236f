"""from_onnx on cpu:0: one-node models of ONNX's tensor, reduction and generator families, each
compared with a NumPy expectation of ONNX's semantics written out here, exact dtype and shape.
The cases are the ones a plain mapping gets silently wrong: negative axes and indices, ties,
empty reductions, 0-d results, integer dtypes, several outputs of one node."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import helper
from onnx_nodes import check, one_node_model, run_node

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.errors import NeurenixError

RNG = np.random.default_rng(7)


def _model(op: str, inputs: dict[str, np.ndarray], outputs: list[str], **kw: Any) -> Any:
    return one_node_model(op, inputs, outputs, **{"opset": 24, **kw})


def run(op: str, inputs: dict[str, np.ndarray], outputs: list[str] | None = None, **kw: Any) -> list[np.ndarray]:
    return run_node(op, inputs, outputs, **{"opset": 24, **kw})


def i64(*v: int) -> np.ndarray:
    return np.asarray(v, np.int64)


X = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)


# ----------------------------------------------------------------------------- shape
@pytest.mark.parametrize("axis", [-4, -3, -1, 0, 2, 4])
def test_flatten_counts_a_negative_axis_from_the_end(axis: int) -> None:
    k = axis + 4 if axis < 0 else axis
    (y,) = run("Flatten", {"x": X}, attrs={"axis": axis})
    check(y, X.reshape(int(np.prod(X.shape[:k])), -1))


def test_pad_on_selected_axes_with_negative_pads_and_integer_value() -> None:
    x = RNG.integers(-9, 9, (3, 4, 5)).astype(np.int32)
    (y,) = run("Pad", {"x": x}, consts={"pads": i64(2, -1, 0, 3), "value": np.asarray(7, np.int32), "axes": i64(-1, 0)},
               order=["x", "pads", "value", "axes"])
    # pads are (begins..., ends...) in the order of axes: axis 2 gets (2, 0), axis 0 gets (-1, 3): its first row goes
    want = np.pad(x[1:], ((0, 3), (0, 0), (2, 0)), constant_values=7)
    check(y, want)


@pytest.mark.parametrize("mode", ["reflect", "edge", "wrap"])
def test_pad_modes(mode: str) -> None:
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    (y,) = run("Pad", {"x": x}, attrs={"mode": mode}, consts={"pads": i64(1, 2, 2, 1)})
    check(y, np.pad(x, ((1, 2), (2, 1)), mode=mode))


def test_tile_and_trilu() -> None:
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    check(run("Tile", {"x": x}, consts={"r": i64(2, 3)})[0], np.tile(x, (2, 3)))
    m = RNG.standard_normal((2, 4, 5)).astype(np.float32)
    check(run("Trilu", {"x": m}, consts={"k": i64(-1)})[0], np.triu(m, -1))
    check(run("Trilu", {"x": m}, attrs={"upper": 0}, consts={"k": i64(2)})[0], np.tril(m, 2))


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space_inverts_space_to_depth(mode: str) -> None:
    x = RNG.standard_normal((2, 3, 4, 6)).astype(np.float32)
    (d,) = run("SpaceToDepth", {"x": x}, attrs={"blocksize": 2, "mode": mode})
    n, c, h, w = x.shape
    t = x.reshape(n, c, h // 2, 2, w // 2, 2)
    want = t.transpose(0, 3, 5, 1, 2, 4) if mode == "DCR" else t.transpose(0, 1, 3, 5, 2, 4)
    check(d, want.reshape(n, c * 4, h // 2, w // 2))
    check(run("DepthToSpace", {"x": d}, attrs={"blocksize": 2, "mode": mode})[0], x)


def test_center_crop_pad_crops_and_pads_with_the_odd_element_at_the_end() -> None:
    x = RNG.standard_normal((5, 4, 3)).astype(np.float32)
    (y,) = run("CenterCropPad", {"x": x}, attrs={"axes": [0, -1]}, consts={"shape": i64(2, 6)})
    want = np.zeros((2, 4, 6), np.float32)
    want[:, :, 1:4] = x[1:3]  # 5 -> 2 drops 1 before, 2 after; 3 -> 6 adds 1 before, 2 after
    check(y, want)


# ----------------------------------------------------------------------------- indexing and scatter
def test_gathers_take_negative_indices_and_gather_nd_batch_dims() -> None:
    data = RNG.standard_normal((3, 4)).astype(np.float32)
    check(run("Gather", {"x": data}, attrs={"axis": 1}, consts={"i": i64(-1, 0)})[0], data[:, [3, 0]])
    idx = np.asarray([[-1, 0], [2, -4], [0, 1]], np.int64)
    check(run("GatherElements", {"x": data}, attrs={"axis": 1}, consts={"i": idx})[0], np.take_along_axis(data, idx % 4, 1))
    batched = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    nd = np.asarray([[[1, -1]], [[-3, 0]]], np.int64)  # (batch 2, 1 lookup, 2 coordinates)
    (y,) = run("GatherND", {"x": batched}, attrs={"batch_dims": 1}, consts={"i": nd})
    check(y, np.stack([batched[0, 1, 3], batched[1, 0, 0]])[:, None])


def test_scatter_nd_add_combines_duplicate_indices() -> None:
    data = np.arange(8, dtype=np.float32)
    (y,) = run("ScatterND", {"x": data}, attrs={"reduction": "add"},
               consts={"i": np.asarray([[1], [1], [-1]], np.int64), "u": np.asarray([5, 6, 7], np.float32)})
    want = data.copy()
    want[1] += 11
    want[7] += 7
    check(y, want)


@pytest.mark.parametrize("reduction", ["none", "mul", "max"])
def test_scatter_elements_along_axis_with_negative_indices(reduction: str) -> None:
    data = RNG.standard_normal((3, 4)).astype(np.float32)
    idx = np.asarray([[-1, 0], [1, 2], [3, -4]], np.int64)
    upd = RNG.standard_normal((3, 2)).astype(np.float32)
    (y,) = run("ScatterElements", {"x": data}, attrs={"axis": 1, "reduction": reduction}, consts={"i": idx, "u": upd})
    want = data.copy()
    for r in range(3):
        for c in range(2):
            j = idx[r, c] % 4
            want[r, j] = {"none": upd[r, c], "mul": want[r, j] * upd[r, c], "max": max(want[r, j], upd[r, c])}[reduction]
    check(y, want)


def test_tensor_scatter_circular_writes_per_batch() -> None:
    cache = np.zeros((2, 4, 3), np.float32)
    upd = RNG.standard_normal((2, 2, 3)).astype(np.float32)
    (y,) = run("TensorScatter", {"c": cache, "u": upd}, attrs={"mode": "circular", "axis": 1}, consts={"w": i64(3, 1)})
    want = cache.copy()
    want[0, [3, 0]] = upd[0]
    want[1, [1, 2]] = upd[1]
    check(y, want)


def test_one_hot_negative_indices_and_axis() -> None:
    idx = np.asarray([[0, -1], [5, 2]], np.int64)  # -1 is depth - 1; 5 is out of range: all "off"
    (y,) = run("OneHot", {"i": idx}, attrs={"axis": 1}, consts={"d": np.asarray(4, np.float32), "v": np.asarray([2, 9], np.int32)})
    want = np.full((2, 4, 2), 2, np.int32)
    want[0, 0, 0] = want[0, 3, 1] = want[1, 2, 1] = 9
    check(y, want)


def test_reverse_sequence_per_batch_lengths() -> None:
    x = RNG.standard_normal((4, 3, 2)).astype(np.float32)  # (time, batch, feature)
    (y,) = run("ReverseSequence", {"x": x, "lens": i64(4, 1, 2)})
    want = x.copy()
    for b, n in enumerate((4, 1, 2)):
        want[:n, b] = x[:n, b][::-1]
    check(y, want)


# ----------------------------------------------------------------------------- several outputs, value-dependent shapes
def test_topk_values_and_indices_keep_the_lower_index_on_ties() -> None:
    x = np.asarray([[3, 1, 3, 2], [0, 0, 1, 0]], np.float16)
    values, indices = run("TopK", {"x": x}, ["v", "i"], consts={"k": i64(3)})
    check(values, np.asarray([[3, 3, 2], [1, 0, 0]], np.float16))
    check(indices, np.asarray([[0, 2, 3], [2, 0, 1]], np.int64))
    (smallest,) = run("TopK", {"x": x}, ["", "i"], attrs={"largest": 0, "axis": 0}, consts={"k": i64(1)})
    check(smallest, np.asarray([[1, 1, 1, 1]], np.int64))
    (ties,) = run("TopK", {"x": np.zeros((5,), np.int32)}, ["", "i"], attrs={"largest": 0}, consts={"k": i64(2)})
    check(ties, i64(0, 1))


def test_unique_unsorted_outputs_in_first_occurrence_order() -> None:
    x = np.asarray([2, 1, 1, 3, 4, 3], np.float32)
    y, first, inverse, counts = run("Unique", {"x": x}, ["y", "f", "inv", "c"], attrs={"sorted": 0})
    check(y, np.asarray([2, 1, 3, 4], np.float32))
    check(first, i64(0, 1, 3, 4))
    check(inverse, i64(0, 1, 1, 2, 3, 2))
    check(counts, i64(1, 2, 2, 1))


def test_nonzero_and_compress() -> None:
    x = np.asarray([[1, 0], [0, 3]], np.int32)
    check(run("NonZero", {"x": x})[0], np.asarray([[0, 1], [0, 1]], np.int64))
    data = RNG.standard_normal((3, 2)).astype(np.float32)
    check(run("Compress", {"x": data}, attrs={"axis": -2}, consts={"c": np.asarray([False, True, True])})[0], data[1:])
    check(run("Compress", {"x": data}, consts={"c": np.asarray([True, False, False, True])})[0], data.reshape(-1)[[0, 3]])


# ----------------------------------------------------------------------------- reductions
def test_reduce_all_axes_without_keepdims_is_0_d() -> None:
    (y,) = run("ReduceMean", {"x": X}, attrs={"keepdims": 0})
    check(y, np.asarray(X.mean(), np.float32))


def test_integer_reductions_keep_the_integer_dtype() -> None:
    x = RNG.integers(-50, 50, (3, 4)).astype(np.int32)
    check(run("ReduceSum", {"x": x}, consts={"a": i64(-1)})[0], x.sum(axis=-1, keepdims=True).astype(np.int32))
    check(run("ReduceMax", {"x": x}, attrs={"keepdims": 0}, consts={"a": i64(0)})[0], x.max(axis=0))


@pytest.mark.parametrize("op,identity", [("ReduceSum", 0.0), ("ReduceProd", 1.0), ("ReduceMax", -np.inf), ("ReduceMin", np.inf),
                                         ("ReduceL2", 0.0), ("ReduceLogSumExp", -np.inf), ("ReduceLogSum", -np.inf)])
def test_reducing_an_empty_set_gives_the_identity(op: str, identity: float) -> None:
    x = np.zeros((2, 0, 4), np.float32)
    (y,) = run(op, {"x": x}, consts={"a": i64(1)})
    check(y, np.full((2, 1, 4), identity, np.float32))


def test_integer_max_of_an_empty_set_is_the_dtype_minimum() -> None:
    (y,) = run("ReduceMax", {"x": np.zeros((0, 3), np.int64)}, attrs={"keepdims": 0}, consts={"a": i64(0)})
    check(y, np.full((3,), np.iinfo(np.int64).min, np.int64))


def test_norm_and_log_reductions() -> None:
    x = RNG.standard_normal((3, 4, 2)).astype(np.float32)
    a = {"a": i64(0, -1)}
    check(run("ReduceL1", {"x": x}, consts=a)[0], np.abs(x).sum(axis=(0, 2), keepdims=True))
    check(run("ReduceL2", {"x": x}, consts=a)[0], np.sqrt((x * x).sum(axis=(0, 2), keepdims=True)))
    check(run("ReduceSumSquare", {"x": x}, attrs={"keepdims": 0}, consts=a)[0], (x * x).sum(axis=(0, 2)))
    check(run("ReduceLogSum", {"x": np.abs(x)}, consts=a)[0], np.log(np.abs(x).sum(axis=(0, 2), keepdims=True)))
    big = x * 100  # exp alone would overflow float32
    check(run("ReduceLogSumExp", {"x": big}, consts=a)[0],
          np.log(np.exp(big.astype(np.float64)).sum(axis=(0, 2), keepdims=True)).astype(np.float32), rtol=1e-4)


def test_noop_with_empty_axes_is_the_identity() -> None:
    check(run("ReduceSum", {"x": X}, attrs={"noop_with_empty_axes": 1})[0], X)


@pytest.mark.parametrize("op,fn", [("ArgMax", np.argmax), ("ArgMin", np.argmin)])
def test_arg_reductions_select_last_index(op: str, fn: Any) -> None:
    x = np.asarray([[2, 2, 1, 1], [5, 3, 5, 3]], np.float32)
    (y,) = run(op, {"x": x}, attrs={"axis": -1, "keepdims": 0, "select_last_index": 1})
    check(y, (3 - fn(x[:, ::-1], axis=-1)).astype(np.int64))
    (first,) = run(op, {"x": x}, attrs={"axis": 1})
    check(first, fn(x, axis=1, keepdims=True).astype(np.int64))


# ----------------------------------------------------------------------------- generators and shape queries
def test_size_is_a_0_d_int64() -> None:
    check(run("Size", {"x": X})[0], np.asarray(X.size, np.int64))


def test_eye_like_with_offset_and_dtype() -> None:
    x = np.zeros((3, 5), np.float32)
    check(run("EyeLike", {"x": x}, attrs={"k": -1, "dtype": onnx.TensorProto.INT32})[0], np.eye(3, 5, k=-1, dtype=np.int32))
    check(run("EyeLike", {"x": x}, attrs={"k": 2})[0], np.eye(3, 5, k=2, dtype=np.float32))


@pytest.mark.parametrize("periodic", [0, 1])
def test_windows(periodic: int) -> None:
    n = np.arange(10)
    period = 10 if periodic else 9
    want = {
        "HannWindow": np.sin(np.pi * n / period) ** 2,
        "HammingWindow": 25 / 46 - 21 / 46 * np.cos(2 * np.pi * n / period),
        "BlackmanWindow": 0.42 - 0.5 * np.cos(2 * np.pi * n / period) + 0.08 * np.cos(4 * np.pi * n / period),
    }
    for op, values in want.items():
        (y,) = run(op, {"size": np.asarray(10, np.int64)}, attrs={"periodic": periodic})
        check(y, values.astype(np.float32), atol=1e-6)


def test_a_value_dependent_shape_from_a_computed_value_is_refused_by_name() -> None:
    # 100 elements: more than a value input may hold (onnx_common.VALUE_INPUT_LIMIT), so the
    # model is not built per value of x and NonZero's output size is unknown until run time.
    x = np.tile(np.asarray([1.0, 0.0], np.float32), 50)
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("NonZero", ["r"], ["y"], name="nz")], "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x.shape)], [helper.make_tensor_value_info("y", onnx.TensorProto.INT64, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24)])
    with pytest.raises(NeurenixError, match=r"'nz' \(op NonZero\)"):
        nx.compile(nn.from_onnx(model), device="cpu:0", precision="fp32", outputs="host", progress=False)(x)


@pytest.mark.parametrize("axis", [0, 2, -1])
def test_flatten_keeps_a_dynamic_batch_dynamic(axis: int) -> None:
    graph = helper.make_graph([helper.make_node("Flatten", ["x"], ["y"], axis=axis)], "g",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 3, 4])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24)])
    compiled = nx.compile(nn.from_onnx(model), device="cpu:0", precision="fp32", outputs="host", progress=False)
    k = axis + 3 if axis < 0 else axis
    for batch in (2, 5):
        x = RNG.standard_normal((batch, 3, 4)).astype(np.float32)
        check(np.asarray(compiled(x)), x.reshape(int(np.prod(x.shape[:k])), -1))
