"""The kit as vendors use it: the pytest command line, the JSON report, run_conformance()."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from neurenix_core.errors import BackendUnavailableError
from neurenix_core.testing import pytest_command, run_conformance

_ENV = {"NEURENIX_DISABLE_PLUGIN_AUTOLOAD": "1"}


def test_run_conformance_reports_per_capability(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    row = run_conformance(
        "cpu", report_path=report, env=_ENV,
        extra_args=["-k", "test_unary or test_matmul or test_unsupported_dtype or test_reduction"],
    )
    assert row["returncode"] == 0, row["output_tail"]
    assert row["device"] == "cpu:0" and row["emulated"] is False
    caps = row["capabilities"]
    assert set(caps) == {"elementwise", "linalg", "errors", "statistics", "properties"}
    assert caps["elementwise"]["passed"] == 29 * 3 and caps["elementwise"]["failed"] == 0
    # The CPU backend supports every dtype: that test is skipped, and the report says why.
    assert caps["errors"]["skipped"] == 1
    assert list(caps["errors"]["skip_reasons"]) == ["cpu:0 supports every neurenix dtype"]
    assert row["conformant"] is True
    assert json.loads(report.read_text())["backends"]["cpu"]["totals"] == row["totals"]


def test_unknown_backend_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(BackendUnavailableError, match="no installed backend has that name"):
        run_conformance("no-such-backend", env=_ENV)


def test_declared_known_failures_are_strict_xfails(tmp_path: Path) -> None:
    """A backend's conformance_xfail entry turns a failing test into a reported xfail."""
    site = tmp_path / "site"
    site.mkdir()
    from distributions import write_distribution

    write_distribution(site, name="broken", module="nx_broken_plugin", source='''
from neurenix_core import hookimpl, Manifest, Capabilities, PriorityBand, ProbeResult
from neurenix_core.backends.cpu import CPUBackend
from neurenix_core.device import DeviceType
from neurenix_core.plugins.memory import MemoryTracker
import numpy as np

class BrokenBackend(CPUBackend):
    def __init__(self):
        super().__init__()
        self.device_type = DeviceType("broken")
        self.memory = MemoryTracker("broken", 1)
        self.ops["sin"] = lambda x: np.cos(x)  # a wrong kernel the kit must catch
        del self.ops["cos"]  # not native: runs through the fallback policy, and the report counts it

@hookimpl
def neurenix_manifest():
    return Manifest(name="broken", distribution="neurenix-broken", version="0.1", api=">=1.0,<2",
                    device_types=("broken",), band=PriorityBand.CPU, priority=1,
                    capabilities=Capabilities(dtypes=("float32",), extra={"conformance_xfail": {"test_unary[sin-float32]": "known wrong sin"}}))

@hookimpl
def neurenix_probe(context):
    return ProbeResult.found(1)

@hookimpl
def neurenix_backend(manifest, probe):
    return BrokenBackend()
''')
    report = tmp_path / "r.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    env.pop("NEURENIX_DISABLE_PLUGIN_AUTOLOAD", None)
    env["NEURENIX_BACKENDS"] = "broken,cpu"
    cmd = pytest_command("broken", report, ["-k", "test_unary and (sin or cos)"])
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600, check=False)
    data = json.loads(report.read_text())["backends"]["broken"]
    row = data["capabilities"]["elementwise"]
    assert row["xfailed"] == 1, proc.stdout[-3000:]
    # sin, asin, asinh, sinh, cos, acos, acosh, cosh match -k: all pass but the declared sin
    assert row["failed"] == 0 and row["passed"] == 7
    assert row["skipped"] == 16  # float16/bfloat16 not declared: reported with the reason
    assert all("does not declare dtype" in r for r in row["skip_reasons"])
    assert data["fallbacks"] == {"cos": 1}
    assert proc.returncode == 0
    assert sys.executable == cmd[0]


def test_report_under_xdist(tmp_path: Path) -> None:
    pytest.importorskip("xdist")
    row = run_conformance("cpu", env=_ENV, extra_args=["-n", "2", "-k", "test_reduction"])
    assert row["returncode"] == 0, row["output_tail"]
    assert row["totals"] == {"passed": 5 * 5 * 3 + 1, "failed": 0, "skipped": 0, "xfailed": 0}
    assert set(row["capabilities"]) == {"statistics", "properties"}
