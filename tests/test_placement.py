"""Partitioned placement: a device that declares only conv2d and matmul runs a model with other
ops in two device partitions, reports them, matches the reference, and policy 'error' refuses."""

from __future__ import annotations

import gc
import warnings

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.graph import opset
from neurenix_core.graph.compile.placement import place
from neurenix_core.graph.ir import Graph, Node, TensorSpec
from neurenix_core.tensor.fallback import FallbackWarning

# A vendor-style plugin whose compiler lowers conv2d and matmul only (NumPy kernels standing in
# for its hardware) and says so as data; it refuses anything else it is handed.
PLUGIN = '''
from __future__ import annotations
import numpy as np
from neurenix_core import hookimpl, Manifest, Capabilities, PriorityBand, ProbeResult, ArrayNamespaceBackend, CompiledModel
from neurenix_core.errors import UnsupportedOperationError
from neurenix_core.graph.reference.run import run_graph

SEGMENTS = []

class ConvBackend(ArrayNamespaceBackend):
    def __init__(self):
        super().__init__(np, device_type="convdev", device_count=1, emulated=True)
    def _native_device(self, index):
        return "cpu"
    def _from_host(self, array, index):
        return np.array(array, copy=True)

class Program(CompiledModel):
    def __init__(self, graph):
        self.graph = graph
        self.summary = "convdev program"
    def _run(self, *xs):
        out = run_graph(self.graph, *xs, float_dtype=np.float32)
        return out

@hookimpl
def neurenix_manifest():
    return Manifest(name="convdev", distribution="neurenix-convdev", version="1.0", api=">=1.1,<2", device_types=("convdev",),
                    band=PriorityBand.ACCELERATOR,
                    capabilities=Capabilities(native_ops=("*",), compiles_models=True, graph_ops=("conv2d", "matmul")),
                    emulation="convdev")

@hookimpl
def neurenix_probe(context):
    return ProbeResult.emulating(1)

@hookimpl
def neurenix_backend(manifest, probe):
    return ConvBackend()

@hookimpl
def neurenix_compile(backend, graph, options):
    bad = [n for n in graph.nodes if n.op not in ("conv2d", "matmul")]
    if bad:
        raise UnsupportedOperationError(f"convdev cannot lower {bad[0].name!r} ({bad[0].op})")
    SEGMENTS.append([n.op for n in graph.nodes])
    return Program(graph)
'''

MODEL = """
import json, warnings, numpy as np, neurenix_core as nx
from neurenix_core.graph.ir import Graph, Node, TensorSpec
from neurenix_core.graph.reference.run import run_graph
import nx_plugin_convdev as plugin
rng = np.random.default_rng(0)
w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
m = rng.standard_normal((144, 5)).astype(np.float32)
graph = Graph((TensorSpec("x", (2, 3, 6, 6)),), (
    Node("conv", "conv2d", ("x",), "conv", {"in_channels": 3, "out_channels": 4, "kernel_size": (3, 3), "padding": (1, 1)}, {"weight": w}),
    Node("act", "hardswish", ("conv",), "act"),
    Node("flat", "reshape", ("act",), "flat", {"shape": (2, -1)}),
    Node("w", "constant", (), "w", {}, {"value": m}),
    Node("head", "matmul", ("flat", "w"), "head"),
), ("head",))
x = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
"""


def test_two_device_partitions_report_and_reference(plugin_site, run_neurenix) -> None:
    site = plugin_site("convdev", PLUGIN, module="nx_plugin_convdev")
    out = run_neurenix(
        MODEL + """
c = nx.compile(graph, device="convdev:0")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    y = c(x)
p = c.placement
res = {"device": str(y.device), "err": float(np.abs(y.numpy() - run_graph(graph, x)).max()), "segments": plugin.SEGMENTS,
       "line": p.line(), "warnings": [str(w.message) for w in caught], "nodes": p.nodes,
       "off": [[o.node, o.op, o.reason] for o in p.off_device], "flops": p.flops, "summary": c.summary, "report": str(p)}
with nx.fallback_policy("error"):
    try:
        nx.compile(graph, device="convdev:0")(x)
    except nx.CompilationError as e:
        res["error"] = str(e)
print(json.dumps(res))
""",
        site=site,
        env={"NEURENIX_EMULATE": "convdev"},
    )
    assert out["device"] == "convdev:0" and out["err"] < 1e-4
    assert out["segments"] == [["conv2d"], ["matmul"]]  # two device partitions, the CPU between them
    assert out["nodes"] == {"convdev:0": 2, "cpu:0": 3}  # hardswish decomposed: mul + hardsigmoid, and reshape
    assert sorted(o[1] for o in out["off"]) == ["hardsigmoid", "mul", "reshape"]
    assert all("op not declared by plugin convdev" in o[2] for o in out["off"])
    # convdev's probe emulates, and its manifest names no runtime: the line says so all the same.
    assert out["line"].startswith("convdev:0 (emulated: its software stack on the host CPU) runs 2/5 nodes (") and "3 nodes on cpu:0" in out["line"]
    assert out["flops"]["convdev:0"] > 10 * out["flops"]["cpu:0"]
    assert out["warnings"] == [out["line"]]  # one default-visible line
    assert "partitioned" in out["summary"] and "act/hardsigmoid" in out["report"]
    assert "node 'flat' (op reshape)" in out["error"] and "fallback policy is 'error'" in out["error"]


def test_cpu_runs_everything_and_reports_it() -> None:
    g = Graph((TensorSpec("x", (2, 3)),), (Node("s", "silu", ("x",), "s"), Node("m", "reduce_mean", ("s",), "m", {"axes": (1,)})), ("m",))
    c = nx.compile(g, device="cpu:0")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(c(x).numpy(), (x / (1 + np.exp(-x))).mean(1, keepdims=True), rtol=1e-6)
    assert c.placement.line() == "cpu:0 runs 2/2 nodes (100.0% of FLOPs)" and not c.placement.partitioned


def test_int64_values_stay_off_a_float32_only_device() -> None:
    table = np.ones((5, 2), np.float32)
    g = Graph((TensorSpec("ids", (3,), "int64"),), (
        Node("emb", "embedding", ("ids",), "emb", {}, {"weight": table}),
        Node("r", "relu", ("emb",), "r"),
    ), ("r",))
    p = place(g, opset.LEGACY_OPS | {"gather", "constant"}, {"float32"}, "npu:0", "neurenix-npu-openvino")
    gather = [o for o in p.off_device if o.op == "gather"]
    assert gather and gather[0].reason == "int64 values not supported by plugin neurenix-npu-openvino"
    assert "1 node on cpu:0: gather (int64 values not supported by plugin neurenix-npu-openvino)" in p.line()


def test_composites_declared_are_kept_and_undeclared_decomposed() -> None:
    rng = np.random.default_rng(0)
    lin = Node("fc", "linear", ("x",), "fc", {"in_features": 4, "out_features": 3}, {"weight": rng.standard_normal((3, 4)), "bias": rng.standard_normal(3)})
    g = Graph((TensorSpec("x", (2, 4)),), (lin, Node("g", "gelu", ("fc",), "g")), ("g",))
    kept = place(g, {"linear", "gelu"}, {"float32"}, "tpu:0", "neurenix-tpu")
    assert [n.op for n in kept.graph.nodes] == ["linear", "gelu"] and not kept.partitioned
    prims = place(g, {"matmul", "add", "mul", "erf", "constant"}, {"float32"}, "tpu:0", "neurenix-tpu")
    assert "linear" not in {n.op for n in prims.graph.nodes} and not prims.partitioned


def test_manifest_rejects_malformed_graph_ops() -> None:
    from neurenix_core.plugins.manifest import NEURENIX_API_VERSION, Capabilities, Manifest, PriorityBand, validate_manifest

    assert NEURENIX_API_VERSION >= (1, 1)
    bad = Manifest(name="acme", distribution="neurenix-acme", version="1", api=">=1.0,<2", device_types=("acme",),
                   band=PriorityBand.NPU, capabilities=Capabilities(graph_ops="conv2d"))
    with pytest.raises(ValueError, match="graph_ops"):
        validate_manifest(bad)


@pytest.fixture(scope="module")
def vit_graph() -> tuple[Graph, np.ndarray, np.ndarray]:
    torch = pytest.importorskip("torch")
    import model_zoo as zoo

    from neurenix_core import nn

    model = zoo.build("vit")
    x = np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32)
    return nn.from_torch(model, torch.from_numpy(x)).to_graph(), x, model(torch.from_numpy(x)).detach().numpy()


@pytest.mark.parametrize("device", ["tpu:0", "cuda:0", "ort:0"])
def test_imported_vit_runs_whole_on_a_plugin_that_declares_the_opset(device: str, vit_graph: tuple[Graph, np.ndarray, np.ndarray]) -> None:
    """tpu, cuda and the ONNX Runtime example declare every opset op: nothing is partitioned off."""
    if nx.Device(device) not in nx.devices():
        pytest.skip(f"{device} is not available here (run with NEURENIX_EMULATE=cuda,tpu,npu,edgetpu)")
    graph, x, want = vit_graph
    compiled = nx.compile(graph, device=device, precision="fp32")
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        y = compiled(x)
    assert str(y.device) == device
    assert float(np.abs(y.numpy() - want).max() / np.abs(want).max()) <= 1e-5
    p = compiled.placement
    assert not p.partitioned and set(p.nodes) == {device} and not p.off_device
    del compiled, y, p
    gc.collect()


# npu, edgetpu, tpu, cuda and the ONNX Runtime example all declare the opset now, so no
# real plugin is left to partition the ViT: partitioning across a plugin and the CPU is covered by
# test_two_device_partitions_report_and_reference (a plugin declaring conv2d and matmul) and by
# plugins/neurenix-edgetpu/tests/test_edgetpu_graph_ops.py (ops Coral's compiler refuses).


# The same kind of plugin for a quantized model: it lowers conv2d and linear only and runs the
# (sub-)plan it is given with the core's integer reference, as the vendor template does.
QPLUGIN = PLUGIN.replace('"convdev"', '"qdev"').replace("convdev", "qdev").replace('("conv2d", "matmul")', '("conv2d", "linear")').replace(
    "from neurenix_core.graph.reference.run import run_graph", "from neurenix_core.graph.reference.run import run_graph, run_quantized").replace(
    '''    def _run(self, *xs):
        out = run_graph(self.graph, *xs, float_dtype=np.float32)''', '''    def _run(self, *xs):
        out = run_quantized(self.graph, self.plan, *xs)
        out = tuple(np.asarray(o, np.float32) for o in out) if isinstance(out, tuple) else np.asarray(out, np.float32)''').replace(
    '''    SEGMENTS.append([n.op for n in graph.nodes])
    return Program(graph)''', '''    plan = options.quantization
    missing = [s.name for s in graph.inputs if s.name not in plan.activations]
    if missing:  # as a TFLite writer: every input is quantized with the plan's parameters
        from neurenix_core.errors import QuantizationError
        raise QuantizationError(f"qdev: no activation parameters for input(s) {missing}")
    SEGMENTS.append({"ops": [n.op for n in graph.nodes], "inputs": [s.name for s in graph.inputs], "precision": options.precision,
                     "acts": sorted(plan.activations), "weights": sorted(plan.weights)})
    program = Program(graph)
    program.plan = plan
    return program''')

QMODEL = """
import json, warnings, numpy as np, neurenix_core as nx
from neurenix_core.graph.ir import Graph, Node, TensorSpec
from neurenix_core.graph.reference.run import run_graph, run_quantized
import nx_plugin_qdev as plugin
rng = np.random.default_rng(0)
conv = {"in_channels": 3, "out_channels": 4, "kernel_size": (3, 3), "padding": (1, 1)}
graph = Graph((TensorSpec("x", (8, 3, 6, 6)),), (
    Node("conv", "conv2d", ("x",), "conv", conv, {"weight": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
                                                   "bias": rng.standard_normal(4).astype(np.float32)}),
    Node("act", "hardswish", ("conv",), "act"),
    Node("flat", "flatten", ("act",), "flat", {"start_dim": 1}),
    Node("head", "linear", ("flat",), "head", {}, {"weight": rng.standard_normal((5, 144)).astype(np.float32) * 0.1,
                                                 "bias": rng.standard_normal(5).astype(np.float32)}),
), ("head",))
calib = [rng.standard_normal((8, 3, 6, 6)).astype(np.float32) for _ in range(6)]
x = calib[2]
"""


def test_quantized_model_partitions_with_the_sub_plans_and_matches_the_integer_reference(plugin_site, run_neurenix) -> None:
    site = plugin_site("qdev", QPLUGIN, module="nx_plugin_qdev")
    out = run_neurenix(
        QMODEL + """
with warnings.catch_warnings(record=True) as caught:  # the compile verifies on a calibration batch: it partitions then
    warnings.simplefilter("always")
    c = nx.compile(graph, device="qdev:0", quantize="int8", calibration=calib, progress=False)
    y = c(x).numpy()
want = run_quantized(c.graph, c.plan, x)
step = float(c.plan.activations["head"].scale[0])
p = c.placement
res = {"device": str(c.device), "steps": float(np.abs(y - want).max() / step), "float_err": float(np.abs(y - run_graph(graph, x)).max()),
       "segments": plugin.SEGMENTS, "line": p.line(), "warnings": [str(w.message) for w in caught], "summary": c.summary,
       "off": sorted(o.op for o in p.off_device), "nodes": p.nodes}
with nx.fallback_policy("error"):
    try:
        nx.compile(graph, device="qdev:0", quantize="int8", calibration=calib, progress=False)(x)
    except nx.CompilationError as e:
        res["error"] = str(e)
print(json.dumps(res))
""",
        site=site,
        env={"NEURENIX_EMULATE": "qdev"},
    )
    assert out["steps"] <= 1.0  # the all-CPU integer reference, within one quantization step
    assert 1e-4 < out["float_err"] < 0.5  # really quantized
    segs = out["segments"]
    assert [s["ops"] for s in segs] == [["conv2d"], ["linear"]] and all(s["precision"] == "int8" for s in segs)
    # each device segment gets the plan of its own values only
    assert segs[0]["acts"] == ["conv", "x"] and segs[0]["weights"] == ["conv"]
    assert segs[1]["acts"] == ["flat", "head"] and segs[1]["weights"] == ["head"]
    assert out["off"] == ["flatten", "hardswish"]  # a quantized model keeps its composites whole
    assert out["nodes"] == {"qdev:0": 2, "cpu:0": 2}
    assert out["warnings"] == [out["line"]] and "2 nodes on cpu:0" in out["line"]
    assert "in int8 on the host runtime each cpu:0 segment's line in the placement report names, or the integer reference" in out["summary"]
    assert "node 'act' (op hardswish)" in out["error"] and "fallback policy is 'error'" in out["error"]


def test_quantized_segment_the_plugin_cannot_quantize_runs_on_the_integer_reference(plugin_site, run_neurenix) -> None:
    """A matmul whose constant weight reaches the device as an input (the device does not declare
    `constant`) has no activation parameters there: the plugin refuses the segment, which then
    runs on the CPU's integer reference and is reported."""
    plugin = QPLUGIN.replace("qdev", "mdev").replace('("conv2d", "linear")', '("conv2d", "linear", "matmul")')
    site = plugin_site("mdev", plugin, module="nx_plugin_mdev")
    out = run_neurenix(
        QMODEL.replace("nx_plugin_qdev", "nx_plugin_mdev") + """
graph = Graph(graph.inputs, graph.nodes + (
    Node("w", "constant", (), "w", {}, {"value": rng.standard_normal((5, 3)).astype(np.float32)}),
    Node("mm", "matmul", ("head", "w"), "mm")), ("mm",))
with nx.fallback_policy("allow"):
    c = nx.compile(graph, device="mdev:0", quantize="int8", calibration=calib, progress=False)
    y = c(x).numpy()
want = run_quantized(c.graph, c.plan, x)
p = c.placement
print(json.dumps({"steps": float(np.abs(y - want).max() / float(c.plan.activations["mm"].scale[0])),
                  "segments": [s["ops"] for s in plugin.SEGMENTS], "off": {o.node: o.reason for o in p.off_device},
                  "weights": sorted(c.plan.weights)}))
""",
        site=site,
        env={"NEURENIX_EMULATE": "mdev"},
    )
    assert out["steps"] <= 1.0
    assert out["weights"] == ["conv", "head", "mm"]  # the matmul's constant weight is per-channel int8
    assert out["segments"] == [["conv2d"]]  # the linear + matmul segment was refused whole
    for node in ("head", "mm"):
        assert "refused the segment" in out["off"][node] and "no activation parameters for input(s) ['w']" in out["off"][node]
