"""Self-contained model files: import a torch CNN, quantize it, save it as one ``.nxm`` file, then
load and run it in a fresh Python process in which torch cannot be imported (as on a board where
it is not installed), on cpu:0 in fp32 and on ``--device`` with the saved int8 plan.

    python examples/model_files.py [--device cpu|npu|tpu|edgetpu] [--out DIR]

Needs torch here (to import the model); the second process needs neurenix-core alone (and the
device's plugin, or NEURENIX_EMULATE=npu,tpu,edgetpu). docs/model-files.md describes the format.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

import neurenix_core as nx

#: The second process: torch, transformers and onnx refuse to import, then the file is loaded and run.
DEPLOY = """
import importlib.abc, sys
class NoFrameworks(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "transformers", "onnx"):
            raise ImportError(f"{name} is not installed on this board")
sys.meta_path.insert(0, NoFrameworks())

import numpy as np
import neurenix_core as nx

folder, device = sys.argv[1], sys.argv[2]
model = nx.nn.load(f"{folder}/cnn.nxm")
print("loaded:", model)
x = np.load(f"{folder}/x.npy")
fp32 = nx.compile(model, device="cpu:0", precision="fp32", outputs="host", progress=False)
np.save(f"{folder}/fp32.npy", fp32(x))
int8 = nx.compile(model, device=device, outputs="host", progress=False)  # the file's own int8 plan
np.save(f"{folder}/int8.npy", int8(x))
print(f"ran on cpu:0 ({fp32.precision}) and {device} ({int8.precision});",
      "torch imported:", any(m.split(".")[0] == "torch" for m in sys.modules))
"""


class SmallCNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv(x))
        return self.head(y.mean((2, 3)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", help="where the int8 model runs in the second process")
    parser.add_argument("--out", type=Path, default=None, help="folder for the files (default: a temporary one)")
    args = parser.parse_args()
    device = args.device if ":" in args.device else f"{args.device}:0"
    torch.manual_seed(0)

    rng = np.random.default_rng(0)
    calibration = [rng.standard_normal((2, 3, 16, 16)).astype(np.float32) for _ in range(4)]
    model = nx.nn.from_torch(SmallCNN().eval(), torch.from_numpy(calibration[0]))
    plan = nx.quantization.calibrate(model, calibration, progress=False)
    x = rng.standard_normal((5, 3, 16, 16)).astype(np.float32)  # batch 5: the batch axis stays dynamic in the file

    with tempfile.TemporaryDirectory() as tmp:
        folder = args.out or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        nx.nn.save(model, folder / "cnn.nxm", quantization_plan=plan)
        np.save(folder / "x.npy", x)
        print(f"saved {folder / 'cnn.nxm'} ({(folder / 'cnn.nxm').stat().st_size} bytes)")
        want_fp32 = nx.compile(model, device="cpu:0", precision="fp32", outputs="host", progress=False)(x)
        want_int8 = nx.compile(model, device=device, quantize=plan, outputs="host", progress=False)(x)

        proc = subprocess.run([sys.executable, "-c", DEPLOY, str(folder), device], capture_output=True, text=True, check=False)
        print(proc.stdout, end="")
        if proc.returncode != 0:
            raise SystemExit(f"the second process failed:\n{proc.stderr}")
        fp32, int8 = np.load(folder / "fp32.npy"), np.load(folder / "int8.npy")
    print(f"fp32 on cpu:0: max |difference| to before saving {float(np.abs(fp32 - want_fp32).max()):.3g}")
    print(f"int8 on {device}: bit-identical to before saving: {np.array_equal(int8, want_int8)}")


if __name__ == "__main__":
    main()
