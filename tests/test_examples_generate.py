"""examples/generate.py: greedy, sampled, streamed and batched generation of a tiny GPT-2 on the
emulated npu (fixed-capacity cache; tests/test_generation.py covers cpu:0's dynamic cache)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_example_generates() -> None:
    device = "npu:0"
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")} | {"NEURENIX_EMULATE": "npu", "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "generate.py"), "--device", device, "--tokens", "16"],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "same as transformers' generate: True" in out, out
    greedy = re.search(r"^greedy: +(\[.*\])$", out, re.MULTILINE)
    streamed = re.search(r"^streamed: (.*)$", out, re.MULTILINE)
    assert greedy and streamed, out
    assert [int(t) for t in streamed.group(1).split()] == json.loads(greedy.group(1))
    compilations = int(re.search(r"^compilations: (\d+)", out, re.MULTILINE).group(1))  # type: ignore[union-attr]
    # batch 1: the prompt's bucket (8) and the decode step (capacity 32) for greedy, sampled and
    # streamed alike; batch 2: its prompt bucket and decode step (capacity 16)
    assert "fixed cache" in out and compilations == 4, out
