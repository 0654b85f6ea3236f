"""The interpreter with threads= (backends/cpu_threads.py): the same results as threads=1 on a
CNN (RGB stem, conv + batch norm + ReLU, depthwise, grouped, pooling, hardswish, SE gate) and a
transformer (linear, batched matmul, softmax, layer norm, gelu), BLAS held at one thread during
the call and restored after it, the count in the summary, bad counts refused."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.backends import cpu_threads
from neurenix_core.errors import ConfigurationError

torch = pytest.importorskip("torch")
from torch import nn  # imported once the skip has passed

#: threads=2 and threads=1 may group a convolution's samples differently (one GEMM per group),
#: so BLAS may sum in another order: within float32 rounding of each other, not bit for bit.
_RTOL = 1e-5


class _Cnn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 7, 2, 3, bias=False), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        self.expand = nn.Sequential(nn.Conv2d(16, 64, 1), nn.BatchNorm2d(64), nn.Hardswish())
        self.dw = nn.Sequential(nn.Conv2d(64, 64, 5, 1, 2, groups=64, bias=False), nn.BatchNorm2d(64), nn.ReLU())
        self.grouped = nn.Conv2d(64, 32, 3, 1, 1, groups=4)
        self.gate = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(32, 32, 1), nn.Hardsigmoid())
        self.head = nn.Linear(32, 10)

    def forward(self, x: Any) -> Any:
        y = self.grouped(self.dw(self.expand(self.stem(x))))
        y = y * self.gate(y) + y
        return self.head(y.mean(dim=(2, 3)))


class _Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(64, 4, 256, dropout=0.0, activation="gelu", batch_first=True)

    def forward(self, x: Any) -> Any:
        return self.layer(x)


def _compiled(module: Any, x: np.ndarray, threads: int | None) -> Any:
    imported = nx.nn.from_torch(module.eval(), torch.from_numpy(x), static=True)
    return nx.compile(imported, device="cpu", runtime="numpy", threads=threads, progress=False)


@pytest.mark.parametrize("batch", [1, 6])
@pytest.mark.parametrize("model,shape", [(_Cnn, (3, 64, 64)), (_Encoder, (40, 64))])
def test_threads_match_one_thread_and_torch(model: type, shape: tuple[int, ...], batch: int) -> None:
    torch.manual_seed(0)
    module = model().eval()
    x = np.random.default_rng(batch).standard_normal((batch, *shape)).astype(np.float32)
    with torch.inference_mode():
        want = module(torch.from_numpy(x)).numpy()
    one = _compiled(module, x, 1)(nx.asarray(x)).numpy()
    two = _compiled(module, x, 2)(nx.asarray(x)).numpy()
    scale = float(np.abs(want).max())
    np.testing.assert_allclose(two, one, rtol=_RTOL, atol=_RTOL * scale)
    np.testing.assert_allclose(two, want, rtol=1e-4, atol=1e-4 * scale)


def test_large_steps_are_split_and_agree() -> None:
    """Shapes above the split threshold (every elementwise step sharded, the batch in several
    convolution groups), threads=3 against threads=1."""
    torch.manual_seed(1)
    module = _Cnn().eval()
    x = np.random.default_rng(3).standard_normal((5, 3, 176, 176)).astype(np.float32)
    one = _compiled(module, x, 1)(nx.asarray(x)).numpy()
    three = _compiled(module, x, 3)(nx.asarray(x)).numpy()
    np.testing.assert_allclose(three, one, rtol=_RTOL, atol=_RTOL * float(np.abs(one).max()))


def test_blas_is_held_at_one_thread_and_restored() -> None:
    before = cpu_threads.blas_threads()
    if before is None:
        pytest.skip("NumPy's BLAS is not an OpenBLAS this module can find")
    seen: list[int | None] = []
    with cpu_threads.using(2):
        seen.append(cpu_threads.blas_threads())
        assert cpu_threads.current() == 2
    assert seen == [1]
    assert cpu_threads.blas_threads() == before
    assert cpu_threads.current() == 1


def test_split_runs_every_shard_and_raises_a_workers_error() -> None:
    hits = np.zeros(10, int)

    def mark(a: int, b: int) -> None:
        hits[a:b] += 1

    with cpu_threads.using(3):
        cpu_threads.split(10, mark)
        assert hits.tolist() == [1] * 10

        def fail(a: int, b: int) -> None:
            if a > 0:
                raise ValueError(f"shard {a}:{b}")

        with pytest.raises(ValueError, match="shard"):
            cpu_threads.split(10, fail)


def test_summary_names_the_threads_and_bad_counts_are_refused() -> None:
    module = _Encoder().eval()
    x = np.zeros((1, 8, 64), np.float32)
    compiled = _compiled(module, x, 2)
    compiled(nx.asarray(x))
    assert "2 threads" in compiled.summary
    with pytest.raises(ConfigurationError, match="threads=0"):
        _compiled(module, x, 0)(nx.asarray(x))


def test_a_forked_child_splits_with_its_own_pool() -> None:
    import multiprocessing

    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork on this platform")
    with cpu_threads.using(2):
        cpu_threads.split(4, lambda a, b: None)  # the parent's pool exists before the fork
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        assert pool.apply_async(_split_in_child).get(timeout=60) == [1, 1, 1, 1]  # a stale pool would hang here


def _split_in_child() -> list[int]:
    hits = [0] * 4

    def mark(a: int, b: int) -> None:
        for k in range(a, b):
            hits[k] += 1

    with cpu_threads.using(2):
        cpu_threads.split(4, mark)
    return hits


@pytest.mark.parametrize("mask", [None, "float-row", "float-per-sample", "bool-square", "bool-per-head"])
@pytest.mark.parametrize("threads,batch", [(1, 4), (2, 4), (2, 1)])  # batch 1 on 2 threads: split by head
def test_attention_step_gives_the_reference_bits(mask: str | None, threads: int, batch: int) -> None:
    from neurenix_core.graph.ir import Graph, Node, TensorSpec
    from neurenix_core.graph.reference.interpreter import plan_for
    from neurenix_core.graph.reference.run import run_graph

    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((batch, 3, 17, 8)).astype(np.float32) for _ in range(3))
    masks: dict[str, np.ndarray] = {"float-row": np.zeros((1, 1, 1, 17), np.float32),
                                    "float-per-sample": rng.standard_normal((batch, 1, 17, 17)).astype(np.float32),
                                    "bool-square": rng.random((17, 17)) > 0.3, "bool-per-head": rng.random((batch, 3, 1, 17)) > 0.2}
    specs = [TensorSpec(n, (batch, 3, 17, 8)) for n in "qkv"]
    inputs = [q, k, v]
    if mask is not None:
        m = masks[mask]
        specs.append(TensorSpec("m", m.shape, "bool" if m.dtype == np.bool_ else "float32"))
        inputs.append(m)
    graph = Graph(tuple(specs), (Node("a", "scaled_dot_product_attention", tuple(s.name for s in specs), "y"),), ("y",))
    want = run_graph(graph, *inputs, float_dtype=None, return_values=True)["y"]  # the node-by-node reference
    got = plan_for(graph, inputs).run(inputs, threads)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("kernel,stride,pad,cin", [(1, 1, 0, 64), (3, 2, 1, 64), (7, 2, 3, 3)])
def test_convolution_kernel_splits_agree(batch: int, channels_last: bool, kernel: int, stride: int, pad: int, cin: int) -> None:
    """conv2d_f32 on 2 threads (one sample: its columns and its output channels or pixels in
    shards; several: sample groups) against 1 thread and float64, every layout and epilogue."""
    from neurenix_core.backends import cpu_nn as K

    rng = np.random.default_rng(kernel)
    x = rng.standard_normal((batch, cin, 48, 48)).astype(np.float32)
    w = rng.standard_normal((128, cin, kernel, kernel)).astype(np.float32)
    b = rng.standard_normal(128).astype(np.float32)
    args = (x, w, b, (pad, pad), (stride, stride), (1, 1), 1, "hardswish", channels_last)
    with cpu_threads.using(1):
        one = K.conv2d_f32(*args)
    with cpu_threads.using(2):
        two = K.conv2d_f32(*args)
    want = K.conv2d(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64), stride, pad)
    want = want * np.clip(want / 6 + 0.5, 0, 1)
    assert two.shape == one.shape == want.shape and two.flags.c_contiguous != channels_last
    np.testing.assert_allclose(two, one, rtol=_RTOL, atol=_RTOL * float(np.abs(one).max()))
    np.testing.assert_allclose(two, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


@pytest.mark.parametrize("perm", [(0, 2, 1, 3), (3, 1, 0, 2), None, (0, 2, -3, 3)])
def test_transpose_step_copies_in_shards(perm: tuple[int, ...] | None) -> None:
    from neurenix_core.graph.ir import Graph, Node, TensorSpec
    from neurenix_core.graph.reference.interpreter import plan_for

    x = np.random.default_rng(2).standard_normal((6, 80, 5, 128)).astype(np.float32)  # above the split threshold
    graph = Graph((TensorSpec("x", x.shape),), (Node("t", "transpose", ("x",), "y", {"perm": perm}),), ("y",))
    got = plan_for(graph, [x]).run([x], 2)
    want = np.ascontiguousarray(x.transpose(perm))
    assert got.flags.c_contiguous
    np.testing.assert_array_equal(got, want)


def test_transpose_step_refuses_a_bad_perm_as_the_reference_does() -> None:
    from neurenix_core.errors import ShapeError
    from neurenix_core.graph.ir import Graph, Node, TensorSpec
    from neurenix_core.graph.reference.interpreter import plan_for

    x = np.zeros((6, 40, 5, 64), np.float32)
    graph = Graph((TensorSpec("x", x.shape),), (Node("t", "transpose", ("x",), "y", {"perm": (0, 1, 2, 7)}),), ("y",))
    with pytest.raises(ShapeError, match="axis 7 is out of range"):  # the reference's words
        plan_for(graph, [x]).run([x], 2)


@pytest.mark.parametrize("op", ["gelu", "hardswish", "relu", "softmax", "layer_norm"])
def test_elementwise_and_row_steps_split_to_the_same_bits(op: str) -> None:
    """Above the split threshold (2 x 128K elements), in a channels-last view and contiguous:
    elementwise and row steps on 2 threads give exactly the 1-thread bits."""
    from neurenix_core.graph.ir import Graph, Node, TensorSpec
    from neurenix_core.graph.reference.interpreter import plan_for

    x = np.random.default_rng(5).standard_normal((4, 48, 48, 64)).astype(np.float32) * 4
    params = {"weight": np.full(64, 1.5, np.float32), "bias": np.full(64, 0.25, np.float32)} if op == "layer_norm" else {}
    attrs = {"normalized_shape": (64,)} if op == "layer_norm" else {}
    # contiguous, and an NCHW view of channels-last memory (layer norm's weight fits the last axis only)
    for value in (x,) if op == "layer_norm" else (x, x.transpose(0, 3, 1, 2)):
        graph = Graph((TensorSpec("x", value.shape),), (Node("n", op, ("x",), "y", attrs, params),), ("y",))
        plan = plan_for(graph, [value])
        np.testing.assert_array_equal(plan.run([value], 2), plan.run([value], 1))


def test_the_caller_runs_shards_no_worker_has_started() -> None:
    """With the pool's only worker busy, split still completes: the caller runs every shard."""
    import threading

    hits = np.zeros(10, int)
    gate = threading.Event()
    done = threading.Event()

    def mark(a: int, b: int) -> None:
        hits[a:b] += 1

    def caller() -> None:
        with cpu_threads.using(2):
            cpu_threads.split(10, mark)
        done.set()

    with cpu_threads.using(2):
        blocker = cpu_threads._pool(2).submit(gate.wait, 60)  # occupies the 2-thread pool's one worker
    try:
        runner = threading.Thread(target=caller)
        runner.start()
        assert done.wait(30), "split waited for a worker that never started its shard"
        assert hits.tolist() == [1] * 10
    finally:
        gate.set()
        blocker.result(timeout=60)


def test_a_large_unsplit_gemm_widens_blas_and_narrows_it_back() -> None:
    if cpu_threads.blas_threads() is None:
        pytest.skip("NumPy's BLAS is not an OpenBLAS this module can find")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((256, 256)).astype(np.float32)
    b = rng.standard_normal((256, 128)).astype(np.float32)
    assert a.size * b.shape[-1] >= cpu_threads.WIDE_GEMM_MACS  # the widened case
    with cpu_threads.using(2):
        got = cpu_threads.matmul(a, b)
        assert cpu_threads.blas_threads() == 1  # back to one for the shards of the next split step
    np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-4)


def test_block_grows_only_for_a_step_that_is_split() -> None:
    with cpu_threads.using(2):
        assert cpu_threads.block(1000, total=10, min_items=4) == 1000 * cpu_threads.THREADED_BLOCK_SCALE
        assert cpu_threads.block(1000, total=10, min_items=6) == 1000  # one shard: the cache-sized block
    assert cpu_threads.block(1000, total=10) == 1000  # one thread
