"""Train a small CNN with neurenix on any eager device: autograd tape, Adam, cross entropy.

The data are generated here: 2,000 grey 16x16 images of stripes, class 0 leaning one way and
class 1 the other (random frequency, phase, angle jitter and noise); 400 are held out.

    .venv/bin/python examples/train_cnn.py                              # cpu:0
    NEURENIX_EMULATE=tpu  .venv/bin/python examples/train_cnn.py --device tpu:0
    NEURENIX_EMULATE=cuda .venv/bin/python examples/train_cnn.py --device cuda:0 --precision bf16

It shows a progress bar (rich), prints the held-out accuracy and writes the loss curve as a PNG.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

import neurenix as nx
from neurenix import nn
from neurenix.nn import functional as F
from neurenix.optim import Adam, CosineAnnealingLR


def stripes(n: int, size: int = 16, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` images (N, 1, size, size) float32 and their labels (0: stripes at ~+45°, 1: at ~-45°)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, n)
    angle = np.where(labels == 0, np.pi / 4, -np.pi / 4) + rng.uniform(-0.35, 0.35, n)
    freq = rng.uniform(0.6, 1.4, n)
    phase = rng.uniform(0, 2 * np.pi, n)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float64)
    proj = np.cos(angle)[:, None, None] * xx + np.sin(angle)[:, None, None] * yy
    images = np.sin(freq[:, None, None] * proj + phase[:, None, None]) + rng.normal(0, 0.3, (n, size, size))
    return images[:, None].astype(np.float32), labels.astype(np.int64)


def make_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Dropout(0.1), nn.Linear(16, 2),
    )


def accuracy(model: nn.Module, x: Any, y: np.ndarray) -> float:
    model.eval()
    with nx.no_grad():
        predicted = nx.argmax(model(x), axis=1).numpy()
    return float(np.mean(predicted == y))


def _progress(disable: bool) -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("loss {task.fields[loss]:.4f}"), TimeRemainingColumn(), disable=disable)


def train(device: str, epochs: int, batch: int, precision: str, plot: Path | None, quiet: bool) -> dict[str, Any]:
    nn.manual_seed(0)
    images, labels = stripes(2000)
    x_train, y_train = images[:1600], labels[:1600]
    x_test = nx.asarray(images[1600:], device=device)
    model = make_model().to(device)
    optimizer = Adam(model.parameters(), lr=0.01)
    steps_per_epoch = len(x_train) // batch
    scheduler = CosineAnnealingLR(optimizer, T_max=epochs)
    scaler = nx.GradScaler() if precision == "fp16" else None
    autocast = nx.autocast(precision, device=device) if precision != "fp32" else contextlib.nullcontext()
    order = np.random.default_rng(1)
    losses: list[float] = []
    start = time.perf_counter()
    with _progress(quiet) as progress:
        task = progress.add_task(f"training on {device}", total=epochs * steps_per_epoch, loss=math.nan)
        for _ in range(epochs):
            model.train()
            perm = order.permutation(len(x_train))
            for s in range(steps_per_epoch):
                idx = perm[s * batch : (s + 1) * batch]
                xb, yb = nx.asarray(x_train[idx], device=device), nx.asarray(y_train[idx], device=device)
                optimizer.zero_grad()
                with autocast:
                    loss = F.cross_entropy(model(xb), yb, label_smoothing=0.05)
                if scaler is not None:
                    scaler.scale(loss).backward()
                    scaler.step(optimizer)
                    scaler.update()
                else:
                    loss.backward()
                    optimizer.step()
                losses.append(float(loss))
                progress.update(task, advance=1, loss=losses[-1])
            scheduler.step()
    seconds = time.perf_counter() - start
    acc = accuracy(model, x_test, labels[1600:])
    if plot is not None:
        _plot(losses, steps_per_epoch, plot, f"{device} {precision}: held-out accuracy {acc:.1%}")
    return {"accuracy": acc, "losses": losses, "seconds": seconds, "model": model}


def _plot(losses: list[float], steps_per_epoch: int, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(np.arange(1, len(losses) + 1) / steps_per_epoch, losses, lw=1)
    ax.set_xlabel("epoch")
    ax.set_ylabel("training loss (cross entropy)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu:0")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--precision", choices=("fp32", "fp16", "bf16"), default="fp32", help="fp16/bf16: nx.autocast (fp16 adds a GradScaler)")
    parser.add_argument("--plot", type=Path, default=Path("loss_curve.png"), help="where to write the loss curve PNG")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args()
    out = train(args.device, args.epochs, args.batch, args.precision, args.plot, args.quiet)
    print(f"device {args.device} precision {args.precision}: loss {out['losses'][0]:.3f} -> {out['losses'][-1]:.3f}, "
          f"{len(out['losses'])} steps in {out['seconds']:.1f} s, held-out accuracy {out['accuracy']:.4f}")
    print(f"loss curve: {args.plot}")


if __name__ == "__main__":
    main()
