"""Probe, import hygiene and the non-emulated behaviour (run in clean subprocesses)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from neurenix_npu_openvino import plugin, probe

from neurenix_core.plugins.manifest import ProbeContext


def _fake_accel(tmp_path: Path, driver: str) -> tuple[Path, Path]:
    """A sysfs/dev layout on disk: /sys/class/accel/accel0/device/driver -> .../<driver>."""
    sys_accel, dev_accel = tmp_path / "sys", tmp_path / "dev"
    (sys_accel / "accel0" / "device").mkdir(parents=True)
    (tmp_path / "drivers" / driver).mkdir(parents=True)
    os.symlink(tmp_path / "drivers" / driver, sys_accel / "accel0" / "device" / "driver")
    dev_accel.mkdir()
    (dev_accel / "accel0").touch()
    return sys_accel, dev_accel


def test_device_nodes_need_the_intel_vpu_driver(tmp_path: Path) -> None:
    sys_accel, dev_accel = _fake_accel(tmp_path, "intel_vpu")
    assert probe.npu_device_nodes(sys_accel, dev_accel) == (str(dev_accel / "accel0"),)
    other = tmp_path / "other"
    other.mkdir()
    sys2, dev2 = _fake_accel(other, "habanalabs")
    assert probe.npu_device_nodes(sys2, dev2) == ()
    assert probe.npu_device_nodes(tmp_path / "missing", dev_accel) == ()


def test_plugin_library_is_found_inside_the_openvino_wheel() -> None:
    package = probe.openvino_dir()
    assert package is not None
    lib = probe.npu_plugin_library(package)
    assert lib is not None and os.path.basename(lib) == "libopenvino_intel_npu_plugin.so"


def test_probe_on_this_machine_names_the_missing_driver() -> None:
    result = plugin.neurenix_probe(ProbeContext(emulate=False, timeout=2.0))
    assert not result.available
    assert "intel_vpu" in result.reason and "/dev/accel/accel*" in result.reason


def test_probe_emulates_when_asked() -> None:
    result = plugin.neurenix_probe(ProbeContext(emulate=True, timeout=2.0))
    assert result.available and result.emulated and result.device_count == 1


def _run(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=240, env=env)


def test_import_neurenix_core_imports_no_framework(clean_env: Callable[..., dict[str, str]]) -> None:
    code = (
        "import sys, neurenix_core as nx\n"
        "assert nx.Device('npu:0').is_available\n"
        "print([m for m in ('torch','jax','openvino','ai_edge_litert','tflite_runtime','onnxruntime','nncf') if m in sys.modules])"
    )
    done = _run(code, clean_env(NEURENIX_EMULATE="npu"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_explicit_npu_without_hardware_raises_naming_the_driver(clean_env: Callable[..., dict[str, str]]) -> None:
    code = (
        "import neurenix_core as nx\n"
        "from neurenix_npu_openvino.api import NPUBackend, is_npu_available\n"
        "assert not is_npu_available()\n"
        "for attempt in (lambda: nx.zeros(3, device='npu:0'), lambda: NPUBackend().initialize()):\n"
        "    try:\n"
        "        attempt()\n"
        "    except nx.BackendUnavailableError as exc:\n"
        "        print('ERR', exc)\n"
        "    else:\n"
        "        print('NO ERROR')\n"
    )
    done = _run(code, clean_env())
    assert done.returncode == 0, done.stderr
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith(("ERR", "NO ERROR"))]
    assert len(lines) == 2 and all(ln.startswith("ERR") for ln in lines), done.stdout
    for line in lines:
        assert "intel_vpu" in line and "NEURENIX_EMULATE=npu" in line


def test_backend_factory_refuses_a_missing_npu_device(kit: Any) -> None:
    # OpenVINO really lists no NPU here: the backend's own check (used on machines where the
    # driver node exists but OpenVINO cannot open it) must name the driver.
    import pytest
    from neurenix_npu_openvino.backend import NPUOpenVINOBackend

    from neurenix_core.errors import BackendUnavailableError

    with pytest.raises(BackendUnavailableError, match=r"no NPU.*intel_vpu.*NEURENIX_EMULATE=npu"):
        NPUOpenVINOBackend(emulated=False)
