"""Mixed-precision training for PyTorch models: autocast and GradScaler in one context.

    mp = MixedPrecision(precision="fp16")
    for x, y in batches:
        with mp.step(optimizer) as step:
            loss = loss_fn(model(x), y)
            step.backward(loss)

On entry: ``optimizer.zero_grad()`` and autocast. ``backward`` scales the loss (fp16 needs loss
scaling; bf16 has fp32's range and does not). On exit: unscale, optional gradient clipping,
``scaler.step`` (skipped by the scaler when gradients overflowed) and ``scaler.update``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from neurenix_cuda_tc.capability import parse_precision

__all__ = ["MixedPrecision", "Step"]


@dataclass
class Step:
    scaler: Any
    called: bool = False

    def backward(self, loss: Any) -> None:
        self.scaler.scale(loss).backward()
        self.called = True


class MixedPrecision:
    """autocast(dtype) + GradScaler for one device type ("cuda", or "cpu" when emulated)."""

    def __init__(self, precision: str = "fp16", device_type: str | None = None, *, max_grad_norm: float | None = None) -> None:
        import torch

        mode = parse_precision(precision)
        if mode not in ("fp16", "bf16", "mixed"):
            from neurenix_cuda_tc.capability import UnknownPrecisionError

            raise UnknownPrecisionError(f"MixedPrecision trains in fp16, bf16 or mixed (= fp16), not {precision!r} (plugin cuda)")
        self.dtype = torch.bfloat16 if mode == "bf16" else torch.float16
        self.device_type = device_type or ("cuda" if torch.cuda.is_available() else "cpu")
        # bf16 keeps fp32's exponent range: scaling is pointless there, so the scaler is disabled.
        self.scaler = torch.amp.GradScaler(self.device_type, enabled=self.dtype == torch.float16)
        self.max_grad_norm = max_grad_norm
        self.skipped_steps = 0

    @contextlib.contextmanager
    def step(self, optimizer: Any) -> Iterator[Step]:
        import torch

        optimizer.zero_grad(set_to_none=True)
        step = Step(self.scaler)
        with torch.autocast(device_type=self.device_type, dtype=self.dtype):
            yield step
        if not step.called:
            raise RuntimeError("MixedPrecision.step: call step.backward(loss) inside the block")
        self.scaler.unscale_(optimizer)
        if self.max_grad_norm is not None:
            params = [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
            torch.nn.utils.clip_grad_norm_(params, self.max_grad_norm)
        scale = self.scaler.get_scale()
        self.scaler.step(optimizer)
        self.scaler.update()
        if self.scaler.is_enabled() and self.scaler.get_scale() < scale:
            self.skipped_steps += 1  # the scaler found inf/NaN gradients and skipped this update
