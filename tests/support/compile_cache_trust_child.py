"""A fresh process that compiles several small CNNs of one architecture, each from its own seed,
for one device, and prints one JSON line: per seed the compiled summary, the output's SHA-256 and
its values (tests/test_compile_cache_trust.py tampers with the entries between two runs).

    python compile_cache_trust_child.py DEVICE SEED [SEED ...]

Models of one architecture differ only in their weights: their entries are interchangeable
bytes, so an entry of one loaded for another runs without error and gives wrong numbers. That
is what the trust tests must catch.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from compile_cache_child import environment

__all__ = ["run"]


def run(state: str | Path, device: str, seeds: list[int], *, extra: Mapping[str, str] | None = None,
        timeout: float = 240.0) -> dict[int, dict[str, Any]]:
    """Compile and call the models of ``seeds`` in a fresh interpreter with ``extra`` in its
    environment; its results by seed. ``timeout`` bounds a child that hangs (a FIFO at an
    entry's path once did)."""
    command = [sys.executable, str(Path(__file__).resolve()), device, *map(str, seeds)]
    proc = subprocess.run(command, capture_output=True, text=True, env=environment(state, **(extra or {})), timeout=timeout,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {int(k): v for k, v in json.loads(proc.stdout.strip().splitlines()[-1]).items()}


def main(argv: list[str]) -> None:
    import neurenix_core as nx
    from neurenix_core import nn

    device, seeds = argv[0], [int(s) for s in argv[1:]]
    x = np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)
    out: dict[int, dict[str, Any]] = {}
    for seed in seeds:
        nn.init.manual_seed(seed)
        model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 10))
        compiled = nx.compile(model, device=device, outputs="host")
        y = np.ascontiguousarray(compiled(x))
        out[seed] = {"summary": compiled.summary, "sha256": hashlib.sha256(y.tobytes()).hexdigest(), "values": y.ravel().tolist()}
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
