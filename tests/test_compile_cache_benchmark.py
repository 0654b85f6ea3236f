"""benchmarks/compile_cache.py --quick on one device and model: the cold process stores, the warm
one hits, both give the same result, and the table is printed (no timing is asserted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_compile_cache_benchmark_quick(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEURENIX_", "JAX_", "XLA_"))}
    out = tmp_path / "rows.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "compile_cache.py"), "--quick", "--devices", "npu", "--models", "cnn",
                           "--json", str(out)], capture_output=True, text=True, env=env, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [row] = json.loads(out.read_text())["rows"]
    assert row["device"] == "npu:0" and row["same_result"] and row["warm_identical"]
    cold, warm = row["summaries"]
    assert "compile cache: miss" in cold and "compile cache: hit" in warm
    assert "| cnn | npu:0 |" in proc.stdout
