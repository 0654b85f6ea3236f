"""LiteRT with XNNPACK as a host runtime for cpu:0 (issue #31, ``runtime="litert"``).

The edgetpu plugin offers its fp32 TFLite writer run by LiteRT's interpreter with the XNNPACK
delegate (``neurenix_edgetpu.host``). Real LiteRT throughout; the device is ``cpu:0``, not an
emulated Edge TPU.
"""

from __future__ import annotations

import os
from importlib import metadata
from typing import Any

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.graph.ir import Graph, Node, TensorSpec
from neurenix_core.graph.ir.host import HostOptions
from neurenix_core.graph.reference.run import run_graph

torch = pytest.importorskip("torch")

from host_models import host_runtime
from host_models import relative_error as _rel
from host_models import torch_mlp as _mlp


def _cnn() -> Any:
    from host_models import torch_cnn

    return torch_cnn(second_pool="avg")  # the second pool an average: LiteRT's AVERAGE_POOL_2D checked too


def _litert() -> Any:
    return host_runtime("litert")

_TOL = 1e-5


def _x(shape: tuple[int, ...], seed: int = 2) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.fixture
def state(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A fresh state folder, so the choice cache of another test or process does not answer."""
    from neurenix_core.plugins.state import registry

    monkeypatch.setattr(registry().config, "state_dir", str(tmp_path))
    return tmp_path


def test_the_plugin_offers_litert_as_a_host_runtime() -> None:
    from neurenix_edgetpu.host import LiteRTHostRuntime

    from neurenix_core.plugins.state import registry

    rt = _litert()
    assert isinstance(rt, LiteRTHostRuntime) and rt.name == "litert"
    assert rt.version == metadata.version("ai-edge-litert")
    assert {"conv2d", "batch_norm2d", "linear", "max_pool2d", "avg_pool2d"} <= rt.graph_ops and "exp" not in rt.graph_ops
    manifest = next(r.manifest for r in registry().records if r.name == "edgetpu")
    assert manifest.capabilities.host_runtime == "litert" and manifest.api == ">=1.4,<2"


@pytest.mark.parametrize(("make", "shape"), [(_cnn, (2, 3, 32, 32)), (_mlp, (4, 64))], ids=["cnn", "mlp"])
def test_torch_models_on_litert_match_torch_and_the_reference(make: Any, shape: tuple[int, ...]) -> None:
    module = make()
    x = _x(shape)
    compiled = nx.compile(nx.nn.from_torch(module), device="cpu", runtime="litert", threads=1)
    got = compiled(x)
    assert str(got.device) == "cpu:0"
    with torch.no_grad():
        want_torch = module(torch.from_numpy(x)).numpy()
    assert _rel(got.numpy(), want_torch) <= _TOL
    graph = compiled.graph.with_input_shapes(shape)
    assert _rel(got.numpy(), run_graph(graph, x)) <= _TOL  # the core's float64 reference
    summary = compiled.summary
    for words in ("LiteRT", "XNNPACK delegate on cpu:0", "fp32", "1 thread(s)", "runtime litert (runtime='litert' asked)"):
        assert words in summary, summary
    assert "emulated" not in summary  # LiteRT doing what it is for: no Edge TPU anywhere
    assert "model on cpu:0: runtime litert" in str(compiled.placement)


def test_threads_are_read_back_and_xnnpack_takes_the_model() -> None:
    rt = _litert()
    graph = nx.compile(nx.nn.from_torch(_cnn()), device="cpu", runtime="numpy").graph.with_input_shapes((1, 3, 32, 32))
    one = rt.compile(graph, HostOptions(threads=1))
    assert one.threads == 1 and one.config["threads"] == 1 and one.config["kernels"] == "xnnpack"
    taken, total = map(int, one.config["delegated_ops"].split("/"))
    assert taken == total > 0, one.config  # every op of the written model runs in XNNPACK
    default = rt.compile(graph, HostOptions(threads=None))
    assert default.threads == len(os.sched_getaffinity(0)) and f"{default.threads} thread(s)" in default.summary
    with pytest.raises(nx.CompilationError, match=r"litert.*threads=0 must be a positive int"):
        rt.compile(graph, HostOptions(threads=0))


def test_several_inputs_and_outputs_keep_the_graphs_dtypes() -> None:
    rng = np.random.default_rng(3)
    w = rng.standard_normal((8, 16)).astype(np.float32)
    graph = Graph((TensorSpec("a", (2, 16)), TensorSpec("b", (2, 8))), (
        Node("fc", "linear", ("a",), "h", {}, {"weight": w, "bias": np.zeros(8, np.float32)}),
        Node("sum", "add", ("h", "b"), "y"),
        Node("act", "relu", ("y",), "z"),
    ), ("y", "z"))
    a, b = _x((2, 16), 4), _x((2, 8), 5)
    outs = _litert().compile(graph, HostOptions(threads=1))(a, b)
    want = run_graph(graph, a, b)
    assert len(outs) == 2
    for got, ref in zip(outs, want):
        assert got.dtype == np.float32 and got.shape == ref.shape and _rel(got, ref) <= _TOL


def _graph_with_exp(batch: int = 16, width: int = 256) -> Graph:
    """About 4 MFLOPs, above host_select's measuring floor; ``exp`` has no TFLite builtin the writer emits."""
    rng = np.random.default_rng(0)
    p = {"weight": (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32), "bias": np.zeros(width, np.float32)}
    q = {"weight": (rng.standard_normal((10, width)) / np.sqrt(width)).astype(np.float32), "bias": np.zeros(10, np.float32)}
    return Graph((TensorSpec("x", (batch, width)),), (
        Node("fc1", "linear", ("x",), "h", {}, p),
        Node("e", "exp", ("h",), "a"),
        Node("fc2", "linear", ("a",), "y", {}, q),
    ), ("y",))


def test_an_op_the_writer_cannot_lower_is_refused_for_litert_and_runs_elsewhere_on_auto(state: Any) -> None:
    graph, x = _graph_with_exp(), _x((16, 256))
    with pytest.raises(nx.UnsupportedOperationError, match=r"runtime='litert' was asked, but litert does not lower op\(s\) exp"):
        nx.compile(graph, device="cpu", runtime="litert")(x)
    compiled = nx.compile(graph, device="cpu", runtime="auto")
    got = compiled(x).numpy()
    assert _rel(got, run_graph(graph, x)) <= _TOL
    assert "runtime litert (" not in compiled.summary
    assert "litert: litert does not lower op(s) exp" in compiled.summary, compiled.summary


def test_a_graph_the_writer_refuses_names_the_runtime_and_the_remedy() -> None:
    # Every op is declared, but the writer writes no empty tensors (LiteRT's kernels are not
    # written for them): a typed refusal naming litert and runtime='auto'.
    graph = Graph((TensorSpec("x", (0, 16)),), (Node("r", "relu", ("x",), "y"),), ("y",))
    refusal = r"host runtime litert \(plugin edgetpu\).*empty tensors.*runtime='auto'"
    with pytest.raises(nx.UnsupportedOperationError, match=refusal):
        _litert().compile(graph, HostOptions(threads=1))
