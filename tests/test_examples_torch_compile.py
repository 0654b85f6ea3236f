"""examples/torch_compile.py: a CNN, a causal LM's generate and a training loop through
torch.compile(backend="neurenix"), on cpu:0 (trains) and the emulated npu (inference only)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("device", ["cpu:0", "npu:0"])
def test_example_runs_and_matches_eager(device: str) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")} | {"NEURENIX_EMULATE": "npu", "JAX_PLATFORMS": "cpu",
                                                                                     "NEURENIX_FALLBACK": "allow"}
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "torch_compile.py"), "--device", device],
                          capture_output=True, text=True, env=env, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    errors = [float(e) for e in re.findall(r"max \|compiled - eager\| = (\S+)", out)]
    assert len(errors) == 3 and max(errors) < 1e-4, out
    assert "graphs compiled: 2\n" in out, out  # the second batch size made the batch axis dynamic; the third reused it
    assert re.search(rf"generate on {device}: 10 new tokens, same as eager: True, graphs compiled: 2", out), out
    if device == "cpu:0":
        compiled, eager = (re.search(rf"training on {w}: losses (\[.*\])", out) for w in ("cpu:0", "PyTorch eager"))
        assert compiled and eager, out
        assert [round(v, 3) for v in json.loads(compiled.group(1))] == [round(v, 3) for v in json.loads(eager.group(1))], out
    else:
        assert "npu:0 runs inference only" in out, out
