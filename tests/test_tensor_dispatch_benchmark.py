"""benchmarks/dispatch.py --quick runs and reports every row (no timing is asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Every case of the benchmark: the binary hot path and the generic path (a unary op, a reduction).
CASES = [("add", "4x4"), ("add", "64x64"), ("matmul", "4x4"), ("matmul", "64x64"), ("exp", "4x4"), ("sum", "4x4")]


def test_dispatch_benchmark_quick(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "dispatch.py"), "--quick", "--json", str(out)],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())
    assert {(r["op"], r["size"], r["threads"]) for r in rows} == {
        (op, size, t) for op, size in CASES for t in (1, 2)
    }
    for r in rows:
        assert r["numpy_us"] > 0 and r["nx_us"] > 0 and r["torch_us"] > 0
        assert abs(r["nx_ratio"] - r["nx_us"] / r["numpy_us"]) < 1e-9
    assert "nx/np" in proc.stdout and "torch/np" in proc.stdout
