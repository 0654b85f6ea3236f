"""Run one imported transformer on every device neurenix found, and say where each node ran.

    python examples/models_every_device.py                        # the devices of this machine
    NEURENIX_EMULATE=cuda,tpu,npu,edgetpu python examples/models_every_device.py   # plugins on the CPU
    python examples/models_every_device.py --model cnn --int8     # a MobileNet-style block, int8 where supported

A small vision transformer (patch embedding, class token, nn.TransformerEncoder) or a
MobileNetV3-style block, both written in plain torch.nn, is imported once with nx.nn.from_torch
(torch.export) and compiled for each device with nx.compile: every plugin lowers the op-level
graph itself (OpenVINO ops, one jitted JAX program, a TFLite model, a torch module, ONNX), and
what a plugin does not lower runs on cpu:0, named in the placement line. Outputs are checked
against PyTorch.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from torch import nn as tnn
from torch.nn import functional as F

import neurenix_core as nx
from neurenix_core import nn

INT8_TYPES = ("cpu", "npu", "edgetpu")  # devices whose compiler takes a whole int8 model


class TinyViT(tnn.Module):
    def __init__(self, dim: int = 32, classes: int = 10) -> None:
        super().__init__()
        self.patch = tnn.Conv2d(3, dim, 4, stride=4)
        self.cls = tnn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos = tnn.Parameter(torch.randn(1, 17, dim) * 0.02)
        layer = tnn.TransformerEncoderLayer(dim, 4, 2 * dim, dropout=0.0, activation="gelu", batch_first=True, norm_first=True)
        self.encoder = tnn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = tnn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.patch(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.cls.expand(t.shape[0], -1, -1), t], dim=1) + self.pos
        return self.head(self.encoder(t)[:, 0])


class MobileBlock(tnn.Module):
    def __init__(self, c: int = 16, expand: int = 48, classes: int = 10) -> None:
        super().__init__()
        self.stem = tnn.Sequential(tnn.Conv2d(3, c, 3, 2, 1), tnn.Hardswish())
        self.expand = tnn.Sequential(tnn.Conv2d(c, expand, 1), tnn.Hardswish())
        self.dw = tnn.Sequential(tnn.Conv2d(expand, expand, 3, 1, 1, groups=expand), tnn.Hardswish())
        self.se1, self.se2 = tnn.Conv2d(expand, 12, 1), tnn.Conv2d(12, expand, 1)
        self.project = tnn.Conv2d(expand, c, 1)
        self.head = tnn.Linear(c, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        y = self.dw(self.expand(x))
        s = F.hardsigmoid(self.se2(F.relu(self.se1(F.adaptive_avg_pool2d(y, 1)))))
        return self.head((self.project(y * s) + x).mean((2, 3)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("vit", "cnn"), default="vit")
    parser.add_argument("--int8", action="store_true", help="quantize (calibrated int8) on the devices that compile int8 models")
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()

    torch.manual_seed(0)
    net = (TinyViT() if args.model == "vit" else MobileBlock()).eval()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.batch, 3, 16, 16)).astype(np.float32)
    want = net(torch.from_numpy(x)).detach().numpy()
    model = nn.from_torch(net, torch.from_numpy(x))
    calibration = [rng.standard_normal(x.shape).astype(np.float32) for _ in range(4)]
    worst = 0.0
    for device in (d for d in nx.devices() if d.index == 0):
        int8 = args.int8 and device.type in INT8_TYPES
        options = {"quantize": "int8", "calibration": calibration, "progress": False} if int8 else {"precision": "fp32"}
        with nx.fallback_policy("allow"):  # nodes a plugin does not lower run on cpu:0: the line below names them
            compiled = nx.compile(model, device=device, outputs="host", **options)
            y = compiled(x)
        err = float(np.abs(y - want).max() / np.abs(want).max())
        agree = float(np.mean(y.argmax(1) == want.argmax(1)))
        print(f"{device!s:10} {'int8' if int8 else 'fp32'}  max rel err {err:.1e}  top-1 agreement {agree:.0%}  | {compiled.placement.line()}")
        worst = max(worst, 0.0 if int8 else err)
    if worst > 1e-3:
        raise SystemExit(f"an fp32 device disagrees with PyTorch: {worst:.2e}")


if __name__ == "__main__":
    main()
