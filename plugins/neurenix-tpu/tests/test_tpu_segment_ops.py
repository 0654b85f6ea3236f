"""The ops beyond the portable opset that tpu:0 declares for the transformers sweep (issue #41:
cumsum, mod, scatter_elements, scatter_nd, softplus, topk, trilu, each of which cut a model into device
segments around a cpu:0 round trip). Each is a one-node graph compiled for tpu:0 in fp32 against
the opset's NumPy reference (``run_graph``) on the same inputs, with the edge cases where a
lowering could drift from it: negative axes, ties (topk keeps the lower index first), negative
operands (mod's two sign conventions), repeated scatter indices (the last write wins, reductions
combine all), NaN and signed zeros. Each node must run on the device (no off-device node)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.graph.ir import Graph, Node, TensorSpec
from neurenix_core.graph.reference.run import run_graph
from neurenix_core.tensor.fallback import FallbackWarning

RNG = np.random.default_rng(41)


def _f(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _graph(op: str, xs: list[np.ndarray], attrs: dict[str, Any]) -> Graph:
    names = tuple(f"x{i}" for i in range(len(xs)))
    specs = tuple(TensorSpec(n, x.shape, "bool" if x.dtype == np.bool_ else str(x.dtype)) for n, x in zip(names, xs))
    return Graph(specs, (Node("n", op, names, "y", attrs),), ("y",))


TIES = np.array([[3.0, 1.0, 3.0, 2.0, 3.0, 1.0], [0.0, -0.0, np.nan, 5.0, np.nan, -1.0]], np.float32)
INT_A = np.array([-7, 7, -8, 9, 0, -9, np.iinfo(np.int64).min, 5], np.int64)
INT_B = np.array([2, -2, 3, -4, 3, 0, -1, -1], np.int64)
FLOAT_A = np.array([-7.5, 7.5, -6.0, 6.0, 0.0, -0.0, 1.0, -1.0, 2.5, np.inf], np.float32)
FLOAT_B = np.array([2.0, -2.0, 3.0, -3.0, -2.0, 2.0, np.inf, np.inf, 0.0, 2.0], np.float32)

#: (id, op, inputs, attrs)
CASES: list[tuple[str, str, list[np.ndarray], dict[str, Any]]] = [
    ("softplus", "softplus", [np.array([-100.0, -3.0, 0.0, 1e-3, 2.0, 30.0, 100.0], np.float32)], {}),
    ("softplus-3d", "softplus", [_f(2, 3, 4) * 10], {}),
    ("trilu-upper", "trilu", [_f(2, 4, 5)], {}),
    ("trilu-lower-k", "trilu", [_f(3, 4)], {"upper": False, "k": -1}),
    ("trilu-upper-k-bool", "trilu", [RNG.random((4, 4)) > 0.3], {"k": 2}),
    ("trilu-lower-int64", "trilu", [RNG.integers(-9, 9, (2, 3, 3)).astype(np.int64)], {"upper": False, "k": 1}),
    ("cumsum", "cumsum", [_f(3, 5)], {"axis": 1}),
    ("cumsum-neg-axis", "cumsum", [_f(2, 4, 3)], {"axis": -2}),
    ("cumsum-exclusive", "cumsum", [_f(3, 5)], {"axis": 1, "exclusive": True}),
    ("cumsum-reverse", "cumsum", [_f(3, 5)], {"axis": 0, "reverse": True}),
    ("cumsum-exclusive-reverse", "cumsum", [_f(4, 5)], {"axis": -1, "exclusive": True, "reverse": True}),
    ("cumsum-int64", "cumsum", [RNG.integers(-5, 5, (2, 6)).astype(np.int64)], {"axis": 1}),
    ("cumsum-int32-exclusive", "cumsum", [RNG.integers(-5, 5, (3, 4)).astype(np.int32)], {"axis": 0, "exclusive": True}),
    ("mod-int", "mod", [INT_A, INT_B], {}),
    ("mod-int-fmod", "mod", [INT_A, INT_B], {"fmod": True}),
    ("mod-int32-broadcast", "mod", [RNG.integers(-20, 20, (3, 4)).astype(np.int32), np.array([3, -3, 7, -5], np.int32)], {}),
    ("mod-float", "mod", [FLOAT_A, FLOAT_B], {}),
    ("mod-float-fmod", "mod", [FLOAT_A, FLOAT_B], {"fmod": True}),
    ("topk-ties", "topk", [TIES], {"k": 4}),
    ("topk-ties-indices", "topk", [TIES], {"k": 6, "output": 1}),
    ("topk-smallest-indices", "topk", [TIES], {"k": 5, "largest": False, "output": 1}),
    ("topk-smallest", "topk", [TIES], {"k": 3, "largest": False}),
    ("topk-axis0", "topk", [np.array([[1, 5], [3, 5], [3, 2]], np.float32)], {"k": 2, "axis": 0, "output": 1}),
    ("topk-neg-axis", "topk", [_f(2, 7, 3)], {"k": 3, "axis": -2}),
    ("topk-int64", "topk", [np.array([[4, 4, 1, 4, 9]], np.int64)], {"k": 3, "output": 1}),
    ("topk-k0", "topk", [_f(2, 5)], {"k": 0}),
    ("scatter_elements-dup", "scatter_elements",
     [_f(3, 4), np.array([[1, 1, 0], [2, 2, 2]], np.int64), _f(2, 3)], {"axis": 0}),
    ("scatter_elements-dup-axis1", "scatter_elements",
     [_f(3, 4), np.array([[3, 3], [0, -1], [-4, 0]], np.int64), _f(3, 2)], {"axis": -1}),
    *[(f"scatter_elements-{r}", "scatter_elements",
       [_f(3, 4), np.array([[1, 1, 0], [1, 2, 1]], np.int64), _f(2, 3)], {"axis": 0, "reduction": r})
      for r in ("add", "mul", "max", "min")],
    ("scatter_elements-int-add", "scatter_elements",
     [np.arange(6, dtype=np.int64).reshape(2, 3), np.array([[0, 0, 2]], np.int64), np.array([[5, 7, -1]], np.int64)],
     {"axis": 1, "reduction": "add"}),
    *[(f"scatter_elements-bool-{r}", "scatter_elements",
       [np.array([True, False, False, True]), np.array([1, 1, 2, 0, 0], np.int64), np.array([True, True, False, False, True])],
       {"reduction": r}) for r in ("add", "mul", "max", "min")],
    ("scatter_nd-rows-dup", "scatter_nd", [_f(4, 3), np.array([[1], [3], [1]], np.int64), _f(3, 3)], {}),
    ("scatter_nd-points", "scatter_nd", [_f(3, 4), np.array([[0, 1], [2, -1], [0, 1], [-3, 3]], np.int64), _f(4)], {}),
    *[(f"scatter_nd-{r}", "scatter_nd", [_f(4, 2), np.array([[[2], [0]], [[2], [-2]]], np.int64), _f(2, 2, 2)],
       {"reduction": r}) for r in ("add", "mul", "max", "min")],
]


def _compiled(graph: Graph) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)  # a node placed on cpu:0 fails here, by name
        return nx.compile(graph, device="tpu:0", precision="fp32", outputs="host", progress=False)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_op_runs_on_tpu_and_matches_the_reference(tpu: Any, case: tuple[str, str, list[np.ndarray], dict[str, Any]]) -> None:
    _, op, xs, attrs = case
    graph = _graph(op, xs, attrs)
    want = np.asarray(run_graph(graph, *xs))
    compiled = _compiled(graph)
    got = np.asarray(compiled(*xs))
    placement = compiled.placement
    assert not placement.off_device and not placement.execution, placement.line()
    assert got.shape == want.shape, (got.shape, want.shape)
    if want.dtype.kind == "f":
        assert got.dtype == np.float32, "float results come back as the graph's float32"
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)  # NaN where the reference has NaN
        # mod's zero remainders take the divisor's sign (NumPy), fmod's the dividend's
        np.testing.assert_array_equal(np.signbit(got[want == 0]), np.signbit(want[want == 0]))
    else:
        assert got.dtype == want.dtype, (got.dtype, want.dtype)
        np.testing.assert_array_equal(got, want)


def test_scatter_last_write_wins_over_many_duplicates(tpu: Any) -> None:
    """Every update lands on one of two rows: the reference keeps the last writer of each; XLA's
    own scatter would leave the winner unspecified."""
    data, updates = _f(2, 5), _f(64, 5)
    idx = (np.arange(64) % 2).reshape(64, 1).astype(np.int64)
    graph = _graph("scatter_nd", [data, idx, updates], {})
    got = np.asarray(_compiled(graph)(data, idx, updates))
    np.testing.assert_array_equal(got, run_graph(graph, data, idx, updates))
    np.testing.assert_array_equal(got, updates[[62, 63]])


def test_scatter_out_of_range_index_is_dropped_not_wrapped(tpu: Any) -> None:
    """The reference raises on an index out of range; a traced program cannot raise on data, so
    that update is dropped (as gather fills): an index of -n-1 must not wrap to row n-1."""
    data, updates = _f(3, 2), _f(2, 2)
    idx = np.array([[-4], [5]], np.int64)
    graph = _graph("scatter_nd", [data, idx, updates], {})
    with pytest.raises(ValueError, match="out of range"):
        run_graph(graph, data, idx, updates)
    np.testing.assert_array_equal(np.asarray(_compiled(graph)(data, idx, updates)), data)
