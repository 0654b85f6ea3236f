"""nx.compile on the CPU backend (eager graph) and through a real compiling plugin (the hook flow)."""

from __future__ import annotations

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.errors import CompilationError, QuantizationError, ShapeError
from neurenix_core.graph.reference.run import run_graph

RNG = np.random.default_rng(0)


def _cnn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, padding=2, dilation=2, groups=2),
                         nn.BatchNorm2d(8), nn.GELU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))


@pytest.mark.parametrize("build, shape", [(lambda: nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 3)), (5, 10)), (_cnn, (2, 3, 12, 12))])
def test_compiled_equals_eager_equals_reference(build, shape) -> None:
    nn.manual_seed(0)
    model = build()
    x = RNG.standard_normal(shape).astype(np.float32)
    compiled = nx.compile(model, device="cpu")
    out = compiled(x)
    assert isinstance(out, nx.Tensor) and out.device == nx.Device("cpu", 0)
    ref = run_graph(model.to_graph(shape), x)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(model(nx.asarray(x)).numpy(), ref, rtol=1e-5, atol=1e-5)
    # Small float32 models are measured: whichever runtime won, the summary names it and why.
    assert compiled.compiled_shapes == [(shape,)] and "on cpu:0" in compiled.summary and "; runtime " in compiled.summary
    assert compiled.device == nx.Device("cpu", 0) and compiled.precision is None


def test_wrong_input_shape_names_layer_and_shapes() -> None:
    compiled = nx.compile(_cnn())
    compiled(np.zeros((1, 3, 12, 12), np.float32))
    with pytest.raises(ShapeError, match=r"layer '0' \(conv2d\).*\(1, 4, 12, 12\).*3 channels"):
        compiled(np.zeros((1, 4, 12, 12), np.float32))
    with pytest.raises(ShapeError, match="takes 1 input"):
        compiled(np.zeros((1, 3, 12, 12), np.float32), np.zeros(1))
    assert compiled.compiled_shapes == [((1, 3, 12, 12),)]  # nothing cached for the bad shapes


def test_untraceable_model_fails_at_compile_time() -> None:
    class Custom(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x):
            return self.fc(x) * 2.0

    with pytest.raises(CompilationError, match="constant"):
        nx.compile(Custom())


def test_quantize_needs_clean_calibration() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    with pytest.raises(QuantizationError, match="needs calibration data"):
        nx.compile(model, quantize="int8")
    bad = [np.ones((2, 4)), np.array([[1, np.nan, 0, 0]])]
    with pytest.raises(QuantizationError, match="batch 1 contains NaN"):
        nx.compile(model, quantize=True, calibration=bad, progress=False)
    with pytest.raises(QuantizationError, match="empty"):
        nx.compile(model, quantize=True, calibration=[], progress=False)
    with pytest.raises(QuantizationError, match="conflicts"):
        nx.compile(model, quantize="int8", precision="fp16", calibration=[np.ones((1, 4))])


PLUGIN = '''
from __future__ import annotations
import numpy as np
from neurenix_core import hookimpl, Manifest, Capabilities, PriorityBand, ProbeResult, ArrayNamespaceBackend, CompiledModel
from neurenix_core.errors import UnsupportedOperationError
from neurenix_core.graph.reference.run import run_graph

CALLS = []

class AcmeBackend(ArrayNamespaceBackend):
    def __init__(self):
        super().__init__(np, device_type="acme", device_count=2, emulated=True)
    def _native_device(self, index):
        return "cpu"
    def _from_host(self, array, index):
        return np.array(array, copy=True)

class Program(CompiledModel):
    def __init__(self, graph):
        self.graph = graph
        self.summary = f"acme program for {graph.inputs[0].shape}"
    def _run(self, x):
        assert isinstance(x, np.ndarray)
        return run_graph(self.graph, x).astype(np.float32)

@hookimpl
def neurenix_manifest():
    return Manifest(name="acme", distribution="neurenix-acme", version="1.0", api=">=1.0,<2", device_types=("acme",),
                    band=PriorityBand.ACCELERATOR, capabilities=Capabilities(native_ops=("*",), compiles_models=True), emulation="acme")

@hookimpl
def neurenix_probe(context):
    return ProbeResult.emulating(2)

@hookimpl
def neurenix_backend(manifest, probe):
    return AcmeBackend()

@hookimpl
def neurenix_compile(backend, graph, options):
    CALLS.append((graph.inputs[0].shape, options.precision))
    if any(n.op == "gelu" for n in graph.nodes):
        raise UnsupportedOperationError(f"layer {[n.name for n in graph.nodes if n.op == 'gelu'][0]!r} (gelu) is not supported by acme")
    return Program(graph)
'''


def test_plugin_compile_hook_per_shape_and_fallback(plugin_site, run_neurenix) -> None:
    site = plugin_site("acme", PLUGIN, module="nx_plugin_acme_compile")
    out = run_neurenix(
        """
        import json, warnings, numpy as np, neurenix_core as nx
        from neurenix_core import nn
        import nx_plugin_acme_compile as plugin
        nn.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
        c = nx.compile(model.to("acme:0"), device="acme:0")
        x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
        y = c(x); c(x); c(np.ones((5, 4), np.float32))
        ok = bool(np.allclose(y.numpy(), model.to("cpu")(nx.asarray(x, device="cpu")).numpy(), atol=1e-5))
        res = {"device": str(y.device), "calls": [list(s) for s, _ in plugin.CALLS], "ok": ok, "summary": c.summary}
        host = c(nx.asarray(x, device="cpu"))  # host memory is copied in by the call
        res["host_ok"] = bool(host.device == nx.Device("acme:0") and np.array_equal(host.numpy(), y.numpy()))
        try:
            c(nx.asarray(x, device="acme:1"))  # another accelerator is never moved silently
        except nx.DeviceMismatchError as e:
            res["mismatch"] = str(e)
        g = nx.compile(nn.Sequential(nn.Linear(4, 4), nn.GELU()).to("acme:0"), device="acme:0")
        with nx.fallback_policy("error"):
            try:
                g(x)
            except nx.CompilationError as e:
                res["error"] = str(e)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            res["fallback_shape"] = list(g(x).shape)
            res["warned"] = len(w)
        print(json.dumps(res))
        """,
        site=site,
        env={"NEURENIX_EMULATE": "acme"},
    )
    assert out["device"] == "acme:0" and out["ok"]
    assert out["calls"] == [[3, 4], [5, 4]]  # compiled once per input shape
    assert "acme program for (3, 4)" in out["summary"]
    assert out["host_ok"] and "acme:1" in out["mismatch"] and "x.to('acme:0')" in out["mismatch"]
    assert "'1' (gelu)" in out["error"] and "fallback policy is 'error'" in out["error"]
    assert out["fallback_shape"] == [3, 4] and out["warned"] >= 1
