"""The ``neurenix`` command as a newcomer meets it (issue #43): ``doctor`` fails where the device
``NEURENIX_DEVICE`` asks for is unavailable, and ``bench`` explains its options."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from neurenix_core.cli.main import main


def _doctor(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")} | {"JAX_PLATFORMS": "cpu"}
    return subprocess.run([sys.executable, "-m", "neurenix_core.cli.main", "doctor", "--json"], capture_output=True, text=True,
                          env=base | env, timeout=300, check=False)


def test_doctor_exits_1_when_the_device_asked_for_is_unavailable() -> None:
    # No machine running the tests has an Edge TPU attached; emulation is off in this child.
    proc = _doctor({"NEURENIX_DEVICE": "edgetpu:0"})
    data = json.loads(proc.stdout)
    if data["default_device"] is not None:
        pytest.skip("an Edge TPU is attached to this machine")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "edgetpu:0" in data["default_device_error"]
    assert _doctor({}).returncode == 0  # cpu:0 (or the best device) is always there


def test_bench_options_have_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    out = capsys.readouterr().out
    # argparse wraps the help text: compare without the line breaks.
    flat = " ".join(out.split())
    assert "--threads THREADS [THREADS ...] thread counts" in flat and "--batches BATCHES [BATCHES ...] batch sizes" in flat, out


def test_doctor_names_the_first_party_device_types_no_plugin_serves() -> None:
    """The main job installs neurenix-cuda-tc only where an NVIDIA driver is: the doctor says that
    cuda devices exist and how to get them, instead of leaving the row out silently."""
    from types import SimpleNamespace

    from neurenix_core.plugins.registry import FIRST_PARTY_HINTS
    from neurenix_core.plugins.report import _not_installed

    def record(*types: str) -> SimpleNamespace:
        return SimpleNamespace(name=types[0], manifest=SimpleNamespace(device_types=types))

    denied = SimpleNamespace(name="edgetpu", manifest=None)  # installed, its manifest never read
    reg = SimpleNamespace(records=[record("cpu"), record("npu"), record("tpu"), denied])
    assert _not_installed(reg) == [{"device_type": "cuda", "install": FIRST_PARTY_HINTS["cuda"]}]
    assert json.loads(_doctor({"NEURENIX_BACKENDS": "-cuda"}).stdout)["not_installed"] == []
    data = json.loads(_doctor({}).stdout)  # this checkout's test install: every first-party plugin is there
    served = {t for b in data["backends"] for t in b["device_types"]}
    assert served >= set(FIRST_PARTY_HINTS) and data["not_installed"] == []
