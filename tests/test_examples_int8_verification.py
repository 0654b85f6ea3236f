"""examples/int8_verification.py runs: each int8 device verified, the broken plan refused, the layer table."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_int8_verification_example_runs() -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "int8_verification.py")], capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "cpu:0 (runtime='numpy'): device vs integer reference 0.00%" in out, out  # the reference itself
    assert re.search(r"^cpu:0: device vs integer reference \d+\.\d+% \(bound", out, re.MULTILINE), out
    assert "refused: cpu:0: the int8 plan does not describe the model" in out, out
    rows = [line.split() for line in out.splitlines() if line.split()[:1] in (["0"], ["1"], ["2"])]
    assert [r[1] for r in rows] == ["linear", "tanh", "linear"] and float(rows[0][2].rstrip("%")) > 30, out
