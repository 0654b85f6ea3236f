"""Portable models: build, run eagerly, compile, check against the float64 reference, import
from PyTorch, save and load weights safely.

    python examples/models.py [--device cpu:0]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.graph.reference.run import run_graph


def small_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=2), nn.GELU(), nn.AdaptiveAvgPool2d(2),
        nn.Flatten(), nn.Linear(64, 10),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default=None, help="device to run on (default: the default device)")
    args = parser.parse_args()
    nn.manual_seed(0)
    device = nx.Device(args.device) if args.device else nx.default_device()
    model = small_cnn().to(device)
    x = np.random.default_rng(0).standard_normal((4, 3, 16, 16)).astype(np.float32)

    eager = model(nx.asarray(x, device=device)).numpy()
    compiled = nx.compile(model, device=device)
    out = compiled(x).numpy()
    ref = run_graph(model.to_graph(x.shape), x)
    print(f"device {device}: {compiled.summary}")
    print(f"max |eager - reference| = {np.abs(eager - ref).max():.2e}, max |compiled - reference| = {np.abs(out - ref).max():.2e}")
    assert np.allclose(eager, ref, atol=1e-4) and np.allclose(out, ref, atol=1e-4)

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cnn.npz"
        model.save(path)
        clone = small_cnn().load(path).to(device)
        assert np.array_equal(clone(nx.asarray(x, device=device)).numpy(), eager)
        print(f"weights saved to {path.name} ({path.stat().st_size} bytes) and loaded back: identical outputs")

    try:
        import torch
    except ImportError:
        print("PyTorch not installed: skipping from_torch")
        return
    torch.manual_seed(0)
    source = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3)).eval()
    imported = nn.from_torch(source).to(device)
    z = np.random.default_rng(1).standard_normal((5, 12)).astype(np.float32)
    with torch.no_grad():
        expected = source(torch.from_numpy(z)).numpy()
    got = imported(nx.asarray(z, device=device)).numpy()
    print(f"from_torch: max |neurenix - torch| = {np.abs(got - expected).max():.2e}")
    assert np.allclose(got, expected, atol=1e-5)


if __name__ == "__main__":
    main()
