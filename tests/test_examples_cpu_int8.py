"""examples/cpu_int8.py: a CNN int8 on cpu:0 on a host runtime's integer kernels, the reference beside it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_cpu_int8_example_names_runtimes_and_agrees_with_fp32(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")} | {
        "JAX_PLATFORMS": "cpu", "NEURENIX_STATE_DIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "cpu_int8.py"), "--threads", "1"],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = dict(re.findall(r"^(fp32|int8|int8, runtime='numpy')\s+runtime \S+ .* top-1 agreement ([01]\.\d\d)$", proc.stdout, re.MULTILINE))
    assert set(rows) == {"fp32", "int8", "int8, runtime='numpy'"}, proc.stdout
    runtimes = dict(re.findall(r"^(fp32|int8|int8, runtime='numpy')\s+runtime (\S+)", proc.stdout, re.MULTILINE))
    assert runtimes["int8, runtime='numpy'"] == "numpy", proc.stdout
    assert all(float(v) >= 0.9 for v in rows.values()), proc.stdout  # 64 inputs; int8 keeps the fp32 decision
    # The summary says which int8 path ran: a host runtime's kernels with the core's plan, or the reference.
    assert "int8 with the core's plan" in proc.stdout or "NumPy integer kernels" in proc.stdout, proc.stdout
    assert "verified on 2 calibration batches" in proc.stdout, proc.stdout
