"""benchmarks/training.py --quick runs and reports every row (no timing is asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_training_benchmark_quick(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "training.py"), "--quick", "--threads", "1", "--json", str(out)],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())
    assert [(r["device"], r["engine"]) for r in rows] == [
        ("tpu:0", "jax.value_and_grad + jax.jit"), ("cuda:0", "torch.autograd"), ("cpu:0", "neurenix tape"),
    ]
    for r in rows:
        assert r["nx_steps_per_s"] > 0 and r["native_steps_per_s"] > 0
        assert abs(r["time_ratio"] - r["native_steps_per_s"] / r["nx_steps_per_s"]) < 1e-9
    assert "CPU:" in proc.stdout and "nx/native time" in proc.stdout
