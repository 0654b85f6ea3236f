"""examples/cpu_runtimes.py runs: the automatic choice and every installed runtime by name agree with float64, and
OpenVINO's runtime runs three batch sizes on one compiled model."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_cpu_runtimes_example_runs(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "NEURENIX_STATE_DIR": str(tmp_path), "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "cpu_runtimes.py")], capture_output=True, text=True,
                          env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "auto: input (8, 3, 32, 32): " in out and "; runtime " in out, out
    errors = [float(e) for e in re.findall(r"max relative error(?: vs float64:)? ([0-9.e+-]+)", out)]
    named = re.findall(r"runtime='(\w+)'", out)
    assert "numpy" in named and len(errors) == len(named) + 1 and max(errors) < 1e-5, out
    assert "small model: input (1, 16): " in out and "; runtime " in out, out
    small = re.search(r"on the interpreter; max abs error vs float64 ([0-9.e+-]+)", out)
    assert small is not None and float(small.group(1)) < 1e-5, out
    if "openvino (" in out.splitlines()[0]:  # the npu plugin is installed: three batch sizes, one compiled model
        batches = [float(e) for e in re.findall(r"openvino batch \d+: max abs error vs float64 ([0-9.e+-]+)", out)]
        assert len(batches) == 3 and max(batches) < 1e-5, out
        assert "openvino shapes: runs on the compiled model of 3 input shapes with the same lowering (input[0] dynamic)" in out, out
