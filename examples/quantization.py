"""Quantization: calibrate an MLP, compare fp32 with fake-quantized and integer (TFLite
arithmetic) outputs and the calibration range methods, then int16 and dynamic quantization
through nx.compile.

    python examples/quantization.py [--no-progress]
"""

from __future__ import annotations

import argparse

import numpy as np

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.graph import quantization as Q
from neurenix_core.graph.reference.run import run_graph, run_quantized


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--no-progress", action="store_true", help="hide the calibration progress bar")
    args = parser.parse_args()
    nn.manual_seed(0)
    rng = np.random.default_rng(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    calibration = [rng.standard_normal((32, 32)).astype(np.float32) for _ in range(8)]
    graph = model.to_graph()
    plan = Q.calibrate(graph, calibration, bits=8, progress=not args.no_progress)
    print(Q.plan_summary(plan))

    x = rng.standard_normal((200, 32)).astype(np.float32)
    ref = run_graph(graph, x)
    fake = run_graph(graph, x, plan=plan)
    ints = run_quantized(graph, plan, x)
    scale = np.abs(ref).max()
    print(f"int8 fake-quantized error {np.abs(fake - ref).max() / scale:.4f}, integer kernels {np.abs(ints - ref).max() / scale:.4f} (of max |output|)")
    print(f"top-1 agreement fp32 vs int8: {np.mean(ref.argmax(1) == ints.argmax(1)):.3f}")

    # How each range method quantizes the same model: min/max covers every calibration value,
    # percentile clips a share of each end, histogram takes each value's range of least error
    # (nx.compile's default for a model without layer norms).
    for method in Q.METHODS:
        ranged = run_quantized(graph, Q.calibrate(graph, calibration, method=method, progress=False), x)
        print(f"calibration_method={method!r}: integer error {np.linalg.norm(ranged - ref) / np.linalg.norm(ref):.4f} (relative L2), "
              f"top-1 agreement {np.mean(ref.argmax(1) == ranged.argmax(1)):.3f}")

    for mode in ("int16", "dynamic"):
        compiled = nx.compile(model, device="cpu", quantize=mode, calibration=calibration, progress=not args.no_progress)
        out = compiled(x).numpy()
        print(f"{mode}: {compiled.summary}; error {np.abs(out - ref).max() / scale:.5f}")
        assert np.abs(out - ref).max() / scale < 0.02


if __name__ == "__main__":
    main()
