"""examples/compile_cache.py runs: each emulated compiling device hits the cache in the second
process with identical results, and neurenix cache lists the three entries."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_compile_cache_example_runs() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEURENIX_", "JAX_", "XLA_"))}
    env.update(NEURENIX_EMULATE="npu,tpu,edgetpu", JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "compile_cache.py")], capture_output=True, text=True, env=env,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    for device in ("npu:0", "tpu:0", "edgetpu:0"):
        assert f"{device} first process : compile + first call" in out and "compile cache: miss" in out, out
        assert f"{device} second process" in out and f"{device}: identical results in both processes" in out, out
    assert out.count("compile cache: hit") == 3 and "entries: 3" in out, out
    assert {"plugin npu", "plugin tpu", "plugin edgetpu"} <= {line.split(", ")[0].split(": ")[1] for line in out.splitlines()
                                                                      if line.startswith("entry ")}, out
