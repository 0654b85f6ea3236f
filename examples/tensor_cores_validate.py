"""Validate the Ampere guide's CNN for Tensor Cores, pad it, and check the outputs did not change.

    NEURENIX_EMULATE=cuda .venv/bin/python examples/tensor_cores_validate.py
"""

from __future__ import annotations

import os

os.environ.setdefault("NEURENIX_EMULATE", "cuda")

import torch  # noqa: E402

from neurenix_cuda_tc.api import align_model, validate_model  # noqa: E402
from neurenix_cuda_tc.models import optimized_cnn, unoptimized_cnn  # noqa: E402


def main() -> None:
    model = unoptimized_cnn()
    print("unoptimized model (3->67->129->251):")
    for finding in validate_model(model, precision="fp16", batch_size=6):
        print("  -", finding)
    print("optimized twin (8->72->128->256):", validate_model(optimized_cnn(), precision="fp16") or "no findings")
    padded, done = align_model(model, precision="fp16")
    print("align_model:", *done, sep="\n  - ")
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        diff = (padded(x) - model(x)).abs().max().item()
    print(f"max |padded - original| = {diff:.2e}")
    assert diff <= 1e-6


if __name__ == "__main__":
    main()
