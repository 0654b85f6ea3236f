"""Deploy a compiled model: compile once, save the artifact, load it in a fresh process that
cannot import torch, and check the results; then see the typed error of a damaged artifact.

    NEURENIX_EMULATE=npu,tpu,edgetpu JAX_PLATFORMS=cpu python examples/deploy_compiled.py --device npu:0
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import neurenix_core as nx
from neurenix_core import nn

# The target machine's side: only the core and the device's plugin; torch is made unimportable
# (except for a cuda artifact, which torch runs).
LOADER = """
import sys
if sys.argv[4] == "1":
    sys.modules["torch"] = None  # a cuda artifact is a torch.export program: torch stays
import numpy as np
import neurenix_core as nx
model = nx.load_compiled(sys.argv[1])
np.save(sys.argv[3], np.asarray(model(np.load(sys.argv[2]))))
print(model.placement.line())
print("torch imported:", "torch" in {m.split(".")[0] for m, v in sys.modules.items() if v is not None})
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="npu:0")
    args = ap.parse_args()
    nn.init.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 8 * 8, 10))
    x = np.random.default_rng(0).standard_normal((4, 3, 16, 16)).astype(np.float32)

    compiled = nx.compile(model, device=args.device, outputs="host")
    expected = compiled(x)  # compiles for (4, 3, 16, 16); save() writes every shape compiled so far
    work = Path(tempfile.mkdtemp())
    folder = compiled.save(work / "classifier")
    manifest = json.loads((folder / "artifact.json").read_text())
    print("saved:", folder.name, "for", manifest["device"], "by plugin", manifest["plugin"]["name"], manifest["plugin"]["version"],
          "runtime", ", ".join(manifest["runtime"]))
    print("files:", sorted(manifest["checksums"]))

    np.save(work / "x.npy", x)
    block_torch = "1" if compiled.device.type != "cuda" else "0"
    proc = subprocess.run([sys.executable, "-c", LOADER, str(folder), str(work / "x.npy"), str(work / "y.npy"), block_torch],
                          capture_output=True, text=True, check=True)
    print(proc.stdout.strip())
    print("same results in the fresh process:", bool(np.allclose(np.load(work / "y.npy"), expected, rtol=1e-6, atol=1e-6)))

    victim = next(p for p in sorted((folder / "parts").rglob("*")) if p.is_file()) if (folder / "parts").exists() else folder / "graph.arrays"
    victim.write_bytes(victim.read_bytes()[:-8] + b"damaged!")
    try:
        nx.load_compiled(folder)
    except nx.ArtifactFormatError as exc:
        print("damaged artifact refused:", type(exc).__name__, str(exc).split(";")[0])


if __name__ == "__main__":
    main()
