"""The example and the benchmark's quick mode run end to end (emulated edgetpu)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["NEURENIX_EMULATE"] = "edgetpu"
    return env


def test_example_edgetpu_int8(tmp_path):
    out = tmp_path / "model.tflite"
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "edgetpu_int8.py"), "--out", str(out)],
                          env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "same top-1: True" in proc.stdout and "emulated" in proc.stdout
    assert out.read_bytes()[4:8] == b"TFL3"
    assert "eager matmul on edgetpu:0 -> [[11.0]]" in proc.stdout


def test_benchmark_quick(tmp_path):
    report = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "edgetpu.py"), "--quick", "--json", str(report)],
                          env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    import json

    rows = json.loads(report.read_text())
    assert {(r["model"], r["precision"], r["threads"]) for r in rows if "overhead_ratio" in r} >= {("mlp 16-32-10", "int8", 1), ("cnn 3x16x16", "fp32", 2)}
    assert all(r["overhead_ratio"] > 0 for r in rows if "overhead_ratio" in r)
