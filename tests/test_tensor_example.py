"""examples/tensors.py runs as written, on every available device, with correct results."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_tensors_example_runs_on_every_device() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "tensors.py")], capture_output=True, text=True, timeout=600, check=False, env=dict(os.environ)
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert any(row["device"] == "cpu:0" for row in summary)
    for row in summary:
        assert row["result_device"] == row["device"], "results stay on the device the data was put on"
        assert row["error"] < 1e-3, row
        assert row["refused"], f"{row['device']}: an allocation over the limit must raise OutOfMemoryError"
    assert "refused as expected" in proc.stdout
