"""Compile an MLP and a CNN on ort:0 (ONNX Runtime) at fp32, fp16 and int8, check them against
the core's float64 reference, and print the numbers (``--json`` for a machine-readable line).

    NEURENIX_DEVICE=ort:0 python examples/neurenix-onnxruntime/examples/ort_models.py
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.graph.reference.run import run_graph


def models() -> dict[str, tuple[Any, tuple[int, ...]]]:
    mlp = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 10))
    cnn = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10),
    )
    return {"mlp": (mlp, (32,)), "cnn": (cnn, (3, 16, 16))}


def clustered(rng: np.random.Generator, centers: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Inputs around 10 class centres, so a fitted readout has real margins (top-1 means something)."""
    labels = rng.integers(0, len(centers), n)
    return (centers[labels] + 0.25 * rng.standard_normal((n, *centers.shape[1:]))).astype(np.float32), labels


def fit_readout(model: Any, x: np.ndarray, labels: np.ndarray) -> None:
    """Least-squares fit of the last Linear to one-hot labels on the random body's features: a
    'trained' classifier without a training loop (and without PyTorch)."""
    graph = model.to_graph(x.shape[1:])
    last = graph.nodes[-1]
    values = run_graph(graph.with_input_shapes(x.shape), x, return_values=True)
    feats = np.concatenate([values[last.inputs[0]], np.ones((len(x), 1))], axis=1)
    target = np.eye(int(labels.max()) + 1)[labels] * 4.0
    sol = np.linalg.lstsq(feats.T @ feats + 1e-3 * np.eye(feats.shape[1]), feats.T @ target, rcond=None)[0]
    model.load_state_dict({f"{last.name}.weight": sol[:-1].T.astype(np.float32), f"{last.name}.bias": sol[-1].astype(np.float32)}, strict=False)


def rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    return float(np.max(np.abs(got.astype(np.float64) - ref)) / max(float(np.max(np.abs(ref))), 1e-12))


def check(name: str, model: Any, shape: tuple[int, ...], device: str, rng: np.random.Generator) -> dict[str, Any]:
    centers = rng.standard_normal((10, *shape))
    fit_readout(model, *clustered(rng, centers, 512))
    x, _ = clustered(rng, centers, 256)
    calib = [clustered(rng, centers, 32)[0] for _ in range(8)]
    fp32 = nx.compile(model, device=device)
    y32 = fp32(nx.asarray(x, device=device))
    ref = run_graph(fp32.graph, x)
    fp16 = nx.compile(model, device=device, precision="fp16")
    y16 = fp16(nx.asarray(x, device=device))
    q8 = nx.compile(model, device=device, quantize="int8", calibration=calib, progress=False)
    y8 = q8(nx.asarray(x, device=device))
    top1 = float(np.mean(np.argmax(y8.numpy(), axis=-1) == np.argmax(ref, axis=-1)))
    return {
        "model": name,
        "device": str(y32.device),
        "fp32_rel_err": rel_err(y32.numpy(), ref),
        "fp16_rel_err": rel_err(y16.numpy(), ref),
        "int8_top1_agreement": top1,
        "summary_fp32": fp32.summary,
        "summary_int8": q8.summary,
    }


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="ort:0")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    nn.init.manual_seed(0)
    rows = [check(name, model, shape, args.device, rng) for name, (model, shape) in models().items()]
    if args.json:
        print("RESULT " + json.dumps(rows))
    else:
        for r in rows:
            print(f"{r['model']} on {r['device']}: fp32 rel err {r['fp32_rel_err']:.1e}, fp16 rel err {r['fp16_rel_err']:.1e}, "
                  f"int8 top-1 agreement {r['int8_top1_agreement']:.1%}\n  {r['summary_fp32']}\n  {r['summary_int8']}")
    return rows


if __name__ == "__main__":
    main()
