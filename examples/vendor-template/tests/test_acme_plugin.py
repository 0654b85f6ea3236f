"""The template's own tests: a vendor keeps these passing after renaming."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import neurenix_core as nx

PKG = Path(__file__).resolve().parents[1]


def _env(**extra: str) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")}, **extra}


@pytest.fixture
def acme() -> nx.Device:
    if "acme" not in os.environ.get("NEURENIX_EMULATE", ""):
        pytest.skip("the ACME device is emulated only with NEURENIX_EMULATE=acme (no ACME hardware exists)")
    return nx.Device("acme:0")


def test_emulated_device_says_so(acme: nx.Device) -> None:
    assert acme.emulated and nx.backend(acme).device_info(0)["emulated"] is True
    assert nx.default_device() != acme, "an emulated device is never auto-selected"


def test_tensors_and_memory_accounting(acme: nx.Device) -> None:
    before = nx.memory_stats(acme).in_use
    x = nx.ones((16, 16), device=acme)
    assert (x @ x).numpy()[0, 0] == 16.0 and nx.memory_stats(acme).in_use >= before + x.nbytes


def test_without_emulation_the_device_is_missing_with_the_remedy() -> None:
    proc = subprocess.run([sys.executable, "-c", "import neurenix_core as nx; nx.zeros(3, device='acme:0')"], capture_output=True, text=True, env=_env(), timeout=120, check=False)
    assert proc.returncode != 0 and "ACME accelerator driver" in proc.stderr and "NEURENIX_EMULATE=acme" in proc.stderr


def test_conformance_kit_passes(acme: nx.Device) -> None:
    from neurenix_core.testing import run_conformance

    report = run_conformance("acme", env={"NEURENIX_EMULATE": "acme"})
    assert report["totals"]["failed"] == 0 and report["returncode"] == 0, report["output_tail"]


def test_models_example_runs() -> None:
    proc = subprocess.run([sys.executable, str(PKG / "examples" / "acme_models.py")], capture_output=True, text=True, env=_env(NEURENIX_EMULATE="acme"), timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "mlp on acme:0" in proc.stdout and "int8 top-1 agreement 100.0%" in proc.stdout
