"""examples/shape_buckets.py runs and prints the bucket shapes it compiled, and the refusal."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_shape_buckets_example_runs() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")}
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "shape_buckets.py"), "--device", "cpu:0"], capture_output=True,
                          text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "compiled_shapes = [((1, 16),), ((4, 16),), ((8, 16),), ((16, 16),), ((32, 16),)]" in proc.stdout
    assert "compiled_shapes = [((2, 8, 8), (2, 8)), ((2, 16, 8), (2, 16))]" in proc.stdout
    assert "refused: cpu:0: buckets" in proc.stdout and "node 'average' (op reduce_mean)" in proc.stdout
