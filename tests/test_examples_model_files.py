"""examples/model_files.py runs as written: a torch CNN saved as a .nxm file with its int8 plan,
loaded and run in a second process where torch cannot be imported, with the results from before
saving (fp32 on cpu:0 exactly, int8 on the emulated edgetpu:0 bit for bit)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]


def test_model_files_example(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")}
    env.update(NEURENIX_EMULATE="edgetpu", OMP_NUM_THREADS="1")  # 2 xdist workers share the CPUs
    cmd = [sys.executable, str(ROOT / "examples" / "model_files.py"), "--device", "edgetpu", "--out", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "cnn.nxm").is_file()
    assert "inputs=[x(None, 3, 16, 16)]" in proc.stdout, proc.stdout  # the dynamic batch axis came back
    assert "ran on cpu:0 (fp32) and edgetpu:0 (int8); torch imported: False" in proc.stdout, proc.stdout
    diff = re.search(r"fp32 on cpu:0: max \|difference\| to before saving ([0-9.e+-]+)", proc.stdout)
    assert diff and float(diff.group(1)) <= 1e-6, proc.stdout
    assert "int8 on edgetpu:0: bit-identical to before saving: True" in proc.stdout, proc.stdout
