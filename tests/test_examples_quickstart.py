"""The main job's example runs as written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_quickstart_runs_on_the_default_device():
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "quickstart.py")], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "default device: cpu:0" in proc.stdout
    err = float(proc.stdout.split("max |error| vs float64 = ")[1].split()[0])
    assert err < 1e-3
    model_err = float(proc.stdout.split("max relative error vs float64 = ")[1].split()[0])
    assert model_err < 1e-5
    # The summary names the runtime that ran the model on cpu:0 and why (graph.host_select).
    assert " runtime " in proc.stdout.split("max relative error vs float64")[1]
