"""The seed API: check for Tensor Cores, set a precision, optimise a model, read the report.

    NEURENIX_EMULATE=cuda .venv/bin/python examples/tensor_cores_optimize.py
"""

from __future__ import annotations

import os

os.environ.setdefault("NEURENIX_EMULATE", "cuda")

import numpy as np
from neurenix_cuda_tc.api import TensorCoresBackend, is_tensor_cores_available, tensor_cores_status

import neurenix_core as nx
from neurenix_core import nn


def main() -> None:
    if not is_tensor_cores_available():
        raise SystemExit(f"no Tensor Cores: {tensor_cores_status()['reason']}")
    print("Tensor Cores:", tensor_cores_status())
    tensor_cores = TensorCoresBackend()
    tensor_cores.initialize()
    tensor_cores.set_precision("bf16")
    model = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1000))
    optimized = tensor_cores.optimize_model(model, precision="bf16", align=True)
    print(optimized.report)
    x = np.random.default_rng(0).standard_normal((8, 1024)).astype(np.float32)
    out = optimized(nx.asarray(x, device="cuda:0"))
    ref = model(nx.asarray(x)).numpy()
    err = float(np.abs(out.numpy().astype(np.float32) - ref).max())
    print(f"output {out.shape} {out.dtype} on {out.device}; max |bf16 - fp32| = {err:.3f}")
    print("restored switches:", tensor_cores.release())


if __name__ == "__main__":
    main()
