"""Train a small model with Tensor Core settings and mixed precision (autocast + GradScaler).

    NEURENIX_EMULATE=cuda .venv/bin/python examples/tensor_cores_train_amp.py
"""

from __future__ import annotations

import os

os.environ.setdefault("NEURENIX_EMULATE", "cuda")

import torch
from neurenix_cuda_tc.api import MixedPrecision, TensorCoresBackend
from tqdm import tqdm


def main(steps: int = 80) -> None:
    torch.manual_seed(0)
    with TensorCoresBackend("cuda:0") as tc:  # initialize(); release() restores PyTorch's switches
        precision = "fp16" if not tc.emulated else "bf16"  # CPU autocast is fastest in bf16
        print(f"device cuda:0, emulated={tc.emulated}, precision {precision}")
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
        device = tc.backend._native_device(0)
        model = tc.optimize_model(model, precision="fp32").train()  # fp32 master weights; autocast does the rest
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
        mp = MixedPrecision(precision, device_type=device.type)
        x = torch.randn(256, 32, device=device)
        target = torch.sin(x[:, :8]) + x[:, 8:16] * 0.5
        first = last = 0.0
        for step in tqdm(range(steps), desc="training", disable=None):
            with mp.step(optimizer) as s:
                loss = torch.nn.functional.mse_loss(model(x).float(), target)
                s.backward(loss)
            first = loss.item() if step == 0 else first
            last = loss.item()
        print(f"loss {first:.4f} -> {last:.4f} ({mp.skipped_steps} step(s) skipped by the scaler)")
        assert last < 0.5 * first


if __name__ == "__main__":
    main()
