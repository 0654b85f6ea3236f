"""examples/interpreter_threads.py runs: the interpreter at 1 and 2 threads, each count read back
in its summary, both within float32 rounding of the float64 reference and of each other."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_interpreter_threads_example_runs(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "NEURENIX_STATE_DIR": str(tmp_path), "NEURENIX_DISABLE_PLUGIN_AUTOLOAD": "1"}
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "interpreter_threads.py")], capture_output=True, text=True,
                          env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "nodes, 1 thread;" in out and "nodes, 2 threads;" in out, out
    errors = [float(e) for e in re.findall(r"max relative error vs float64 ([0-9.e+-]+)", out)]
    apart = re.search(r"threads=2 vs threads=1: max relative difference ([0-9.e+-]+)", out)
    assert len(errors) == 2 and max(errors) < 1e-5 and apart is not None and float(apart.group(1)) < 1e-5, out
