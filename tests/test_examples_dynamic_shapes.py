"""examples/dynamic_shapes.py runs and checks its own results (a batch-1-imported BERT at batch 3)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_dynamic_shapes_example_runs_a_batch_1_import_at_batch_3() -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")}
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "dynamic_shapes.py")], capture_output=True, text=True, env=env,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "input input_ids: example shape (1, 16), dynamic axes (0, 1), shape (None, None)" in proc.stdout
    assert "batch 3, length 8: last_hidden_state shape (3, 8, 32)" in proc.stdout
    assert "batch 2, length 11: pooler_output shape (2, 32)" in proc.stdout
