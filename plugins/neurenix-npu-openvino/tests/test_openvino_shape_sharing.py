"""cpu:0's OpenVINO runtime compiles one model for the input shapes of a graph that lower to the same
OpenVINO model up to their input sizes (shape_sharing.py): one copy of the weights for every
batch size or cache length, each shape checked by its own lowering before it runs on the shared
model, and a shape whose lowering differs compiled on its own."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.graph.ir import Graph, Node, TensorSpec
from neurenix_core.graph.reference.run import run_graph

pytest.importorskip("openvino")

if TYPE_CHECKING:
    from neurenix_npu_openvino.host import OpenVINOHostRuntime

_RNG = np.random.default_rng(0)
_W1 = _RNG.standard_normal((32, 16)).astype(np.float32)
_W2 = _RNG.standard_normal((4, 32)).astype(np.float32)


def _mlp(batch: int | None = None, w2: np.ndarray = _W2) -> Graph:
    """linear -> gelu -> linear with a dynamic batch (``batch`` None), or static at ``batch``."""
    spec = TensorSpec("x", (2, 16), "float32", dynamic=(0,)) if batch is None else TensorSpec("x", (batch, 16))
    nodes = (Node("fc1", "linear", ("x",), "h", {}, {"weight": _W1}), Node("act", "gelu", ("h",), "g"),
             Node("fc2", "linear", ("g",), "y", {}, {"weight": w2}))
    return Graph((spec,), nodes, ("y",))


def _flattening(batch: int) -> Graph:
    """A reshape to a size of the batch: its lowering holds the batch, so shapes cannot share."""
    return Graph((TensorSpec("x", (batch, 4, 4)),), (Node("r", "reshape", ("x",), "y", {"shape": (batch * 2, 8)}),), ("y",))


def _runtime() -> OpenVINOHostRuntime:
    from neurenix_npu_openvino.host import OpenVINOHostRuntime

    return OpenVINOHostRuntime(("float32",))


def test_signature_leaves_out_input_sizes_only() -> None:
    from neurenix_npu_openvino.lowering import lower_graph
    from neurenix_npu_openvino.shape_sharing import signature

    props = {"INFERENCE_PRECISION_HINT": "f32"}
    two, five = signature(lower_graph(_mlp(2), device="cpu:0"), props), signature(lower_graph(_mlp(5), device="cpu:0"), props)
    assert two == five
    other_weights = _W2.copy()
    other_weights[0, 0] += 1.0  # one number of one constant
    assert signature(lower_graph(_mlp(2, other_weights), device="cpu:0"), props) != two
    assert signature(lower_graph(_mlp(2), device="cpu:0"), {**props, "INFERENCE_NUM_THREADS": 1}) != two
    assert signature(lower_graph(_flattening(2), device="cpu:0"), props) != signature(lower_graph(_flattening(3), device="cpu:0"), props)


def test_shapes_of_one_lowering_run_on_one_compiled_model() -> None:
    from neurenix_core.graph.ir.host import HostOptions

    runtime = _runtime()
    models = {b: runtime.compile(_mlp(b), HostOptions()) for b in (2, 5, 3)}
    first = models[2].compiled
    assert all(m.compiled is first for m in models.values())  # the batch-2 model was replaced by the dynamic one
    assert "compiled one model of 2 input shapes with the same lowering (x[0] dynamic): one copy of the weights" in models[5].summary
    assert "runs on the compiled model of 3 input shapes" in models[3].summary
    for b, model in models.items():  # every shape, the first one included (it runs on the replacement now)
        x = _RNG.standard_normal((b, 16)).astype(np.float32)
        np.testing.assert_allclose(model(x)[0], run_graph(_mlp(b), x), rtol=1e-5, atol=1e-5)


def test_calls_during_a_replacement_run_on_the_old_or_the_new_model() -> None:
    """A thread calls the batch-2 shape while other batch sizes replace the model it runs on: every
    call returns the reference's result (a call in flight keeps the old model, a later one waits for
    or takes the new one), and the old model's requests are dropped."""
    import threading

    from neurenix_core.graph.ir.host import HostOptions

    runtime = _runtime()
    first = runtime.compile(_mlp(2), HostOptions())
    x = _RNG.standard_normal((2, 16)).astype(np.float32)
    want = run_graph(_mlp(2), x)
    errors: list[float] = []
    stop = threading.Event()

    def calls() -> None:
        while not stop.is_set():
            errors.append(float(np.abs(first(x)[0] - want).max()))

    worker = threading.Thread(target=calls)
    worker.start()
    try:
        for b in (5, 3, 7, 11):  # batch 5 replaces the model (the batch axis made dynamic), the others run on it
            y = _RNG.standard_normal((b, 16)).astype(np.float32)
            np.testing.assert_allclose(runtime.compile(_mlp(b), HostOptions())(y)[0], run_graph(_mlp(b), y), rtol=1e-5, atol=1e-5)
    finally:
        stop.set()
        worker.join()
    assert errors and max(errors) < 1e-5
    assert first.compiled is runtime.compile(_mlp(13), HostOptions()).compiled


def test_a_shape_whose_lowering_differs_compiles_alone() -> None:
    from neurenix_core.graph.ir.host import HostOptions

    runtime = _runtime()
    two, three = (runtime.compile(_flattening(b), HostOptions()) for b in (2, 3))
    assert two.compiled is not three.compiled and "same lowering" not in three.summary
    x = np.arange(48, dtype=np.float32).reshape(3, 4, 4)
    np.testing.assert_array_equal(three(x)[0], x.reshape(6, 8))


def test_nx_compile_shares_one_model_across_batch_sizes() -> None:
    """What a user sees: a dynamic-batch model on cpu:0's openvino runtime, called at three batch
    sizes, gives the interpreter's results and says it holds one copy of the weights."""
    compiled = nx.compile(_mlp(), device="cpu", runtime="openvino")
    for b in (1, 4, 7):
        x = _RNG.standard_normal((b, 16)).astype(np.float32)
        np.testing.assert_allclose(compiled(x).numpy(), run_graph(_mlp(b), x), rtol=1e-5, atol=1e-5)
    assert "3 input shapes with the same lowering (x[0] dynamic)" in compiled.summary


def test_a_slice_from_the_end_lowers_the_same_at_every_length() -> None:
    """A positive-step slice is lowered with the graph's own bounds (negative from the end, or past
    the end), not bounds resolved against one size: a decode step's split attention then lowers
    the same at every cache length."""
    from neurenix_npu_openvino.lowering import lower_graph
    from neurenix_npu_openvino.shape_sharing import signature

    def tail(length: int) -> Graph:
        return Graph((TensorSpec("x", (1, length)),),
                     (Node("s", "slice", ("x",), "y", {"starts": (-1,), "ends": (2**62,), "axes": (1,), "steps": (1,)}),), ("y",))

    assert signature(lower_graph(tail(5), device="cpu:0"), {}) == signature(lower_graph(tail(9), device="cpu:0"), {})
    x = np.arange(9, dtype=np.float32)[None]
    compiled = nx.compile(tail(9), device="cpu", runtime="openvino")
    np.testing.assert_array_equal(compiled(x).numpy(), x[:, -1:])


def _heads(length: int) -> Graph:
    """(1, L, 32) -> (1, L, 4, 8) -> expanded to (2, L, 4, 8): an attention's head split and a
    broadcast, whose targets hold the length."""
    nodes = (Node("r", "reshape", ("x",), "h", {"shape": (1, length, 4, 8)}),
             Node("e", "expand", ("h",), "y", {"shape": (2, length, 4, 8)}))
    return Graph((TensorSpec("x", (1, length, 32)),), nodes, ("y",))


def test_reshape_and_expand_targets_leave_out_the_sizes_an_input_carries() -> None:
    """Reshape with 0 (copy) and -1 (infer), Broadcast with 1 where the input has the size
    (BIDIRECTIONAL): lengths 5 and 9 lower to one model, and each result is the reference's."""
    from neurenix_npu_openvino.lower_shape import reshape_pattern
    from neurenix_npu_openvino.lowering import lower_graph
    from neurenix_npu_openvino.shape_sharing import signature

    assert reshape_pattern((1, 16, 32), (1, 16, 4, 8)) == [0, 0, 4, -1]
    assert reshape_pattern((1, 9, 16, 8), (1, 3, 48, 8)) == [0, 3, -1, 0]
    assert reshape_pattern((6,), (2, 3)) == [2, -1]
    assert signature(lower_graph(_heads(5), device="cpu:0"), {}) == signature(lower_graph(_heads(9), device="cpu:0"), {})
    for length in (5, 9):
        x = _RNG.standard_normal((1, length, 32)).astype(np.float32)
        np.testing.assert_array_equal(nx.compile(_heads(length), device="cpu", runtime="openvino")(x).numpy(),
                                      np.broadcast_to(x.reshape(1, length, 4, 8), (2, length, 4, 8)))
