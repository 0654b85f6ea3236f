"""examples/deploy_compiled.py runs: the artifact loads in a fresh process without torch, gives
the same results, and a damaged artifact is refused with ArtifactFormatError."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_deploy_compiled_example_runs() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")}
    env.update(NEURENIX_EMULATE="npu", JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "deploy_compiled.py"), "--device", "npu:0"], capture_output=True,
                          text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "by plugin npu" in proc.stdout and "parts/0/model.xml" in proc.stdout and "parts/0/model.blob" in proc.stdout
    assert "torch imported: False" in proc.stdout
    assert "same results in the fresh process: True" in proc.stdout
    assert "damaged artifact refused: ArtifactFormatError" in proc.stdout
