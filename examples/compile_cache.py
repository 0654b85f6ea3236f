"""The persistent compile cache: the same model compiled in two processes, the second one loading
the first one's compiled form from the state folder.

    NEURENIX_EMULATE=npu,tpu,edgetpu python examples/compile_cache.py

Each device whose plugin compiles models (npu, tpu, edgetpu; emulated here) compiles a small
seeded CNN in a fresh process twice, against a temporary state folder: the first process
compiles and stores ("compile cache: miss"), the second finds the entry ("compile cache: hit")
and gives bit-identical results. ``neurenix cache list --json`` and ``neurenix cache info`` then
show the entries. NEURENIX_COMPILE_CACHE=0 would turn all of it off.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("NEURENIX_EMULATE", "npu,tpu,edgetpu")  # harmless on real hardware: real devices win
os.environ.setdefault("JAX_PLATFORMS", "cpu")

DEVICES = ("npu:0", "tpu:0", "edgetpu:0")


def child(device: str) -> None:
    """One process: compile, call once, print the summary and a hash of the result."""
    import numpy as np

    import neurenix_core as nx
    from neurenix_core import nn

    nn.init.manual_seed(0)  # the same weights in every process: the same graph fingerprint
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, stride=2), nn.ReLU(),
                          nn.Flatten(), nn.Linear(16 * 15 * 15, 10))
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    t0 = time.perf_counter()
    compiled = nx.compile(model, device=device, outputs="host")
    y = np.ascontiguousarray(compiled(x))
    print(json.dumps({"seconds": time.perf_counter() - t0, "summary": compiled.summary, "sha256": hashlib.sha256(y.tobytes()).hexdigest()}))


def run(device: str, state: str) -> dict[str, object]:
    env = {**os.environ, "NEURENIX_STATE_DIR": state}
    proc = subprocess.run([sys.executable, __file__, "--child", device], capture_output=True, text=True, env=env, check=True)
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def available(device: str) -> bool:
    import neurenix_core as nx

    return nx.Device(device).is_available


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="neurenix-cache-example-") as state:
        for device in DEVICES:
            if not available(device):
                print(f"{device}: not available here (set NEURENIX_EMULATE to emulate it)")
                continue
            first, second = run(device, state), run(device, state)
            for name, result in (("first process ", first), ("second process", second)):
                phrase = "; ".join(re.findall(r"compile cache[^,;]*", str(result["summary"])))
                print(f"{device} {name}: compile + first call {float(result['seconds']):.3f} s, {phrase}")
            assert "hit" in str(second["summary"]), second["summary"]
            assert first["sha256"] == second["sha256"]
            print(f"{device}: identical results in both processes")
        env = {**os.environ, "NEURENIX_STATE_DIR": state}

        def cache(*args: str) -> str:
            return subprocess.run([sys.executable, "-m", "neurenix_core.cli.main", "cache", *args], capture_output=True, text=True,
                                  env=env, check=True).stdout

        for entry in json.loads(cache("list", "--json")):  # `neurenix cache list` draws the same as a table
            print(f"entry {entry['key'][:12]}: plugin {entry['plugin']}, {entry['device']}, model {entry['fingerprint']}, {entry['bytes']:,} bytes")
        print(cache("info").rstrip())


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2])
    else:
        main()
