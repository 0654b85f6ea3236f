"""An int64 input as NumPy's ``longlong`` (what ONNX Runtime returns on Linux, where ``np.int64`` is
``long``): the same dtype, another type number, which LiteRT's binding refused as NOTYPE. The
runner passes it as int64, on the one-input hot path and on the several-input path."""

from __future__ import annotations

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.graph.ir import Graph, Node, TensorSpec
from neurenix_core.graph.reference.run import run_graph

pytest.importorskip("ai_edge_litert")
if np.dtype(np.longlong).num == np.dtype(np.int64).num:
    pytest.skip("np.longlong is np.int64 on this platform: nothing to tell apart", allow_module_level=True)

RNG = np.random.default_rng(3)
WEIGHT = RNG.standard_normal((40, 8)).astype(np.float32)


def _ids() -> np.ndarray:
    ids = RNG.integers(0, 40, (2, 5)).astype(np.longlong)
    assert ids.dtype == np.int64 and ids.dtype.num != np.dtype(np.int64).num
    return ids


def test_one_longlong_input(edgetpu: object) -> None:
    graph = Graph((TensorSpec("ids", (2, 5), "int64"),), (Node("e", "embedding", ("ids",), "h", {}, {"weight": WEIGHT}),), ("h",))
    ids = _ids()
    got = nx.compile(graph, device="edgetpu:0", precision="fp32")(ids).numpy()
    np.testing.assert_allclose(got, run_graph(graph, ids.astype(np.int64)), rtol=1e-6)


def test_longlong_among_several_inputs(edgetpu: object) -> None:
    graph = Graph((TensorSpec("ids", (2, 5), "int64"), TensorSpec("x", (2, 5, 8))),
                  (Node("e", "embedding", ("ids",), "h", {}, {"weight": WEIGHT}), Node("a", "add", ("h", "x"), "y")), ("y",))
    ids, x = _ids(), RNG.standard_normal((2, 5, 8)).astype(np.float32)
    got = nx.compile(graph, device="edgetpu:0", precision="fp32")(ids, x).numpy()
    np.testing.assert_allclose(got, run_graph(graph, ids.astype(np.int64), x), rtol=1e-6)


def test_a_longlong_input_litert_still_refuses_is_a_typed_error(edgetpu: object) -> None:
    """Retyped and refused again (the wrong shape): the runner's ShapeError, not LiteRT's ValueError."""
    from neurenix_core.errors import ShapeError

    graph = Graph((TensorSpec("ids", (2, 5), "int64"),), (Node("e", "embedding", ("ids",), "h", {}, {"weight": WEIGHT}),), ("h",))
    compiled = nx.compile(graph, device="edgetpu:0", precision="fp32")
    compiled(_ids())
    runner = compiled.native((2, 5)).runner
    with pytest.raises(ShapeError, match="LiteRT refused the input"):
        runner.invoke1(np.zeros((3, 5), np.longlong))
