"""examples/quantized_pt2e.py runs as written: a torchao PT2E model imported with its own scales
and compiled int8, agreeing with PyTorch, on cpu and on the emulated npu and edgetpu."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("onnxscript", reason="the PT2E import exports to ONNX in memory (torch.onnx.export needs onnxscript)")
pytest.importorskip("torchao", reason="PT2E quantization lives in torchao (pip install -c constraints.txt torchao)")

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("device", "per_channel"), [("cpu", False), ("npu", True), ("edgetpu", True)])
def test_quantized_pt2e_example(device: str, per_channel: bool) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")}
    env.update(NEURENIX_EMULATE="npu,edgetpu", OMP_NUM_THREADS="1")  # 2 xdist workers share the CPUs
    cmd = [sys.executable, str(ROOT / "examples" / "quantized_pt2e.py"), "--device", device] + (["--per-channel"] if per_channel else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "precision int8" in proc.stdout, proc.stdout
    assert "static pt2e" in proc.stdout, proc.stdout
    agree = re.search(r"top-1 agreement with the PT2E model in PyTorch: ([0-9.]+)", proc.stdout)
    steps = re.search(r"max \|difference\| ([0-9.]+) output quantization steps", proc.stdout)
    assert agree and steps, proc.stdout
    assert float(agree.group(1)) >= 0.99, proc.stdout
    assert float(steps.group(1)) <= 2.01, proc.stdout
