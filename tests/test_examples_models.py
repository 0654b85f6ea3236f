"""examples/models.py and examples/quantization.py run and check their own results."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("script, args, expect", [
    ("models.py", ["--device", "cpu:0"], "from_torch: max |neurenix - torch|"),
    ("quantization.py", ["--no-progress"], "dynamic:"),
])
def test_example_runs(script: str, args: list[str], expect: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")}
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / script), *args], capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert expect in proc.stdout
