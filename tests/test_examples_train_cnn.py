"""examples/train_cnn.py trains the stripes CNN to >= 95% held-out accuracy on cpu, tpu and cuda
(emulated), writes its loss curve, and (on cuda) does the same under fp16 and bf16 autocast."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("device", "precision"), [
    ("cpu:0", "fp32"), ("tpu:0", "fp32"), ("cuda:0", "fp32"), ("cuda:0", "fp16"), ("cuda:0", "bf16"),
])
def test_train_cnn_reaches_95_percent(device: str, precision: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")}
    env.update(NEURENIX_EMULATE="cuda,tpu", JAX_PLATFORMS="cpu", OMP_NUM_THREADS="1")  # 2 xdist workers share the CPUs
    plot = tmp_path / "loss.png"
    cmd = [sys.executable, str(ROOT / "examples" / "train_cnn.py"), "--device", device, "--precision", precision,
           "--epochs", "2", "--quiet", "--plot", str(plot)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = re.search(r"held-out accuracy ([0-9.]+)", proc.stdout)
    assert found, proc.stdout
    assert float(found.group(1)) >= 0.95, proc.stdout
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 5000
