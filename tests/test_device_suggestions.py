"""Device strings as users write them (issue #38): "did you mean" for ``npu0``, ``gpu``, ``cuda0``,
``Edge-TPU``, naming the installed plugin that serves the suggestion (or why it cannot); an index
out of range says how many devices exist. Only real equivalents are suggested."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

import pytest

import neurenix_core as nx
from neurenix_core.device import suggest_device

PRESENT = {str(d).split(":")[0]: sum(1 for e in nx.devices() if e.type == d.type) for d in nx.devices()}
EMULATED = pytest.mark.skipif(not {"npu", "cuda", "tpu", "edgetpu"} <= set(PRESENT),
                              reason="needs NEURENIX_EMULATE=cuda,tpu,npu,edgetpu (scripts/test.sh sets it)")


# --------------------------------------------------------------------------- the suggestion itself
@pytest.mark.parametrize(("text", "meant"), [
    ("npu0", "npu:0"), ("NPU0", "npu:0"), ("npu-0", "npu:0"), ("npu_0", "npu:0"), ("cuda0", "cuda:0"), ("CUDA:1", "cuda:1"),
    ("gpu", "cuda:0"), ("gpu:1", "cuda:1"), ("vpu", "npu:0"), ("coral", "edgetpu:0"), ("Edge-TPU", "edgetpu:0"), ("edge_tpu", "edgetpu:0"),
    ("nup:1", "npu:1"), ("cdua", "cuda:0"), ("edgtpu", "edgetpu:0"), ("tpuu", "tpu:0"), ("cpu:", "cpu:0"),
    ("gpu:7", "cuda:0"),  # beyond the devices there: the first one
])
def test_suggest_device(text: str, meant: str) -> None:
    assert suggest_device(text, {"cpu": 1, "cuda": 2, "npu": 2, "tpu": 4, "edgetpu": 1}) == meant


@pytest.mark.parametrize("text", ["xpu", "mps", "npu:x", "12", "", "quantum"])
def test_nothing_is_suggested_where_nothing_is_meant(text: str) -> None:
    """``xpu`` is one letter from ``tpu`` and ``cpu``, and neither: a three-letter type is never
    suggested for another by replacing a letter."""
    assert suggest_device(text, {"cpu": 1, "cuda": 1, "npu": 1, "tpu": 4}) is None


def test_an_alias_is_suggested_only_where_its_target_is_served() -> None:
    assert suggest_device("gpu", {"cpu": 1, "npu": 1}) is None
    assert suggest_device("npu0", {"cpu": 1}, fuzzy=False) is None and suggest_device("nup", {"npu": 1}, fuzzy=False) is None


# --------------------------------------------------------------------------- the errors
@EMULATED
@pytest.mark.parametrize(("text", "meant", "plugin"), [
    ("npu0", "npu:0", "npu"), ("gpu", "cuda:0", "cuda"), ("cuda0", "cuda:0", "cuda"), ("nup", "npu:0", "npu"),
])
def test_an_unserved_type_suggests_the_device_and_its_plugin(text: str, meant: str, plugin: str) -> None:
    """Before: "no installed backend serves npu0 devices ... Remedy: install the neurenix plugin that
    serves it", while the plugin serving npu:0 was installed and running."""
    with pytest.raises(nx.DeviceNotFoundError, match=rf"no installed backend serves {text} devices.* Did you mean '{meant}' \(plugin {plugin}\)\?") as info:
        nx.zeros(2, device=text)
    assert "install the neurenix plugin that serves it" not in str(info.value)


@EMULATED
@pytest.mark.parametrize(("text", "meant"), [("Edge-TPU", "edgetpu:0"), ("npu-0", "npu:0"), ("cpu:", "cpu:0")])
def test_a_malformed_device_string_suggests_the_device(text: str, meant: str) -> None:
    with pytest.raises(nx.InvalidDeviceError, match=rf"Did you mean '{meant}' \(plugin \w[\w-]*\)\?"):
        nx.Device(text)


def test_upper_case_is_the_same_device() -> None:
    assert nx.Device("CPU:0") == nx.Device("cpu:0") and nx.zeros(1, device="CPU:0").device == nx.Device("cpu:0")


@EMULATED
def test_an_index_out_of_range_says_how_many_exist() -> None:
    count = PRESENT["tpu"]
    with pytest.raises(nx.DeviceNotFoundError, match=rf"tpu:9 does not exist: plugin tpu found {count} tpu device\(s\) .*use an index below {count}"):
        nx.zeros(2, device="tpu:9")


def test_no_suggestion_for_a_type_nothing_resembles() -> None:
    with pytest.raises(nx.DeviceNotFoundError) as info:
        nx.zeros(2, device="xpu")
    assert "Did you mean" not in str(info.value) and "install the neurenix plugin that serves it" in str(info.value)


def test_a_plugin_installed_but_without_its_device_says_why(run_neurenix: Callable[..., Any]) -> None:
    """No NEURENIX_EMULATE: the npu plugin is installed and finds no NPU; the suggestion says so."""
    if importlib.util.find_spec("neurenix_npu_openvino") is None:
        pytest.skip("the npu plugin (neurenix-npu-openvino) is not installed")
    out = run_neurenix("""
        import json, neurenix_core as nx
        try:
            nx.zeros(2, device="npu0")
        except nx.DeviceNotFoundError as e:
            print(json.dumps(str(e)))
    """)
    assert "Did you mean 'npu:0'? It is not available: plugin npu found no device" in out and "NEURENIX_EMULATE=npu" in out


def test_a_first_party_device_without_its_plugin_names_the_package(run_neurenix: Callable[..., Any]) -> None:
    out = run_neurenix("""
        import json, neurenix_core as nx
        try:
            nx.zeros(2, device="gpu")
        except nx.DeviceNotFoundError as e:
            print(json.dumps(str(e)))
    """, env={"NEURENIX_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert "Did you mean 'cuda:0'? No installed plugin serves it: pip install neurenix-cuda-tc." in out
