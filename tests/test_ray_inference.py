"""examples/ray_batch_inference.py on a local Ray cluster (ray.init(num_cpus=2)): two actors each
run a compiled model, report where they ran, and the rows match the single-process model; the
cluster is gone afterwards."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ray_batch_inference_matches_one_process_and_reports_placements() -> None:
    pytest.importorskip("ray", reason="ray is in the test extra (pip install -c constraints.txt 'neurenix-core[ray]')")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEURENIX_", "RAY_"))}
    env.update(NEURENIX_EMULATE="cuda,tpu", JAX_PLATFORMS="cpu", OMP_NUM_THREADS="1")
    cmd = [sys.executable, str(ROOT / "examples" / "ray_batch_inference.py"), "--rows", "256", "--batch-size", "32",
           "--actors", "2", "--num-cpus", "2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=400, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    actors = re.findall(r"actor pid (\d+) on node (.+): (\S+), (\d+) rows", proc.stdout)
    assert len(actors) == 2, proc.stdout
    assert {device for _, _, device, _ in actors} == {"cpu:0"}  # the best device of this node (emulated ones are never chosen)
    assert sum(int(n) for *_, n in actors) == 256
    found = re.search(r"256 rows, 2 actor\(s\); max \|ray - single process\| = (\S+)", proc.stdout)
    assert found and float(found.group(1)) <= 1e-5, proc.stdout
    # ray.shutdown() ended the local cluster: none of its processes outlive the script.
    session = re.search(r"/tmp/ray/(session_[0-9_\-]+)", out)
    if session:
        left = subprocess.run(["pgrep", "-f", session.group(1)], capture_output=True, text=True, check=False)
        assert left.stdout.strip() == "", f"processes of {session.group(1)} still running: {left.stdout}"
