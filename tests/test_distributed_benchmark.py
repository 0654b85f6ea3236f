"""benchmarks/distributed.py --quick launches 1 and 2 processes and reports samples/s for each
(no timing is asserted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_distributed_benchmark_quick(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "distributed.py"), "--quick", "--devices", "cpu",
                           "--steps", "2", "--global-batch", "64", "--json", str(out)],
                          capture_output=True, text=True, env=env, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads(out.read_text())
    assert [(r["device"], r["processes"], r["engine"]) for r in rows] == [
        ("cpu:0", 1, "torch.distributed (gloo)"), ("cpu:0", 2, "torch.distributed (gloo)")]
    assert all(r["samples_per_s"] > 0 and r["global_batch"] == 64 and r["threads"] == 1 for r in rows)
    assert "CPU:" in proc.stdout and "| cpu:0 | torch.distributed (gloo) (neurenix tape) | 2 x 1 | 64 |" in proc.stdout
