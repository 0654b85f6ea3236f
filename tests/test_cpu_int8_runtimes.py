"""int8 on cpu:0 through the host runtimes' integer kernels (issue #44).

A static int8 plan compiled for cpu:0 is offered to every installed host runtime listing
``int8`` in ``HostRuntime.quantized_precisions`` (OpenVINO's CPU, LiteRT with XNNPACK), timed
against the core's integer reference, and each runtime's results are checked against that
reference with ``Compiled.verify``'s bound before it can be chosen. The third-party runtimes below
are real plugins written for the test (NumPy standing in for their hardware), as a vendor would
ship them: one computes the plan as it should, one applies an output scale wrongly.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.errors import CompilationError, UnsupportedOperationError
from neurenix_core.graph.compile import host_select
from neurenix_core.graph.reference.run import run_quantized

RUNTIMES = {name: rt for name, rt in host_select.host_runtimes().items() if not isinstance(rt, str)}
INT8 = sorted(name for name, rt in RUNTIMES.items() if "int8" in rt.quantized_precisions)


def _mlp() -> nn.Module:
    nn.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))


def _batches(n: int = 8, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((16, 64)).astype(np.float32) for _ in range(n)]


def _steps(compiled: Any, got: np.ndarray, x: np.ndarray) -> float:
    """Largest distance from the integer reference, in the output's quantization steps."""
    plan = compiled.plan
    want = np.asarray(run_quantized(compiled.graph, plan, x), np.float64)
    scale = float(np.asarray(plan.activations[compiled.graph.outputs[0]].scale).reshape(-1)[0])
    return float(np.max(np.abs(np.asarray(got, np.float64) - want))) / scale


@pytest.fixture
def state(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A fresh state folder for the runtime-choice cache."""
    from neurenix_core.plugins.state import registry

    monkeypatch.setattr(registry().config, "state_dir", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("runtime", INT8 or [pytest.param("none", marks=pytest.mark.skip(reason="no host runtime with int8 kernels installed"))])
def test_each_int8_runtime_follows_the_core_plan(runtime: str, state: Any) -> None:
    batches = _batches()
    compiled = nx.compile(_mlp(), device="cpu", quantize="int8", calibration=batches, runtime=runtime, progress=False)
    x = _batches(1, seed=5)[0]
    got = compiled(x).numpy()
    assert "int8 with the core's plan" in compiled.summary, compiled.summary
    assert f"runtime {runtime} (runtime={runtime!r} asked" in compiled.summary, compiled.summary
    # Runtimes requantize in float or fixed point: a value on a rounding boundary may land one
    # step away, and the step carries through one more layer; never further.
    assert _steps(compiled, got, x) <= 2.0
    assert compiled.verification is not None and compiled.verification.within_bound


def test_a_runtime_without_int8_kernels_is_refused_when_named_and_skipped_otherwise(state: Any) -> None:
    plain = sorted(name for name, rt in RUNTIMES.items() if "int8" not in rt.quantized_precisions)
    if not plain:
        pytest.skip("every installed host runtime has int8 kernels")
    with pytest.raises(UnsupportedOperationError, match=f"runtime='{plain[0]}' was asked, but {plain[0]} has no int8 kernels"):
        nx.compile(_mlp(), device="cpu", quantize="int8", calibration=_batches(), runtime=plain[0], progress=False)(_batches(1)[0])
    compiled = nx.compile(_mlp(), device="cpu", quantize="int8", calibration=_batches(), progress=False)
    compiled(_batches(1)[0])
    assert f"{plain[0]}: {plain[0]} has no int8 kernels for a static quantization plan" in compiled.summary, compiled.summary


def test_the_reference_stays_the_last_resort_and_integer_outputs_keep_their_dtype(state: Any) -> None:
    """runtime="numpy" runs the core's integer kernels; an argmax of an int8 model returns int64
    ids (it came back relabelled as float32 before)."""
    from neurenix_core.graph.ir import Graph, Node

    base = _mlp().to_graph()
    graph = Graph(base.inputs, (*base.nodes, Node("ids", "argmax", (base.outputs[0],), "ids", {"axis": 1})), ("ids",))
    compiled = nx.compile(graph, device="cpu", quantize="int8", calibration=_batches(), runtime="numpy", progress=False)
    ids = compiled(_batches(1)[0])
    assert "NumPy integer kernels on cpu:0 (int8, TFLite arithmetic)" in compiled.summary
    assert str(ids.dtype) == "int64" and ids.shape == (16, 1)  # argmax keeps the axis (ONNX keepdims=1)


def test_the_choice_is_keyed_by_the_plan_structure_not_its_scales() -> None:
    """A quantized model is another computation than the float one, and a plan quantizing other
    layers another again; a recalibration (other scales, same layers) is the same work."""
    import dataclasses

    from neurenix_core.graph.quantization import calibrate

    graph = _mlp().to_graph()
    a, b = calibrate(graph, _batches(seed=0), bits=8), calibrate(graph, _batches(seed=1), bits=8)
    fewer = dataclasses.replace(a, weights={k: v for k, v in list(a.weights.items())[:1]})
    keys = [host_select._cache_key(graph, None, None, plan) for plan in (a, b, fewer)]
    assert keys[0] == keys[1]
    assert len({host_select._cache_key(graph, None), keys[0], keys[2]}) == 3


# A third-party plugin with int8 kernels: "right8" computes the core's plan (its "kernels" are the
# integer reference), "wrong8" applies its output scale a second time, the fault verify exists for.
INT8_RUNTIMES = """
from __future__ import annotations
import numpy as np
from neurenix_core import hookimpl, Manifest, Capabilities, PriorityBand, ProbeResult
from neurenix_core.graph.ir.host import HostModel, HostRuntime
from neurenix_core.graph.reference.run import run_quantized

KIND = "{kind}"

class Model(HostModel):
    def __init__(self, graph, plan):
        self.graph, self.plan = graph, plan
        self.summary = f"{{KIND}} int8 kernels on cpu:0"
    def __call__(self, *xs):
        y = np.asarray(run_quantized(self.graph, self.plan, *xs), np.float32)
        return (y * np.float32(1.0 if KIND == "right8" else 1.25),)

class Runtime(HostRuntime):
    name = KIND
    version = "1.0"
    graph_ops = frozenset({{"linear", "relu"}})
    quantized_precisions = frozenset({{"int8"}})
    def compile(self, graph, options):
        if options.plan is None:
            from neurenix_core.errors import CompilationError
            raise CompilationError(f"{{KIND}} runs int8 models only")
        return Model(graph, options.plan)

@hookimpl
def neurenix_manifest():
    return Manifest(name=KIND, distribution=f"neurenix-{{KIND}}", version="1.0", api=">=1.5,<2", device_types=(KIND,),
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


def test_a_runtime_off_the_plan_is_skipped_before_it_is_chosen(plugin_site: Any, run_neurenix: Any, tmp_path: Any) -> None:
    plugin_site("right8", INT8_RUNTIMES.format(kind="right8"), module="nx_plugin_right8")
    site = plugin_site("wrong8", INT8_RUNTIMES.format(kind="wrong8"), module="nx_plugin_wrong8")
    out = run_neurenix(
        """
import json
import neurenix_core as nx
import test_cpu_int8_runtimes as t
c = nx.compile(t._mlp(), device="cpu", quantize="int8", calibration=t._batches(), progress=False)
c(t._batches(1)[0])
res = {"summary": c.summary}
try:
    nx.compile(t._mlp(), device="cpu", quantize="int8", calibration=t._batches(), runtime="wrong8", progress=False)
    res["named"] = "accepted"
except nx.CompilationError as e:
    res["named"] = str(e)
print(json.dumps(res))
""",
        site=site,
        env={"NEURENIX_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": f"{site}:{__import__('pathlib').Path(__file__).parent}"},
    )
    assert "right8 " in out["summary"].split("measured", 1)[1], out["summary"]  # timed as a candidate
    assert "wrong8: wrong result: " in out["summary"] and "from the core's integer reference" in out["summary"], out["summary"]
    # Named explicitly, the runtime is the user's call; the compile-time verification still refuses it.
    assert "does not compute what its quantization plan says" in out["named"], out["named"]
    assert "the first layer that differs is node" in out["named"], out["named"]  # prefixes compiled on wrong8 too


@pytest.mark.skipif("openvino" not in INT8, reason="needs neurenix-npu-openvino (OpenVINO's CPU int8 kernels)")
def test_a_saved_int8_model_loads_on_the_runtime_that_ran_it(state: Any, tmp_path: Any) -> None:
    batches = _batches()
    compiled = nx.compile(_mlp(), device="cpu", quantize="int8", calibration=batches, runtime="openvino", progress=False)
    want = compiled(batches[0]).numpy()
    loaded = nx.load_compiled(compiled.save(tmp_path / "int8"))
    np.testing.assert_array_equal(loaded(batches[0]).numpy(), want)
    assert "runtime openvino (the runtime this part ran on when the artifact was saved)" in loaded.summary, loaded.summary


def test_a_broken_plan_is_refused_whichever_runtime_runs_it(state: Any) -> None:
    """A plan with one wrong activation scale is refused whichever runtime runs it: the
    verification compares against the integer reference of the same plan, so only the plan
    check (integer vs float) can fail, and it names the layer."""
    import dataclasses

    batches = _batches()
    good = nx.compile(_mlp(), device="cpu", quantize="int8", calibration=batches, progress=False)
    plan = good.plan
    first = good.graph.nodes[0].output
    acts = dict(plan.activations)
    acts[first] = dataclasses.replace(acts[first], scale=acts[first].scale * np.float32(0.02))
    with pytest.raises(CompilationError, match="the int8 plan does not describe the model"):
        nx.compile(_mlp(), device="cpu", quantize=dataclasses.replace(plan, activations=acts), calibration=batches, progress=False)


def test_threads_reach_the_integer_reference() -> None:
    """nx.compile(..., threads=1) holds the integer kernels to one shard (they otherwise split
    their blocks over as many threads as the process gave BLAS), and the count is unset again
    after the run."""
    from neurenix_core.backends import cpu_threads
    from neurenix_core.graph.reference import run

    assert cpu_threads.asked() is None
    with cpu_threads.using(1):
        assert cpu_threads.asked() == 1 and run._threads() is None  # the caller's 1 stands
    assert cpu_threads.asked() is None
    compiled = nx.compile(_mlp(), device="cpu", quantize="int8", calibration=_batches(), runtime="numpy", threads=1, progress=False)
    compiled(_batches(1)[0])
    assert cpu_threads.asked() is None
