"""The placement report after a plugin refuses a whole single-segment float model (issue #28 C4):
the model runs eagerly, op by op, and ``compiled.placement`` says so, with the refusal, instead of
"<device> runs 3/3 nodes" as if one compiled program ran them.

A real plugin written as a file; it compiles nothing (it refuses every model without naming a node).
"""

from __future__ import annotations

PLUGIN = '''
from __future__ import annotations
import numpy as np
from neurenix_core import hookimpl, Manifest, Capabilities, PriorityBand, ProbeResult, ArrayNamespaceBackend
from neurenix_core.errors import UnsupportedOperationError

class NoCompileBackend(ArrayNamespaceBackend):
    def __init__(self):
        super().__init__(np, device_type="refdev", device_count=1, emulated=True)
    def _native_device(self, index):
        return "cpu"
    def _from_host(self, array, index):
        return np.array(array, copy=True)

@hookimpl
def neurenix_manifest():
    return Manifest(name="refdev", distribution="neurenix-refdev", version="1.0", api=">=1.1,<2", device_types=("refdev",),
                    band=PriorityBand.ACCELERATOR,
                    capabilities=Capabilities(native_ops=("*",), compiles_models=True, graph_ops=("linear", "relu")),
                    emulation="refdev")

@hookimpl
def neurenix_probe(context):
    return ProbeResult.emulating(1)

@hookimpl
def neurenix_backend(manifest, probe):
    return NoCompileBackend()

@hookimpl
def neurenix_compile(backend, graph, options):
    raise UnsupportedOperationError("refdev firmware 0.9 lowers no model at all")
'''

CODE = """
import json, numpy as np, neurenix_core as nx
from neurenix_core.graph.ir import Graph, Node, TensorSpec
from neurenix_core.graph.reference.run import run_graph
rng = np.random.default_rng(0)
w1 = rng.standard_normal((8, 4)).astype(np.float32)
w2 = rng.standard_normal((3, 8)).astype(np.float32)
graph = Graph((TensorSpec("x", (2, 4)),), (
    Node("fc1", "linear", ("x",), "h", {}, {"weight": w1}),
    Node("act", "relu", ("h",), "a"),
    Node("fc2", "linear", ("a",), "y", {}, {"weight": w2}),
), ("y",))
x = rng.standard_normal((2, 4)).astype(np.float32)
with nx.fallback_policy("allow"):
    compiled = nx.compile(graph, device="refdev:0", precision="fp32")
    got = compiled(x).to("cpu").numpy()
p = compiled.placement
print(json.dumps({"line": p.line(), "text": str(p), "summary": compiled.summary, "off": len(p.off_device),
                  "ok": bool(np.allclose(got, run_graph(graph, x), rtol=1e-5, atol=1e-5))}))
"""


def test_refused_model_report_says_eager_and_why(plugin_site, run_neurenix):
    site = plugin_site("refdev", PLUGIN)
    out = run_neurenix(CODE, site=site, env={"NEURENIX_EMULATE": "refdev", "NEURENIX_BACKENDS": "-onnxruntime"})
    assert out["ok"] and out["off"] == 0  # every node has an eager form: nothing moved to cpu:0
    line = out["line"]
    # NEURENIX_EMULATE=refdev: the line says the device is emulated (its manifest names no runtime).
    assert line.startswith("refdev:0 (emulated: its software stack on the host CPU) runs 3/3 nodes (100.0% of FLOPs) eagerly, op by op, "
                           "not compiled")
    assert "plugin refdev refused the model (refdev firmware 0.9 lowers no model at all)" in line
    assert "runs on cpu:0 under the fallback policy" in line
    assert out["text"].splitlines()[0] == line  # str(placement) leads with the same line
    assert "could not lower the model" in out["summary"]
