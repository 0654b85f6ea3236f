"""Validate the Ampere guide's CNN for Tensor Cores, pad it, and check the outputs did not change.

    NEURENIX_EMULATE=cuda .venv/bin/python examples/tensor_cores_validate.py
"""

from __future__ import annotations

import os

os.environ.setdefault("NEURENIX_EMULATE", "cuda")

import torch
from neurenix_cuda_tc.api import align_model, validate_model
from neurenix_cuda_tc.models import optimized_cnn, unoptimized_cnn

from neurenix_core.testing.reference import TOLERANCES


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
        got, want = padded(x), model(x)
    # Zero padding changes no value, but the padded convolutions may take another CPU kernel
    # (summation order, FMA), so "unchanged" means within float32 rounding: the core's table.
    rtol, atol = TOLERANCES["float32"]
    diff = (got - want).abs().max().item()
    same = torch.allclose(got, want, rtol=rtol, atol=atol)
    print(f"max |padded - original| = {diff:.2e} (max |original| = {want.abs().max().item():.2e})")
    print(f"unchanged within float32 tolerance (rtol={rtol:g}, atol={atol:g}): {same}")
    assert same


if __name__ == "__main__":
    main()
