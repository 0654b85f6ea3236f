"""A fresh process that compiles a small seeded CNN for one device and prints, as one JSON line,
the compiled summary, the output's SHA-256 and its values (the compile-cache tests run it twice
against one state folder and compare).

    python compile_cache_child.py DEVICE [PRECISION]
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

#: The emulated devices every plugin test runs with (scripts/test.sh's environment).
EMULATION = {"NEURENIX_EMULATE": "cuda,tpu,npu,edgetpu", "JAX_PLATFORMS": "cpu"}


def command(device: str, precision: str | None = None) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), device, precision or "-"]


def environment(state: str | Path, **extra: str) -> dict[str, str]:
    """The test process's environment without NEURENIX_*/JAX_/XLA_ settings, emulation on, the
    state folder ``state``, and ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEURENIX_", "JAX_", "XLA_"))}
    return {**env, **EMULATION, "NEURENIX_STATE_DIR": str(state), **extra}


def run(state: str | Path, device: str, precision: str | None = None, **extra: str) -> dict[str, Any]:
    """Compile and call in a fresh interpreter; its JSON result."""
    proc = subprocess.run(command(device, precision), capture_output=True, text=True, env=environment(state, **extra), timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_together(state: str | Path, device: str, count: int = 2) -> list[dict[str, Any]]:
    """``count`` fresh interpreters compiling the same model at the same time."""
    procs = [subprocess.Popen(command(device), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment(state))
             for _ in range(count)]
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=300)
        assert p.returncode == 0, stdout + stderr
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def main(argv: list[str]) -> None:
    import neurenix_core as nx
    from neurenix_core import nn

    device = argv[0]
    precision = argv[1] if len(argv) > 1 and argv[1] != "-" else None
    nn.init.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 10))
    x = np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)
    compiled = nx.compile(model, device=device, precision=precision, outputs="host")
    y = np.ascontiguousarray(compiled(x))
    print(json.dumps({"summary": compiled.summary, "sha256": hashlib.sha256(y.tobytes()).hexdigest(), "values": y.ravel().tolist()}))


if __name__ == "__main__":
    main(sys.argv[1:])
