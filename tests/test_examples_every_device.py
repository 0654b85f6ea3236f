"""examples/models_every_device.py: one imported model on every (emulated) device, fp32 and int8."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EMULATED = "cuda,tpu,npu,edgetpu"


@pytest.mark.parametrize("args", [[], ["--model", "cnn", "--int8"]], ids=["vit-fp32", "cnn-int8"])
def test_example_runs_on_every_device(args: list[str]) -> None:
    pytest.importorskip("torch")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")} | {"NEURENIX_EMULATE": EMULATED, "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "models_every_device.py"), *args], capture_output=True, text=True,
                          env=env, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^(\w+):0 .*$", proc.stdout, re.MULTILINE)}
    assert {"cpu", "cuda", "tpu", "npu", "edgetpu"} <= set(rows), proc.stdout
    for device, row in rows.items():
        assert "100.0% of FLOPs" in row, row  # every node of both models lowers on every plugin
        if args:
            assert ("int8" in row) == (device in ("cpu", "npu", "edgetpu")), row
