"""First call in a fresh process: nx.load_compiled of a saved artifact vs compiling the model
again (compile cache off), per plugin; and for npu the compiled blob vs the OpenVINO IR.

    NEURENIX_EMULATE=cuda,tpu,npu,edgetpu JAX_PLATFORMS=cpu .venv/bin/python benchmarks/deploy_load.py

Each number is the median of --repeat fresh interpreters, measured inside the child from just
before ``import neurenix_core`` to the first result (interpreter start-up not included).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

_MODEL = """
from neurenix_core import nn
from neurenix_core.nn.init import manual_seed
manual_seed(0)
model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64 * 8 * 8, 10))
"""
_CHILD = """
import sys, time, json
t0 = time.perf_counter()
import numpy as np
import neurenix_core as nx
mode, device, path = sys.argv[1:4]
x = np.zeros((1, 3, 32, 32), np.float32)
if mode == "load":
    model = nx.load_compiled(path)
else:
""" + "\n".join("    " + line for line in _MODEL.strip().splitlines()) + """
    model = nx.compile(model, device=device, outputs="host")
np.asarray(model(x))
print(json.dumps({"ms": (time.perf_counter() - t0) * 1e3}))
"""


def _child(mode: str, device: str, path: str, env: dict[str, str]) -> float:
    out = subprocess.run([sys.executable, "-c", _CHILD, mode, device, path], capture_output=True, text=True, env=env, check=True)
    return float(json.loads(out.stdout.strip().splitlines()[-1])["ms"])


def _ir_only(folder: Path) -> None:
    """The same artifact with its npu blob marked as from another OpenVINO: loading compiles the IR."""
    manifest = json.loads((folder / "artifact.json").read_text())
    for part in manifest["parts"]:
        part["meta"]["runtime"] = "openvino (another version)"
    (folder / "artifact.json").write_text(json.dumps(manifest))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--devices", nargs="+", default=["cpu", "npu", "tpu", "edgetpu", "cuda"])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    env = {**os.environ, "NEURENIX_COMPILE_CACHE": "0"}
    root = Path(tempfile.mkdtemp())
    rows = []
    for device in args.devices:
        folder = root / device
        save = _MODEL + f"\nimport neurenix_core as nx, numpy as np\nc = nx.compile(model, device={device!r}, outputs='host')\n" \
               f"c(np.zeros((1, 3, 32, 32), np.float32))\nc.save({str(folder)!r})\n"
        subprocess.run([sys.executable, "-c", save], env=env, check=True, capture_output=True)
        cold = statistics.median(_child("compile", device, "", env) for _ in range(args.repeat))
        loaded = statistics.median(_child("load", device, str(folder), env) for _ in range(args.repeat))
        rows.append((device, "artifact", cold, loaded))
        if device == "npu":
            _ir_only(folder)
            ir = statistics.median(_child("load", device, str(folder), env) for _ in range(args.repeat))
            rows.append((device, "IR only", cold, ir))
    print(f"{'device':8} {'artifact':9} {'compile (ms)':>12} {'load (ms)':>10} {'speed-up':>9}")
    for device, kind, cold, loaded in rows:
        print(f"{device:8} {kind:9} {cold:12.0f} {loaded:10.0f} {cold / loaded:8.2f}x")


if __name__ == "__main__":
    main()
