"""cpu:0 with the host-runtime choice cached (graph.host_select): a later process starts only the
runtime that won, so the other runtimes' frameworks are never imported; a cached winner whose
package is upgraded is measured again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from neurenix_core.graph.compile import host_select

#: The module each host runtime imports when it starts.
FRAMEWORKS = {"openvino": "openvino", "xla": "jax", "torch": "torch", "litert": "ai_edge_litert", "onnxruntime": "onnxruntime"}
RUNTIMES = sorted(name for name, rt in host_select.host_runtimes().items() if not isinstance(rt, str) and name in FRAMEWORKS)

CODE = """
import json, sys
import numpy as np
import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.graph.compile import host_select

nn.init.manual_seed(0)
model = nn.Sequential(nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 64))  # ~2.6 MFLOPs at batch 16: measured
compiled = nx.compile(model, device="cpu:0", outputs="host")
y = compiled(np.random.default_rng(0).standard_normal((16, 256)).astype(np.float32))
frameworks = {frameworks!r}
print(json.dumps({{"summary": compiled.summary, "y": np.asarray(y).tolist(),
                   "imported": sorted(k for k, m in frameworks.items() if m in sys.modules)}}))
"""


def _start_s(runtime: str) -> float:
    """The start the plugin offering ``runtime`` declares (Capabilities.host_runtime_start_s)."""
    from neurenix_core.plugins.state import registry

    for rec in registry().records:
        caps = rec.manifest.capabilities if rec.manifest is not None else None
        if caps is not None and caps.host_runtime == runtime:
            return caps.host_runtime_start_s or 0.0
    raise AssertionError(f"no plugin offers {runtime}")


def _runtime(summary: str) -> str:
    return summary.split("; runtime ", 1)[1].split(" ", 1)[0]


@pytest.mark.skipif(len(RUNTIMES) < 2, reason="fewer than two host runtimes installed: there is nothing to leave unstarted")
def test_a_warm_process_starts_only_the_cached_winner(run_neurenix: Any, tmp_path: Path) -> None:
    env = {"NEURENIX_STATE_DIR": str(tmp_path / "state")}
    code = CODE.format(frameworks=FRAMEWORKS)
    cold = run_neurenix(code, env=env)
    assert "measured at compile time" in cold["summary"]
    # Choosing started every installed runtime of a light start, and none of a heavy one: ~2.6
    # MFLOPs cannot repay importing JAX or PyTorch (host_select.HEAVY_START_S).
    assert set(cold["imported"]) == {r for r in RUNTIMES if _start_s(r) < host_select.HEAVY_START_S}
    warm = run_neurenix(code, env=env)
    assert "measured by an earlier compile (cached)" in warm["summary"]
    winner = _runtime(warm["summary"])
    assert winner == _runtime(cold["summary"]) and winner in (*FRAMEWORKS, host_select.INTERPRETER)
    # Only the winner's framework (none for the interpreter) was imported in the warm process.
    assert warm["imported"] == ([winner] if winner in FRAMEWORKS else [])
    np.testing.assert_allclose(warm["y"], cold["y"], rtol=1e-6, atol=1e-6)
    # The warm line names the same measured times and reasons as the cold one.
    assert warm["summary"].split("; measured ", 1)[1] == cold["summary"].split("; measured ", 1)[1]


def test_the_key_follows_installed_package_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    from neurenix_core.graph.ir import Graph, Node, TensorSpec

    graph = Graph((TensorSpec("x", (2, 3)),), (Node("t", "tanh", ("x",), "y"),), ("y",))
    base = host_select._cache_key(graph, None)
    assert base == host_select._cache_key(graph, None)
    installed = host_select._installed_runtimes()
    upgraded = [[*r[:3], [*r[3], "openvino==9999.0"]] for r in installed] or [["openvino", "npu", "9", ["openvino==9999.0"]]]
    monkeypatch.setattr(host_select, "_installed", upgraded)
    assert host_select._cache_key(graph, None) != base  # a framework upgrade: measured again
    assert host_select._cache_key(graph, 2) != host_select._cache_key(graph, None)


def test_requirement_versions_come_from_package_metadata() -> None:
    from importlib import metadata

    versions = host_select._requirement_versions("neurenix-core")
    assert f"numpy=={metadata.version('numpy')}" in versions
    assert all("==" in v or v.endswith(" missing") for v in versions)
    assert host_select._requirement_versions("no-such-distribution-neurenix") == []
