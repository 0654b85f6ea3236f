"""Small trained float models for the pre-quantized import tests (ONNX QDQ, PyTorch PT2E): a CNN
(conv/BN/ReLU/pooling/linear) and an MLP, trained a moment on a task they can learn, so their
logits have margins (random weights leave many near-ties that one rounding step flips)."""

from __future__ import annotations

from typing import Any

import numpy as np

#: classes and input shape per model kind
CLASSES = {"cnn": 10, "mlp": 6}
SHAPES = {"cnn": (3, 32, 32), "mlp": (32,)}


def cnn() -> Any:
    import torch

    nn = torch.nn
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.AvgPool2d(2),
                         nn.Flatten(), nn.Linear(16 * 4 * 4, 10))


def mlp() -> Any:
    import torch

    nn = torch.nn
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 6))


def dataset(kind: str, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Noisy inputs around one fixed random template per class, and their labels."""
    templates = np.random.default_rng(123).standard_normal((CLASSES[kind], *SHAPES[kind]))
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, CLASSES[kind], n)
    x = 0.6 * templates[labels] + rng.standard_normal((n, *SHAPES[kind]))
    return x.astype(np.float32), labels


def trained(kind: str) -> Any:
    """A few hundred Adam steps (seconds on a CPU); then BN in eval mode as exported."""
    import torch

    torch.manual_seed(0)
    model = cnn() if kind == "cnn" else mlp()
    x, y = dataset(kind, 1024, seed=7)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for step in range(60):
        idx = slice((step * 64) % 1024, (step * 64) % 1024 + 64)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(xt[idx]), yt[idx]).backward()
        opt.step()
    return model.eval()
