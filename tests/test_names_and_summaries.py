"""A newcomer's first hour (issue #43): one name per plugin, summaries that read as words, node
counts that agree, and emulated devices that say so.

- A plugin's name is the device type it serves (``npu``, ``cuda``, ``ort``); its distribution's name
  without ``neurenix-`` (``npu-openvino``, ``cuda-tc``, ``onnxruntime``) is an alias accepted
  wherever a plugin name is taken: NEURENIX_BACKENDS, NEURENIX_EMULATE, ``neurenix bench --only``,
  ``--neurenix-backend``; messages print the one name.
- ``compiled.summary`` starts with "input (64, 64): ", not a tuple's repr.
- The placement line, the segment lines and the npu plugin's summary count the same nodes (the
  graph's operations), constants apart.
- An emulated device's placement line and ``neurenix bench``'s chart title say it is emulated
  and what runs it.
"""

from __future__ import annotations

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.config import Config, inspect_config, plugin_problems
from neurenix_core.graph import opset
from neurenix_core.graph.compile.placement import Placement, place
from neurenix_core.graph.compile.report import _shapes_text
from neurenix_core.graph.ir import Graph, Node, TensorSpec
from neurenix_core.plugins.names import alias_of

PRESENT = {str(d).split(":")[0] for d in nx.devices()}
EMULATED_NPU = pytest.mark.skipif("npu" not in PRESENT or not nx.Device("npu:0").emulated,
                                  reason="needs NEURENIX_EMULATE=npu (scripts/test.sh sets it)")


def _config(**kw: object) -> Config:
    base: dict[str, object] = {"device": None, "allow": (), "deny": frozenset(), "autoload": True, "emulate": frozenset(),
                               "strict": False, "probe_timeout": 2.0, "native_probe_timeout": 10.0, "fallback": "warn"}
    return Config(**{**base, **kw})  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- one name per plugin
@pytest.mark.parametrize(("name", "distribution", "alias"), [
    ("npu", "neurenix-npu-openvino", "npu-openvino"),
    ("cuda", "neurenix-cuda-tc", "cuda-tc"),
    ("ort", "neurenix_onnxruntime", "onnxruntime"),  # PEP 503: the distribution's spelling does not matter
    ("tpu", "neurenix-tpu", None),  # the alias would be the name itself
    ("cpu", "neurenix-core", None),  # the core is not a plugin distribution
    ("acme", "acme-accelerator", None),  # a distribution not called neurenix-* has no alias
    ("npu-openvino", "neurenix-npu-openvino", None),  # an older release, still named by its entry point
])
def test_the_alias_is_the_distribution_s_name_without_neurenix(name: str, distribution: str, alias: str | None) -> None:
    assert alias_of(name, distribution) == alias


def test_the_allow_and_deny_lists_take_the_name_or_the_alias() -> None:
    denied = _config(deny=frozenset({"npu-openvino"}))
    assert denied.is_denied("npu", builtin=False, alias="npu-openvino") == "denied by NEURENIX_BACKENDS (-npu-openvino)"
    assert denied.is_denied("tpu", builtin=False) is None
    allowed = _config(allow=("cuda-tc", "cpu"))
    assert allowed.is_denied("cuda", builtin=False, alias="cuda-tc") is None
    assert allowed.is_denied("npu", builtin=False, alias="npu-openvino") == "not in the allow list NEURENIX_BACKENDS=cuda-tc,cpu"


def test_an_unknown_plugin_name_lists_the_names_and_the_aliases() -> None:
    config = inspect_config({"NEURENIX_BACKENDS": "npu-openvino,-cuda-tc,npu-openvinoo"}).config
    problems = plugin_problems(config, ["cpu", "cuda", "npu"], ["npu", "npu-openvino"], {"npu-openvino": "npu", "cuda-tc": "cuda"})
    assert [p.value for p in problems] == ["npu-openvinoo"]
    message = problems[0].message
    assert "did you mean 'npu-openvino'" in message
    assert "installed plugins: cpu, cuda, npu (aliases: cuda-tc for cuda, npu-openvino for npu)" in message


def test_backends_print_the_one_name_and_list_the_alias() -> None:
    rows = {b.name: b for b in nx.backends()}
    assert "npu-openvino" not in rows and "cuda-tc" not in rows and "onnxruntime" not in rows
    assert rows["npu"].aliases == ("npu-openvino",) and rows["npu"].as_dict()["aliases"] == ["npu-openvino"]
    assert rows["cuda"].aliases == ("cuda-tc",) and rows["tpu"].aliases == ()
    from neurenix_core.plugins.state import registry

    assert registry().record_named("npu-openvino") is registry().record_named("npu")
    assert registry().record_named("cuda-tc") is registry().record_named("cuda")


def test_environment_variables_take_the_alias_before_anything_is_imported(run_neurenix) -> None:
    code = """
    import json, sys, neurenix_core as nx
    rows = {b.name: [b.status.value, b.emulated] for b in nx.backends()}
    print(json.dumps({"rows": rows, "imported": "neurenix_npu_openvino.plugin" in sys.modules}))
    """
    denied = run_neurenix(code, env={"NEURENIX_BACKENDS": "-npu-openvino", "NEURENIX_EMULATE": "tpu"})
    assert denied["rows"]["npu"][0] == "denied" and denied["imported"] is False  # denied by its alias, never imported
    emulated = run_neurenix(code, env={"NEURENIX_BACKENDS": "npu-openvino,cpu", "NEURENIX_EMULATE": "npu-openvino"})
    assert emulated["rows"]["npu"] == ["emulated", True]  # allowed and emulated by its alias
    assert emulated["rows"]["tpu"][0] == "denied"


def test_bench_only_takes_the_alias_and_names_the_valid_ones() -> None:
    from neurenix_core.cli import bench
    from neurenix_core.errors import ConfigurationError

    assert bench.chosen_plugins(["npu-openvino", "cuda-tc", "onnxruntime", "npu"]) == ["npu", "cuda", "ort"]
    assert bench.chosen_plugins(None) == sorted(bench.BENCHMARKS)
    with pytest.raises(ConfigurationError, match=r"--only npu_openvino: .*valid names: cpu, cuda, edgetpu, npu, ort, tpu "
                                                 r"\(aliases: .*npu-openvino for npu"):
        bench.chosen_plugins(["npu_openvino"])


def test_runtime_given_a_plugin_name_says_which_runtime_it_offers() -> None:
    """runtime= names a cpu:0 runtime (the library), not a plugin: 'ort' is not taken for
    'onnxruntime' (nor 'npu' for 'openvino'), but the error names the runtime meant."""
    from neurenix_core.plugins.state import registry

    if registry().record_named("ort") is None or not registry().record_named("ort").usable:
        pytest.skip("the neurenix-onnxruntime example is not installed")
    from neurenix_core import nn

    with pytest.raises(nx.InvalidOptionError, match=r"'ort' names plugin ort, not a runtime: the runtime it offers for cpu:0 is "
                                                    r"runtime='onnxruntime'"):
        nx.compile(nn.Sequential(nn.Linear(4, 2)), device="cpu", runtime="ort")


# ---------------------------------------------------------------------------- summaries in words
def test_the_shapes_read_as_words() -> None:
    assert _shapes_text(((64, 64),)) == "input (64, 64)"
    assert _shapes_text(((1, 8), (1, 4))) == "inputs (1, 8), (1, 4)"
    assert _shapes_text(((1, 8),) + ((2, 3),) * 60) == "inputs (1, 8), (2, 3) x60"
    assert _shapes_text(()) == "no inputs"


def test_a_compiled_summary_starts_with_its_input_shape() -> None:
    from neurenix_core import nn

    compiled = nx.compile(nn.Sequential(nn.Linear(64, 64), nn.ReLU()), device="cpu", runtime="numpy")
    compiled(np.zeros((64, 64), np.float32))
    assert compiled.summary.startswith("input (64, 64): eager on cpu:0"), compiled.summary
    assert "((" not in compiled.summary


# ---------------------------------------------------------------------------- node counts agree
def _graph_with_constants() -> Graph:
    rng = np.random.default_rng(0)
    return Graph((TensorSpec("x", (2, 6)),), (
        Node("w", "constant", (), "w", {}, {"value": rng.standard_normal((6, 5)).astype(np.float32)}),
        Node("b", "constant", (), "b", {}, {"value": rng.standard_normal((5,)).astype(np.float32)}),
        Node("mm", "matmul", ("x", "w"), "mm"),
        Node("add", "add", ("mm", "b"), "add"),
        Node("act", "relu", ("add",), "act"),
    ), ("act",))


def test_the_placement_line_and_the_segment_lines_count_the_same_nodes() -> None:
    placement = place(_graph_with_constants(), set(opset.OPSET), set(opset.DTYPES), "cpu:0", "cpu")
    text = str(placement)
    assert placement.line().startswith("cpu:0 runs 3/3 nodes"), text
    assert "  cpu:0: 3 nodes," in text
    assert "  segment on cpu:0: 3 nodes and 2 constants, w .. act" in text, text


@EMULATED_NPU
def test_the_npu_summary_counts_what_the_placement_counts() -> None:
    compiled = nx.compile(_graph_with_constants(), device="npu")
    compiled(np.ones((2, 6), np.float32))
    line = compiled.placement.line()
    assert "runs 3/3 nodes" in line, line
    assert "3 neurenix graph node(s) and 2 constant(s)" in compiled.summary, compiled.summary


# ---------------------------------------------------------------------------- emulated devices say so
def test_the_placement_line_names_the_emulation() -> None:
    placement = place(_graph_with_constants(), set(opset.OPSET), set(opset.DTYPES), "npu:0", "npu")
    assert isinstance(placement, Placement) and placement.line().startswith("npu:0 runs 3/3 nodes")
    from dataclasses import replace

    emulated = replace(placement, emulation="emulated: OpenVINO on the host CPU")
    assert emulated.line().startswith("npu:0 (emulated: OpenVINO on the host CPU) runs 3/3 nodes")


@EMULATED_NPU
def test_an_emulated_device_s_placement_and_bench_title_say_so() -> None:
    compiled = nx.compile(_graph_with_constants(), device="npu")
    compiled(np.ones((2, 6), np.float32))
    assert compiled.placement.line().startswith("npu:0 (emulated: OpenVINO on the host CPU) runs 3/3 nodes"), compiled.placement.line()
    cpu = nx.compile(_graph_with_constants(), device="cpu", runtime="numpy")
    cpu(np.ones((2, 6), np.float32))
    assert cpu.placement.line().startswith("cpu:0 runs 3/3 nodes")  # a real device says nothing more
    from neurenix_core.cli import bench

    assert "npu (OpenVINO on the host CPU)" in bench._emulated()
    pytest.importorskip("matplotlib")
    fig = bench.figure([], title="neurenix vs native", emulated=bench._emulated())
    title = fig._suptitle.get_text()
    assert "emulated devices (their runtimes on the host CPU, not the accelerators): " in title and "npu (OpenVINO on the host CPU)" in title


def test_doctor_retry_takes_the_alias(tmp_path) -> None:
    """``neurenix doctor --retry onnxruntime`` lifts the quarantine of plugin ort."""
    import os
    import shutil
    import subprocess
    import sys

    from neurenix_core.plugins.journal import Entry, _update, read_quarantine

    _update(str(tmp_path), lambda entries: entries.update(ort=Entry("ort", "neurenix-onnxruntime", "0.1.0", "probe", "2026-01-01T00:00:00")))
    assert set(read_quarantine(str(tmp_path))) == {"ort"}
    script = shutil.which("neurenix", path=os.path.dirname(sys.executable)) or "neurenix"
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")} | {"NEURENIX_STATE_DIR": str(tmp_path)}
    proc = subprocess.run([script, "doctor", "--retry", "onnxruntime", "--json"], capture_output=True, text=True, env=env, timeout=300, check=False)
    assert "retrying ort (neurenix-onnxruntime 0.1.0)" in proc.stderr, proc.stderr
    assert read_quarantine(str(tmp_path)) == {}


@EMULATED_NPU
def test_the_conformance_kit_takes_the_alias() -> None:
    """``pytest --neurenix-backend npu-openvino`` runs the kit on plugin npu (reported as npu)."""
    from neurenix_core.testing.plugin import devices_under_test

    (dut,) = devices_under_test(["npu-openvino"])
    assert (dut.backend, dut.device) == ("npu", "npu:0")
    with pytest.raises(pytest.UsageError, match=r"installed: .*npu \(alias npu-openvino\)"):
        devices_under_test(["npu_openvino"])


def test_cache_clear_takes_the_alias_and_clears_entries_of_either_name(tmp_path) -> None:
    """Entries written by an older release name the plugin by its alias; ``--plugin`` takes either."""
    import json
    import os
    import subprocess
    import sys

    from neurenix_core.graph.compile import cache as cc

    state = str(tmp_path / "state")
    for plugin, key in (("npu", "k1"), ("npu-openvino", "k2"), ("tpu", "k3")):
        cc.cached(plugin, key, build=lambda: b"x" * 10, dump=bytes, load=bytes, meta={}, state_dir=state)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")} | {"NEURENIX_STATE_DIR": state}

    def cli(*args: str) -> str:
        return subprocess.run([sys.executable, "-m", "neurenix_core.cli.main", "cache", *args], capture_output=True, text=True,
                              env=env, timeout=120, check=True).stdout

    assert "neurenix: 2 npu entries removed" in cli("clear", "--plugin", "npu-openvino")
    assert [e["plugin"] for e in json.loads(cli("list", "--json"))] == ["tpu"]


@pytest.mark.parametrize(("text", "meant", "plugin"), [("npu-openvino", "npu:0", "npu"), ("cuda-tc", "cuda:0", "cuda"), ("onnxruntime:0", "ort:0", "ort")])
def test_a_device_written_as_a_plugin_s_alias_names_the_device(text: str, meant: str, plugin: str) -> None:
    from neurenix_core.plugins.state import registry

    if registry().record_named(plugin) is None:
        pytest.skip(f"plugin {plugin} is not installed")
    with pytest.raises(nx.NeurenixError, match=rf"Did you mean '{meant}'\? '{text.split(':')[0]}' names plugin {plugin}, not a device type"):
        nx.zeros(2, device=text)


def test_an_alias_is_never_a_reserved_name_of_another_distribution() -> None:
    """A package calling itself neurenix-cuda-tc (an impostor: the real one's entry point is cuda)
    does not answer to cuda-tc; a vendor's neurenix-acme answers to acme."""
    from neurenix_core.plugins.entrypoints import EntryPoint
    from neurenix_core.plugins.registry import ENTRY_POINT_GROUP, Registry

    reg = Registry(_config(autoload=False))  # nothing imported: the aliases are known before that
    reg.discover([EntryPoint("evil", "nx_no_such_module", ENTRY_POINT_GROUP, "neurenix-cuda-tc", "9.9"),
                  EntryPoint("acme-x", "nx_no_such_module_2", ENTRY_POINT_GROUP, "neurenix-acme", "1.0")])
    assert {r.name: r.alias for r in reg.records if not r.builtin} == {"evil": None, "acme-x": "acme"}
    assert reg.record_named("acme").name == "acme-x" and reg.record_named("cuda-tc") is None
