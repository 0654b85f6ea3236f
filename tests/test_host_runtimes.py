"""Host runtimes for cpu:0 (issue #31): which runtime runs a cpu:0 graph, and why.

The first-party plugins offer their runtimes (OpenVINO's CPU device, LiteRT, XLA:CPU, PyTorch
CPU) through ``neurenix_host_runtime``; ``graph.host_select`` measures the candidates, checks
them against the interpreter, caches the choice, honours ``runtime=``, and skips a broken or
wrong runtime with the reason. Third-party runtimes below are real plugins written for the test
(NumPy standing in for their hardware), as a vendor would ship them.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.graph.compile import host_select
from neurenix_core.graph.ir import Graph, Node, TensorSpec
from neurenix_core.graph.reference.run import run_graph

RUNTIMES = sorted(name for name, rt in host_select.host_runtimes().items() if not isinstance(rt, str))


def _mlp_graph(batch: int = 16, width: int = 256) -> Graph:
    """About 4 MFLOPs at batch 16: above the measuring floor."""
    rng = np.random.default_rng(0)
    p = {
        "weight": (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32),
        "bias": rng.standard_normal(width).astype(np.float32) * 0.1,
    }
    q = {"weight": (rng.standard_normal((10, width)) / np.sqrt(width)).astype(np.float32), "bias": np.zeros(10, np.float32)}
    return Graph(
        (TensorSpec("x", (batch, width)),),
        (
            Node("fc1", "linear", ("x",), "h", {}, p),
            Node("act", "tanh", ("h",), "a"),
            Node("fc2", "linear", ("a",), "y", {}, q),
        ),
        ("y",),
    )


def _x(shape: tuple[int, ...], seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.fixture
def state(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A fresh state folder for the choice cache (the registry reads it at import)."""
    from neurenix_core.plugins.state import registry

    monkeypatch.setattr(registry().config, "state_dir", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_every_host_runtime_matches_the_reference(runtime: str) -> None:
    graph = _mlp_graph()
    x = _x((16, 256))
    compiled = nx.compile(graph, device="cpu", runtime=runtime)
    got = compiled(x).numpy()
    want = run_graph(graph, x)
    assert float(np.abs(got - want).max() / np.abs(want).max()) <= 1e-5
    assert f"runtime {runtime} (runtime={runtime!r} asked)" in compiled.summary
    assert f"model on cpu:0: runtime {runtime}" in str(compiled.placement)


def test_numpy_is_the_interpreter_and_can_be_named() -> None:
    compiled = nx.compile(_mlp_graph(), device="cpu", runtime="numpy")
    compiled(_x((16, 256)))
    assert "the NumPy opset interpreter" in compiled.summary and "runtime numpy (runtime='numpy' asked)" in compiled.summary


def test_an_unknown_runtime_is_refused_with_the_available_ones() -> None:
    # At nx.compile, from the installed plugins' manifests: no framework starts, nothing compiles.
    with pytest.raises(nx.InvalidOptionError, match=r"runtime='tensorrt' names no host runtime installed here.*'auto', 'numpy'"):
        nx.compile(_mlp_graph(), device="cpu", runtime="tensorrt")


def test_small_graphs_are_measured_only_when_they_are_float32_models(state: Any) -> None:
    # A 1x32 MLP (about 4K FLOPs, far below the floor) is a float32 model: measured like a large one,
    # since a runtime's call can cost far less than the interpreter's steps (mlp_small in benchmarks/cpu.py).
    model = nx.compile(_mlp_graph(batch=1, width=32), device="cpu")
    y = model(_x((1, 32))).numpy()
    np.testing.assert_allclose(y, run_graph(_mlp_graph(batch=1, width=32), _x((1, 32))), rtol=1e-5, atol=1e-5)
    if RUNTIMES:
        assert "measured at compile time; measured" in model.summary
        assert (state / "host_runtimes.json").exists()
    (state / "host_runtimes.json").unlink(missing_ok=True)
    # Single elementwise ops and integer arithmetic stay on the interpreter, nothing compiled or cached.
    for graph, x in ((Graph((TensorSpec("x", (4, 8)),), (Node("r", "relu", ("x",), "y"),), ("y",)), _x((4, 8))),
                     (Graph((TensorSpec("x", (4,), "int64"),), (Node("m", "mul", ("x", "x"), "y"),), ("y",)),
                      np.array([2**40, 3, -5, 7], np.int64))):
        compiled = nx.compile(graph, device="cpu")
        out = compiled(x).numpy()
        np.testing.assert_array_equal(out, run_graph(graph, x))
        if RUNTIMES:
            assert "not a float32 model" in compiled.summary, compiled.summary
        assert not (state / "host_runtimes.json").exists()
    assert not host_select.small_model(Graph((TensorSpec("x", (4, 8)),), (Node("r", "relu", ("x",), "y"),), ("y",)))
    assert host_select.small_model(_mlp_graph(batch=1, width=8))


@pytest.mark.skipif(
    not RUNTIMES, reason="no host runtime plugin is installed (neurenix-core alone): the interpreter runs everything"
)
def test_the_choice_is_measured_then_cached_for_the_next_process(state: Any, run_neurenix: Any) -> None:
    graph = _mlp_graph()
    compiled = nx.compile(graph, device="cpu")
    y = compiled(_x((16, 256))).numpy()
    assert "measured at compile time" in compiled.summary and "numpy" in compiled.summary
    cache = json.loads((state / "host_runtimes.json").read_text())
    (entry,) = cache.values()
    assert entry["runtime"] in [*RUNTIMES, "numpy"] and set(entry["times_ms"]) >= {"numpy"}
    assert entry["runtime"] == host_select._settle(entry["times_ms"])
    np.testing.assert_allclose(y, run_graph(graph, _x((16, 256))), rtol=1e-5, atol=1e-5)
    out = run_neurenix(
        """
import json, numpy as np, neurenix_core as nx
import test_host_runtimes as t
from neurenix_core.graph.ir import Graph
g = t._mlp_graph()
# Freshly drawn weights, the same model: the same work, so the cached choice holds.
fresh = Graph(g.inputs, tuple(n.__class__(n.name, n.op, n.inputs, n.output, n.attrs, {k: v * 0.5 for k, v in n.params.items()})
                              for n in g.nodes), g.outputs)
c = nx.compile(fresh, device="cpu")
c(t._x((16, 256)))
print(json.dumps({"summary": c.summary}))
""",
        env={"NEURENIX_STATE_DIR": str(state), "PYTHONPATH": str(__import__("pathlib").Path(__file__).parent)},
    )
    assert f"runtime {entry['runtime']} (fastest, measured by an earlier compile (cached)" in out["summary"]


# A third-party plugin offering two runtimes' worth of trouble: "broken" fails to compile, "wrong"
# compiles and returns zeros. NumPy stands in for their hardware, as in the vendor template.
BAD_RUNTIMES = """
from __future__ import annotations
import numpy as np
from neurenix_core import hookimpl, Manifest, Capabilities, PriorityBand, ProbeResult
from neurenix_core.graph.ir.host import HostModel, HostRuntime

KIND = "{kind}"

class Zeros(HostModel):
    summary = "zeros"
    def __init__(self, graph):
        self.graph = graph
    def __call__(self, *xs):
        return (np.zeros((16, 10), np.float32),)

class Runtime(HostRuntime):
    name = KIND
    version = "1.0"
    graph_ops = frozenset({{"linear", "tanh"}})
    def compile(self, graph, options):
        if KIND == "broken":
            raise RuntimeError("the vendor driver crashed")
        return Zeros(graph)

@hookimpl
def neurenix_manifest():
    return Manifest(name=KIND, distribution=f"neurenix-{{KIND}}", version="1.0", api=">=1.2,<2", device_types=(KIND,),
                    band=PriorityBand.ACCELERATOR, capabilities=Capabilities(host_runtime=KIND))

@hookimpl
def neurenix_probe(context):
    return ProbeResult.missing("no such device here; the plugin offers its host runtime only")

@hookimpl
def neurenix_backend(manifest, probe):
    from neurenix_core.errors import BackendUnavailableError
    raise BackendUnavailableError(f"{{KIND}}: no device here")

@hookimpl
def neurenix_host_runtime():
    return Runtime()
"""


def test_a_broken_or_wrong_runtime_is_skipped_with_the_reason(plugin_site: Any, run_neurenix: Any, tmp_path: Any) -> None:
    plugin_site("broken", BAD_RUNTIMES.format(kind="broken"), module="nx_plugin_broken")
    site = plugin_site("wrong", BAD_RUNTIMES.format(kind="wrong"), module="nx_plugin_wrong")
    out = run_neurenix(
        """
import json, numpy as np, neurenix_core as nx
from neurenix_core.graph.compile import host_select
from neurenix_core.graph.reference.run import run_graph
from neurenix_core.plugins.state import registry
import test_host_runtimes as t
g = t._mlp_graph()
c = nx.compile(g, device="cpu")
y = c(t._x((16, 256))).numpy()
res = {"summary": c.summary, "err": float(np.abs(y - run_graph(g, t._x((16, 256)))).max()), "runtimes": sorted(host_select.host_runtimes())}
# A cached choice whose runtime no longer compiles the graph: measured again, the reason kept.
rts = {k: v for k, v in host_select.host_runtimes().items() if not isinstance(v, str)}
key = host_select._cache_key(g, None)
host_select._cache_write(registry().config.state_dir, key, {"runtime": "broken", "times_ms": {"broken": 0.001}})
again = nx.compile(g, device="cpu")
again(t._x((16, 256)))
res["again"] = again.summary
try:
    nx.compile(g, device="cpu", runtime="wrong")(t._x((16, 256)))
    res["named"] = "ran"
except Exception as e:
    res["named"] = type(e).__name__
print(json.dumps(res))
""",
        site=site,
        env={
            "NEURENIX_STATE_DIR": str(tmp_path / "state"),
            "PYTHONPATH": f"{site}:{__import__('pathlib').Path(__file__).parent}",
        },
    )
    assert {"broken", "wrong"} <= set(out["runtimes"])
    assert "broken: RuntimeError: the vendor driver crashed" in out["summary"]
    assert "wrong: wrong result: output 0 is" in out["summary"]
    assert out["err"] < 1e-4  # the answer came from a runtime that is right
    assert "broken: the cached choice failed to compile (RuntimeError: the vendor driver crashed)" in out["again"]
    assert "measured at compile time" in out["again"]
    assert out["named"] == "ran"  # a runtime the user names explicitly is the user's call: not second-guessed


@pytest.mark.skipif(
    not RUNTIMES, reason="no host runtime plugin is installed (neurenix-core alone): the interpreter runs everything"
)
def test_a_fallback_segment_is_compiled_on_a_host_runtime_and_reported(
    plugin_site: Any, run_neurenix: Any, tmp_path: Any
) -> None:
    """A device that lowers conv2d only: the linear layers after it form one cpu:0 segment, which
    is compiled on a host runtime (not run node by node in NumPy), and the report says which."""
    import importlib.util
    from pathlib import Path

    # The convdev plugin of test_placement.py (tests import in importlib mode: load it by path).
    spec = importlib.util.spec_from_file_location("_placement_cases", Path(__file__).with_name("test_placement.py"))
    assert spec is not None and spec.loader is not None
    cases = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cases)
    plugin = cases.PLUGIN.replace('graph_ops=("conv2d", "matmul")', 'graph_ops=("conv2d",)')  # conv only: the linears go to cpu:0
    site = plugin_site("convdev", plugin, module="nx_plugin_convdev")
    out = run_neurenix(
        """
import json, numpy as np, neurenix_core as nx
from neurenix_core.graph.ir import Graph, Node, TensorSpec
from neurenix_core.graph.reference.run import run_graph
rng = np.random.default_rng(0)
conv = {"in_channels": 3, "out_channels": 16, "kernel_size": (3, 3), "padding": (1, 1)}
graph = Graph((TensorSpec("x", (16, 3, 4, 4)),), (
    Node("conv", "conv2d", ("x",), "c", conv, {"weight": rng.standard_normal((16, 3, 3, 3)).astype(np.float32) * 0.3}),
    Node("flat", "reshape", ("c",), "f", {"shape": (16, 256)}),
    Node("fc1", "linear", ("f",), "h", {}, {"weight": rng.standard_normal((256, 256)).astype(np.float32) / 16, "bias": np.zeros(256, np.float32)}),
    Node("act", "tanh", ("h",), "a"),
    Node("fc2", "linear", ("a",), "y", {}, {"weight": rng.standard_normal((10, 256)).astype(np.float32) / 16, "bias": np.zeros(10, np.float32)}),
), ("y",))
x = rng.standard_normal((16, 3, 4, 4)).astype(np.float32)
with nx.fallback_policy("allow"):
    c = nx.compile(graph, device="convdev:0")
    y = c(x).numpy()
print(json.dumps({"err": float(np.abs(y - run_graph(graph, x)).max()), "report": str(c.placement), "summary": c.summary}))
""",
        site=site,
        env={"NEURENIX_EMULATE": "convdev", "NEURENIX_STATE_DIR": str(tmp_path / "state")},
    )
    assert out["err"] < 1e-4
    line = out["report"].splitlines()[-1]
    assert "segment 'flat' on cpu:0: runtime" in line and "measured at compile time" in line and "numpy" in line, out["report"]


@pytest.mark.skipif(not {"xla", "torch"} & set(RUNTIMES), reason="needs a runtime whose thread pool is process-wide (xla, torch)")
def test_near_equal_runtimes_are_a_tie_settled_the_same_way_every_time() -> None:
    """Noise between runtimes within 10% must not flip the choice: the tie goes to the
    interpreter (nothing to import in a later process), else to the first name alphabetically;
    a clear winner still wins."""
    assert host_select._settle({"openvino": 1.00, "litert": 1.05, "numpy": 5.0}) == "litert"
    assert host_select._settle({"openvino": 1.05, "litert": 1.00, "numpy": 5.0}) == "litert"
    assert host_select._settle({"openvino": 1.00, "litert": 1.20, "numpy": 5.0}) == "openvino"
    assert host_select._settle({"openvino": 1.00, "numpy": 1.08}) == "numpy"
    graph = _mlp_graph()
    other = Graph(graph.inputs, tuple(Node(n.name, n.op, n.inputs, n.output, n.attrs, {k: v + 1 for k, v in n.params.items()})
                                      for n in graph.nodes), graph.outputs)
    assert other.fingerprint() != graph.fingerprint() and other.structure_fingerprint() == graph.structure_fingerprint()
    assert host_select._cache_key(other, None) == host_select._cache_key(graph, None)


def test_threads_given_skip_runtimes_that_cannot_apply_them(state: Any) -> None:
    compiled = nx.compile(_mlp_graph(), device="cpu", threads=1)
    compiled(_x((16, 256)))
    for name in {"xla", "torch"} & set(RUNTIMES):
        assert f"{name}: cannot apply threads=1 per model" in compiled.summary, compiled.summary


def test_measurement_inputs_attend_everywhere() -> None:
    """Runtimes are compared on inputs a model gives finite results for: an integer input named
    like a mask is all ones (an all-zero attention mask masks every position), ids are zeros."""
    graph = Graph((TensorSpec("input_ids", (2, 8), "int64"), TensorSpec("attention_mask", (2, 8), "int64"),
                   TensorSpec("x", (2, 8), "float32"), TensorSpec("keep", (2, 8), "bool")),
                  (Node("n", "add", ("x", "x"), "y"),), ("y",))
    ids, mask, x, keep = host_select._inputs(graph)
    assert not ids.any() and mask.all() and keep.all() and mask.dtype == np.int64
    assert x.dtype == np.float32 and x.std() > 0.5


HEAVY_RUNTIME = """
import numpy as np
from neurenix_core import hookimpl, Manifest, PriorityBand, ProbeResult, Capabilities
from neurenix_core.graph.ir.host import HostRuntime, HostModel

STARTS = []

class Model(HostModel):
    def __init__(self, graph):
        from neurenix_core.graph.reference.run import run_graph
        self.graph, self.summary, self.run_graph = graph, "heavy", run_graph
    def __call__(self, *xs):
        return tuple(np.asarray(o, np.float32) for o in ((self.run_graph(self.graph, *xs),)))

class Runtime(HostRuntime):
    name = "heavy"
    version = "1.0"
    graph_ops = frozenset({"linear", "tanh"})
    def compile(self, graph, options):
        return Model(graph)

@hookimpl
def neurenix_manifest():
    return Manifest(name="heavy", distribution="neurenix-heavy", version="1.0", api=">=1.6,<2", device_types=("heavy",),
                    band=PriorityBand.ACCELERATOR, capabilities=Capabilities(host_runtime="heavy", host_runtime_start_s=2.0))

@hookimpl
def neurenix_probe(context):
    return ProbeResult.missing("no such device here; the plugin offers its host runtime only")

@hookimpl
def neurenix_backend(manifest, probe):
    from neurenix_core.errors import BackendUnavailableError
    raise BackendUnavailableError("heavy: no device here")

@hookimpl
def neurenix_host_runtime():
    STARTS.append(1)  # the start a small graph must not pay
    return Runtime()
"""


def test_a_heavy_runtime_is_not_started_for_a_small_graph(plugin_site: Any, run_neurenix: Any, tmp_path: Any) -> None:
    """A runtime declaring a 2 s start (Capabilities.host_runtime_start_s, API 1.6) is not started
    to time a 4 MFLOP graph (the reason is in the summary), is started from HEAVY_FLOOR FLOPs, and
    is started when named."""
    site = plugin_site("heavy", HEAVY_RUNTIME, module="nx_plugin_heavy")
    out = run_neurenix(
        """
import json, numpy as np, neurenix_core as nx
import nx_plugin_heavy as heavy
from neurenix_core import nn
from neurenix_core.graph.compile import host_select
model = nn.Sequential(nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 10))  # ~2.2 MFLOPs at batch 16
x = np.ones((16, 256), np.float32)
small = nx.compile(model, device="cpu")
small(x)
res = {"small": small.summary, "starts_small": len(heavy.STARTS)}
named = nx.compile(model, device="cpu", runtime="heavy")
named(x)
res["named"], res["starts_named"] = named.summary, len(heavy.STARTS)
res["big"] = sorted(k for k, v in host_select.light_host_runtimes(host_select.HEAVY_FLOOR).items() if not isinstance(v, str))
print(json.dumps(res))
""",
        site=site,
        env={"NEURENIX_STATE_DIR": str(tmp_path / "state")},
    )
    assert out["starts_small"] == 0
    assert "heavy: not started for a graph of 2,183,168 estimated FLOPs" in out["small"] and "starting it takes ~2.0 s" in out["small"]
    assert out["starts_named"] == 1 and "runtime heavy (runtime='heavy' asked" in out["named"]
    assert "heavy" in out["big"]


@pytest.mark.parametrize("bad", [-1.0, float("inf"), "1s", True])
def test_a_host_runtime_start_must_be_seconds(bad: Any) -> None:
    from neurenix_core import Capabilities, Manifest, PriorityBand
    from neurenix_core.plugins.manifest import validate_manifest

    m = Manifest(name="acme", distribution="neurenix-acme", version="1.0", api=">=1.6,<2", device_types=("acme",),
                 band=PriorityBand.ACCELERATOR, capabilities=Capabilities(host_runtime="acme", host_runtime_start_s=bad))
    with pytest.raises(ValueError, match="host_runtime_start_s"):
        validate_manifest(m)
