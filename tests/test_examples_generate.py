"""examples/generate.py: greedy, sampled, streamed and batched generation of a tiny GPT-2 on the
emulated npu (fixed-capacity cache) and of a tiny Llama on cpu:0 (the cache in OpenVINO's state;
tests/test_generation.py and test_generation_state.py cover the rest)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> str:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")} | {"NEURENIX_EMULATE": "npu", "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "generate.py"), *args, "--tokens", "16"],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_example_generates_on_cpu_with_the_cache_in_openvino_state() -> None:
    pytest.importorskip("neurenix_npu_openvino")
    out = _run("--device", "cpu:0", "--model", "llama")
    assert "same as transformers' generate: True" in out, out
    assert "compilations: 1 (state cache on cpu:0)" in out and "2 attention layer(s) on OpenVINO's PagedAttention" in out, out


def test_example_generates() -> None:
    out = _run("--device", "npu:0")
    assert "same as transformers' generate: True" in out, out
    greedy = re.search(r"^greedy: +(\[.*\])$", out, re.MULTILINE)
    streamed = re.search(r"^streamed: (.*)$", out, re.MULTILINE)
    assert greedy and streamed, out
    assert [int(t) for t in streamed.group(1).split()] == json.loads(greedy.group(1))
    compilations = int(re.search(r"^compilations: (\d+)", out, re.MULTILINE).group(1))  # type: ignore[union-attr]
    # batch 1: the prompt's bucket (8) and the decode step (capacity 32) for greedy, sampled and
    # streamed alike; batch 2: its prompt bucket and decode step (capacity 16)
    assert "fixed cache" in out and compilations == 4, out


def test_example_generates_from_a_saved_folder_and_loads_it_in_another_process(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("neurenix_npu_openvino")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")} | {"NEURENIX_STATE_DIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "generate_from_folder.py")], capture_output=True, text=True,
                          env=env, timeout=300, check=False)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "cache='state'" in out and "same as transformers' generate: True" in out, out
    assert "torch imported: False" in out and "loaded from the stored step model" in out, out
    assert "second process gave the first one's tokens: True" in out, out
