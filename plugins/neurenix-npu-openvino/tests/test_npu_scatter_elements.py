"""scatter_elements on npu:0: lowered to OpenVINO's ScatterElementsUpdate (every reduction,
negative indices, int64 data), so a transformers StaticCache's cache write (index_copy_,
imported as scatter_elements) no longer splits the npu graph. Each case is compiled through
nx.compile in fp32, must run whole on npu:0 and match the core's float64 reference."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from neurenix_npu_openvino.lowering import lower_graph

import neurenix_core as nx
from neurenix_core.errors import UnsupportedOperationError
from neurenix_core.graph.ir import Graph, Node, TensorSpec
from neurenix_core.graph.reference.run import run_graph

pytest.importorskip("openvino")

TOL = 1e-5
REDUCTIONS = ("none", "add", "mul", "max", "min")


def _scatter(data: np.ndarray, indices: np.ndarray, updates: np.ndarray, axis: int, reduction: str = "none") -> Graph:
    specs = tuple(TensorSpec(name, tuple(a.shape), str(a.dtype)) for name, a in (("data", data), ("indices", indices), ("updates", updates)))
    node = Node("scatter", "scatter_elements", ("data", "indices", "updates"), "y", {"axis": axis, "reduction": reduction})
    return Graph(specs, (node,), ("y",))


def _indices(rng: np.random.Generator, shape: tuple[int, ...], axis: int, size: int, unique: bool) -> np.ndarray:
    """Indices into an axis of ``size``, half of them negative (counted from the end). ``unique``:
    no position written twice along the axis (ONNX leaves a repeated "none" write undefined)."""
    axis = axis % len(shape)
    if unique:
        moved = (shape[axis],) + shape[:axis] + shape[axis + 1 :]
        columns = [rng.permutation(size)[: shape[axis]] for _ in range(int(np.prod(moved[1:])))]
        idx = np.moveaxis(np.stack(columns, axis=-1).reshape(moved), 0, axis)
    else:
        idx = rng.integers(0, size, shape)
    return np.where(rng.random(shape) < 0.5, idx - size, idx).astype(np.int64)


def _on_npu(graph: Graph, *inputs: np.ndarray) -> np.ndarray:
    """The graph compiled for npu:0, which must run all of it (no cpu:0 segment), on ``inputs``."""
    with nx.fallback_policy("error"):  # a cpu:0 segment would raise
        compiled = nx.compile(graph, device="npu:0", precision="fp32", progress=False, outputs="host")
        got = np.asarray(compiled(*inputs))
    placement = compiled.placement
    assert not placement.partitioned and not placement.off_device, placement.line()
    computed = sum(1 for n in graph.nodes if n.op != "constant")  # constants are data, not counted
    assert dict(placement.nodes) == {"npu:0": computed}, placement.line()
    return got


def _check(graph: Graph, *inputs: np.ndarray) -> None:
    want = np.asarray(run_graph(graph, *inputs))
    got = _on_npu(graph, *inputs)
    assert got.shape == want.shape, (got.shape, want.shape)
    if want.dtype.kind == "f":  # the reference computes in float64, the device in float32
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL)
    else:
        assert got.dtype == want.dtype, (got.dtype, want.dtype)
        np.testing.assert_array_equal(got, want)


#: (data shape, indices/updates shape, axis): 2-D and 4-D, axes 0, 1 and -1, indices smaller than
#: data outside the axis (as torch.scatter allows) and longer along it (repeated positions).
SHAPES = [
    ((5, 4), (3, 4), 0),
    ((5, 4), (5, 3), 1),
    ((5, 4), (2, 3), -1),
    ((2, 3, 4, 5), (2, 3, 4, 5), 1),
    ((2, 3, 4, 5), (1, 2, 3, 7), -1),
    ((3, 2, 4, 2), (5, 2, 4, 2), 0),
]


#: Each shape with each reduction, but no plain write with more writes along the axis than
#: positions (some position is then written twice, which ONNX leaves undefined).
FLOAT_CASES = [(*shape, r) for shape in SHAPES for r in REDUCTIONS if r != "none" or shape[1][shape[2]] <= shape[0][shape[2]]]


@pytest.mark.parametrize("data_shape, index_shape, axis, reduction", FLOAT_CASES)
def test_float32_scatter_matches_the_reference(npu: Any, data_shape: tuple[int, ...], index_shape: tuple[int, ...], axis: int,
                                               reduction: str) -> None:
    rng = np.random.default_rng(len(data_shape) * 10 + axis)
    size = data_shape[axis]
    unique = reduction == "none"
    data = rng.standard_normal(data_shape).astype(np.float32)
    updates = rng.standard_normal(index_shape).astype(np.float32)
    indices = _indices(rng, index_shape, axis, size, unique)
    _check(_scatter(data, indices, updates, axis, reduction), data, indices, updates)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_int64_data_scatter_matches_the_reference(npu: Any, reduction: str) -> None:
    rng = np.random.default_rng(7)
    data = rng.integers(-20, 20, (4, 6)).astype(np.int64)
    updates = rng.integers(-20, 20, (4, 3)).astype(np.int64)
    indices = _indices(rng, (4, 3), -1, 6, unique=reduction == "none")
    _check(_scatter(data, indices, updates, -1, reduction), data, indices, updates)


def test_int32_indices_and_updates_of_another_dtype(npu: Any) -> None:
    # The reference casts updates to data's dtype; int32 indices are taken as they are.
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    indices = np.array([[2, -1], [0, -3]], np.int32)
    updates = np.array([[7, -8], [9, 10]], np.int64)
    _check(_scatter(data, indices, updates, 1, "add"), data, indices, updates)


def test_negative_indices_count_from_the_end(npu: Any) -> None:
    """OpenVINO's ScatterElementsUpdate takes negative indices itself (its spec), so the lowering
    passes them through: -1 and the last position are the same place."""
    data = np.zeros((2, 4), np.float32)
    indices, updates = np.array([[-1, 0], [-4, -2]], np.int64), np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    got = _on_npu(_scatter(data, indices, updates, 1), data, indices, updates)
    np.testing.assert_array_equal(got, [[2.0, 0.0, 0.0, 1.0], [3.0, 0.0, 4.0, 0.0]])


def test_lowers_to_one_scatter_elements_update() -> None:
    data, updates = np.zeros((3, 4), np.float32), np.ones((3, 2), np.float32)
    indices = np.array([[0, -1]] * 3, np.int64)
    for reduction, mode in (("none", "none"), ("add", "sum"), ("mul", "prod"), ("max", "max"), ("min", "min")):
        model = lower_graph(_scatter(data, indices, updates, -1, reduction))
        [op] = [op for op in model.get_ordered_ops() if op.get_type_name() == "ScatterElementsUpdate"]
        attrs = op.get_attributes()
        assert attrs["reduction"] == mode and attrs["use_init_val"], (reduction, attrs)
        assert "Select" not in {o.get_type_name() for o in model.get_ordered_ops()}  # negative indices: no wrapping needed


def test_a_static_cache_update_runs_whole_on_the_npu(npu: Any) -> None:
    """index_copy on a (batch, heads, length, dim) cache at the decode step's position, imported
    from PyTorch (reshape + expand of the int64 position, then scatter_elements): one npu segment."""
    torch = pytest.importorskip("torch")
    from neurenix_core import nn

    class CacheWrite(torch.nn.Module):
        def forward(self, cache: Any, position: Any, new: Any) -> Any:
            return cache.index_copy(2, position, new) * 2.0

    rng = np.random.default_rng(3)
    cache = rng.standard_normal((1, 2, 8, 4)).astype(np.float32)
    position, new = np.array([5], np.int64), rng.standard_normal((1, 2, 1, 4)).astype(np.float32)
    graph = nn.from_torch(CacheWrite(), tuple(torch.from_numpy(a) for a in (cache, position, new)), static=True).to_graph()
    assert "scatter_elements" in {n.op for n in graph.nodes}
    got = _on_npu(graph, cache, position, new)
    want = cache.copy()
    want[:, :, 5:6] = new
    np.testing.assert_allclose(got, want * 2.0, rtol=TOL, atol=TOL)


def test_host_runtime_takes_int64_indices_but_not_int64_data() -> None:
    """On cpu:0 OpenVINO holds int64 as int32: a scatter's indices are exact that way (as a
    gather's), int64 data or updates beyond 2**31 would not be."""
    data, updates = np.zeros((2, 3), np.float32), np.ones((2, 2), np.float32)
    indices = np.array([[0, -1], [1, 0]], np.int64)
    graph = _scatter(data, indices, updates, 1, "add")
    compiled = nx.compile(graph, device="cpu", runtime="openvino")
    np.testing.assert_array_equal(compiled(data, indices, updates).numpy(), run_graph(graph, data, indices, updates))
    assert "runtime openvino" in compiled.summary
    wide = np.zeros((2, 3), np.int64)
    with pytest.raises(UnsupportedOperationError, match=r"openvino holds 64-bit integers as 32-bit ones: layer 'scatter'"):
        nx.compile(_scatter(wide, indices, wide[:, :2], 1), device="cpu", runtime="openvino")(wide, indices, wide[:, :2])
