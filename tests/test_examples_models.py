"""examples/models.py, quantization.py, import_resnet.py and onnx_conformance.py run and check their own results."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("script, args, expect", [
    ("models.py", ["--device", "cpu:0"], "from_torch: max |neurenix - torch|"),
    ("quantization.py", ["--no-progress"], "calibration_method='histogram': integer error"),
    ("import_resnet.py", [], "max relative error vs torch"),
    ("onnx_conformance.py", [], "float16 softmax on cpu:0: dtype float16"),
])
def test_example_runs(script: str, args: list[str], expect: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")}
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / script), *args], capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert expect in proc.stdout


def test_import_resnet_runs_whole_on_an_emulated_npu() -> None:
    """The example on OpenVINO's plugin: every node of the imported ResNet lowers natively."""
    pytest.importorskip("openvino")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")} | {"NEURENIX_EMULATE": "npu"}
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "import_resnet.py"), "--device", "npu:0"], capture_output=True,
                          text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "device: npu:0" in proc.stdout and "npu:0 (emulated: OpenVINO on the host CPU) runs 31/31 nodes (100.0% of FLOPs)" in proc.stdout
