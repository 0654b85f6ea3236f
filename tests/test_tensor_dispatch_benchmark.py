"""benchmarks/dispatch.py --quick runs and reports every row (no timing is asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Every form of the benchmark, by kind of dispatch: issue #31 asks for "every" namespace function
# and operator, so each kind has rows (the benchmark also checks each row's result against NumPy).
FORMS = {
    "unary": ["exp", "abs", "negative", "sqrt"],
    "binary": ["add", "multiply", "subtract", "divide", "maximum", "less"],
    "operator": ["a + b", "a - b", "a * b", "a / b", "a * 2.0", "a @ b", "-a", "a < b", "x[0]", "x[:, 1]", "x.T"],
    "reduction": ["sum(axis=0)", "sum()", "mean(axis=0)", "max(axis=0)"],
    "shape": ["reshape", "permute_dims"],
    "matmul": ["matmul"],
    "where": ["where"],
    "astype": ["astype"],
}
LARGE = ["add", "a + b", "matmul", "a @ b"]  # also timed on 64x64


def test_dispatch_benchmark_quick(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "dispatch.py"), "--quick", "--json", str(out)],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())
    want = {(kind, op, "4x4") for kind, ops in FORMS.items() for op in ops}
    want |= {(kind, op, "64x64") for kind, ops in FORMS.items() for op in ops if op in LARGE}
    assert {(r["kind"], r["op"], r["size"], r["threads"]) for r in rows} == {(*w, t) for w in want for t in (1, 2)}
    for r in rows:
        assert r["numpy_us"] > 0 and r["nx_us"] > 0 and r["torch_us"] > 0
        assert abs(r["nx_ratio"] - r["nx_us"] / r["numpy_us"]) < 1e-9
        assert abs(r["nx_added_us"] - (r["nx_us"] - r["numpy_us"])) < 1e-9
        assert r["goal_met"] == (r["nx_added_us"] <= 0.5)
    assert "nx/np" in proc.stdout and "torch/np" in proc.stdout and "goal (<= 0.5 µs added over NumPy)" in proc.stdout
    assert "1-min load" in proc.stdout  # a table from a shared machine says how loaded it was
