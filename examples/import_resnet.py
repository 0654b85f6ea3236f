"""Import a PyTorch ResNet-style model (written in plain torch.nn) and run it on the best device.

    python examples/import_resnet.py                 # the best device neurenix found
    NEURENIX_EMULATE=npu python examples/import_resnet.py --device npu:0

The model goes through torch.export (nx.nn.from_torch with an example input), nx.compile places
every node on the device when its plugin lowers the op and on the CPU otherwise, and the
placement report says what ran where. The output is checked against PyTorch itself.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from torch import nn as tnn
from torch.nn import functional as F

import neurenix_core as nx
from neurenix_core import nn


class BasicBlock(tnn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = tnn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = tnn.BatchNorm2d(cout)
        self.conv2 = tnn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = tnn.BatchNorm2d(cout)
        self.short = tnn.Sequential()
        if stride != 1 or cin != cout:
            self.short = tnn.Sequential(tnn.Conv2d(cin, cout, 1, stride, bias=False), tnn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + self.short(x))


class ResNet(tnn.Module):
    """A small ResNet: stem, three stages of basic blocks, global pooling, classifier."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = tnn.Sequential(tnn.Conv2d(3, 16, 3, 1, 1, bias=False), tnn.BatchNorm2d(16), tnn.ReLU())
        self.layers = tnn.Sequential(BasicBlock(16, 16, 1), BasicBlock(16, 32, 2), BasicBlock(32, 64, 2))
        self.fc = tnn.Linear(64, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="a device such as cpu:0 or npu:0 (default: the best one)")
    parser.add_argument("--batch", type=int, default=4)
    args = parser.parse_args()

    torch.manual_seed(0)
    net = ResNet().eval()
    x = np.random.default_rng(0).standard_normal((args.batch, 3, 32, 32)).astype(np.float32)
    model = nn.from_torch(net, torch.from_numpy(x))
    print(f"imported: {model}")

    compiled = nx.compile(model, device=args.device, precision="fp32")
    y = compiled(x).numpy()
    want = net(torch.from_numpy(x)).detach().numpy()
    err = float(np.abs(y - want).max() / np.abs(want).max())
    print(f"device: {compiled.device}")
    print(compiled.placement)
    print(f"max relative error vs torch: {err:.2e}")
    if err > 1e-3:
        raise SystemExit(f"mismatch against PyTorch: {err:.2e}")


if __name__ == "__main__":
    main()
