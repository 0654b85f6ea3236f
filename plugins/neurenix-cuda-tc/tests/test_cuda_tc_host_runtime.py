"""PyTorch CPU as a host runtime for cpu:0 (``runtime="torch"``, issue #31): the cuda
plugin's torch lowering run on the CPU in float32 under inference_mode, against PyTorch fp32 and
the core's float reference; named in the summary and placement report; refusals typed; the
process-wide thread pool left alone."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.graph.ir import Graph, Node, TensorSpec
from neurenix_core.graph.ir.host import HostOptions, HostRuntime

torch = pytest.importorskip("torch")

from host_models import check_matches_torch_and_reference, check_unlowered_op_is_refused, host_runtime
from host_models import inputs as _x
from host_models import mlp_graph as _mlp_graph
from host_models import torch_cnn as _cnn
from host_models import torch_mlp as _mlp


@pytest.fixture(scope="module")
def rt() -> HostRuntime:
    return host_runtime("torch")


def test_host_runtimes_lists_torch(rt: HostRuntime) -> None:
    assert rt.name == "torch" and rt.version == torch.__version__
    assert {"conv2d", "batch_norm2d", "linear", "max_pool2d"} <= rt.graph_ops


@pytest.mark.parametrize(("make", "shape"), [(_cnn, (8, 3, 32, 32)), (_mlp, (16, 64))], ids=["cnn", "mlp"])
def test_torch_matches_torch_fp32_and_the_reference(rt: HostRuntime, make: Any, shape: tuple[int, ...]) -> None:
    compiled = check_matches_torch_and_reference("torch", make, shape)
    assert "PyTorch" in compiled.summary and "CPU on cpu:0, fp32" in compiled.summary


def test_inputs_are_shared_and_read_only_ones_accepted(rt: HostRuntime) -> None:
    model = rt.compile(_mlp_graph(), HostOptions())
    x = _x(4, 64)
    want = model(x)[0]
    frozen = x.copy()
    frozen.flags.writeable = False  # e.g. a NumPy view of another runtime's buffer
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch.from_numpy warns on a read-only array (once per process)
        got = model(frozen)[0]
    np.testing.assert_array_equal(got, want)
    assert want.flags.writeable


def test_a_constant_output_is_copied_so_the_model_cannot_be_overwritten(rt: HostRuntime) -> None:
    value = np.arange(6, dtype=np.float32).reshape(2, 3)
    graph = Graph((TensorSpec("x", (2, 3)),), (
        Node("k", "constant", (), "k", {}, {"value": value}),
        Node("r", "relu", ("x",), "y"),
    ), ("y", "k"))
    model = rt.compile(graph, HostOptions())
    _, k = model(_x(2, 3))
    k[...] = -1
    np.testing.assert_array_equal(model(_x(2, 3))[1], value)


def test_threads_are_read_back_not_changed(rt: HostRuntime) -> None:
    before = torch.get_num_threads()
    model = rt.compile(_mlp_graph(), HostOptions(threads=1))
    assert torch.get_num_threads() == before == model.threads  # process-wide: never changed behind the user's back
    assert "threads=1 not applied: PyTorch's pool is process-wide" in model.summary


def test_reduced_float32_precision_in_force_is_refused(rt: HostRuntime) -> None:
    matmul = torch.backends.mkldnn.matmul
    if not hasattr(matmul, "fp32_precision"):
        pytest.skip(f"PyTorch {torch.__version__} has no torch.backends.mkldnn.matmul.fp32_precision")
    old = matmul.fp32_precision
    matmul.fp32_precision = "bf16"
    try:
        with pytest.raises(nx.CompilationError, match=r"host runtime torch .*mkldnn.matmul.fp32_precision='bf16'.*'ieee'"):
            rt.compile(_mlp_graph(), HostOptions())
    finally:
        matmul.fp32_precision = old


def test_an_op_the_lowering_lacks_is_refused_for_runtime_torch(rt: HostRuntime) -> None:
    check_unlowered_op_is_refused(rt)


def test_precisions_other_than_fp32_are_refused(rt: HostRuntime) -> None:
    with pytest.raises(nx.CompilationError, match=r"host runtime torch .* fp32, not 'fp16'"):
        rt.compile(_mlp_graph(), HostOptions(precision="fp16"))



def test_weights_are_the_graphs_arrays_for_every_shape_and_never_written(rt: HostRuntime) -> None:
    """The host runtime's layers are tensors over the graph's own float32 weights (read-only views
    of a caller's model, as generation imports them): a model compiled at two shapes adds no copy."""
    rng = np.random.default_rng(0)
    w1, w2 = rng.standard_normal((32, 64)).astype(np.float32), rng.standard_normal((8, 32)).astype(np.float32)
    table = rng.standard_normal((50, 64)).astype(np.float32)
    for array in (w1, w2, table):
        array.flags.writeable = False
    before = [a.copy() for a in (w1, w2, table)]

    def graph(batch: int) -> Graph:
        return Graph((TensorSpec("ids", (batch, 3), "int64"),), (
            Node("emb", "embedding", ("ids",), "e", {}, {"weight": table}),
            Node("fc1", "linear", ("e",), "h", {}, {"weight": w1}),
            Node("act", "relu", ("h",), "r"),
            Node("fc2", "linear", ("r",), "y", {}, {"weight": w2}),
        ), ("y",))

    ids = rng.integers(0, 50, (2, 3))
    want = np.maximum(table[ids] @ w1.T, 0) @ w2.T
    for batch in (2, 5):
        model = rt.compile(graph(batch), HostOptions())
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no writability warning from torch reaches the user
            got = model(np.resize(ids, (batch, 3)))[0]
        np.testing.assert_allclose(got[:2], want, rtol=1e-5, atol=1e-5)
        pointers = {p.untyped_storage().data_ptr() for p in model._runner.parameters()}
        assert {w1.ctypes.data, w2.ctypes.data, table.ctypes.data} <= pointers
        assert not any(p.requires_grad for p in model._runner.parameters())
    for array, old in zip((w1, w2, table), before, strict=True):
        np.testing.assert_array_equal(array, old)


def test_the_cuda_lowering_still_copies_weights() -> None:
    """Only the host runtime shares: the cuda device's module is moved and converted (fp16, channels_last)."""
    from neurenix_cuda_tc.lowering import lower_graph

    w = np.ones((4, 4), np.float32)
    module = lower_graph(Graph((TensorSpec("x", (2, 4)),), (Node("fc", "linear", ("x",), "y", {}, {"weight": w}),), ("y",)))
    assert all(p.untyped_storage().data_ptr() != w.ctypes.data for p in module.parameters())
