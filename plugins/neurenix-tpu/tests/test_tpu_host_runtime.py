"""XLA:CPU as a host runtime for cpu:0 (``runtime="xla"``, issue #31): the tpu plugin's JAX
lowering jitted on JAX's CPU device, fp32, compiled ahead of time, against PyTorch fp32 and the
core's float reference; named in the summary and placement report; refusals typed."""

from __future__ import annotations

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
def xla() -> HostRuntime:
    return host_runtime("xla")


def test_host_runtimes_lists_xla_on_the_cpu_device(xla: HostRuntime) -> None:
    import jax

    assert xla.name == "xla" and xla.version == f"jax {jax.__version__}, jaxlib {jax.__version__}"
    assert xla.device.platform == "cpu"  # type: ignore[attr-defined]  # JAX's CPU device, whatever the default backend
    assert {"conv2d", "batch_norm2d", "linear", "max_pool2d"} <= xla.graph_ops


@pytest.mark.parametrize(("make", "shape"), [(_cnn, (8, 3, 32, 32)), (_mlp, (16, 64))], ids=["cnn", "mlp"])
def test_xla_matches_torch_fp32_and_the_reference(xla: HostRuntime, make: Any, shape: tuple[int, ...]) -> None:
    compiled = check_matches_torch_and_reference("xla", make, shape)
    assert "XLA:CPU" in compiled.summary


def test_a_second_call_reuses_the_executable_and_results_are_writable(xla: HostRuntime) -> None:
    graph = _mlp_graph()
    model = xla.compile(graph, HostOptions())
    x = _x(4, 64)
    first, second = model(x)[0], model(x)[0]
    np.testing.assert_array_equal(first, second)
    assert first.flags.writeable and type(first) is np.ndarray  # a cpu:0 tensor may be written in place
    first[...] = 0
    np.testing.assert_array_equal(model(x)[0], second)


def test_threads_are_not_applied_per_model_and_the_summary_says_so(xla: HostRuntime) -> None:
    model = xla.compile(_mlp_graph(), HostOptions(threads=1))
    assert model.threads is None
    assert "threads=1 not applied: XLA:CPU's pool is fixed at JAX start" in model.summary


def test_int64_token_ids_stay_int64_without_touching_the_users_jax(xla: HostRuntime) -> None:
    import jax

    before = bool(jax.config.jax_enable_x64)
    table = _x(50, 8)
    graph = Graph((TensorSpec("ids", (2, 5), "int64"),), (Node("emb", "embedding", ("ids",), "e", {}, {"weight": table}),), ("e",))
    ids = np.array([[0, 1, 2, 3, 49], [7, 7, 8, 9, 10]], np.int64)
    (got,) = xla.compile(graph, HostOptions())(ids)
    np.testing.assert_array_equal(got, table[ids])
    assert bool(jax.config.jax_enable_x64) == before  # the 64-bit scope is per compile and per call


def test_an_op_the_lowering_lacks_is_refused_for_runtime_xla(xla: HostRuntime) -> None:
    check_unlowered_op_is_refused(xla)


def test_precisions_other_than_fp32_are_refused(xla: HostRuntime) -> None:
    with pytest.raises(nx.CompilationError, match=r"host runtime xla .* fp32, not 'bf16'"):
        xla.compile(_mlp_graph(), HostOptions(precision="bf16"))

