"""The main job's example runs as written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_quickstart_runs_on_the_default_device():
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "quickstart.py")], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    # One line names the devices, the default among them (`neurenix doctor` says "default device").
    assert "devices: cpu:0 (default" in proc.stdout and "default device" not in proc.stdout
    err = float(proc.stdout.split("max |error| vs float64 = ")[1].split()[0])
    assert err < 1e-3
    model_err = float(proc.stdout.split("max relative error vs float64 = ")[1].split()[0])
    assert model_err < 1e-5
    # The summary names the runtime that ran the model on cpu:0 and why (graph.host_select).
    assert " runtime " in proc.stdout.split("max relative error vs float64")[1]
    # The placement in plain words (issue #29), not the compiled-shapes key, then what to do next.
    assert "cpu:0 runs 5/5 nodes (100.0% of FLOPs), with " in proc.stdout and "((64, 64),)" not in proc.stdout
    steps = proc.stdout.split("next steps:")[1]
    assert "neurenix doctor" in steps and "docs/" in steps
    from importlib import metadata

    for ep in metadata.entry_points(group="neurenix.backends"):  # an example per installed plugin
        assert ep.name == "cpu" or (ep.dist is not None and f"# {ep.dist.metadata['Name']}" in steps), (ep.name, steps)
