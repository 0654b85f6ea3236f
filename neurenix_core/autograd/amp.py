"""Mixed precision: ``autocast`` (low-precision matmul/conv, fp32 reductions and losses) and
``GradScaler`` (dynamic loss scaling for fp16).

    scaler = nx.GradScaler()
    with nx.autocast("fp16"):
        loss = F.cross_entropy(model(x), y)        # linear/conv in fp16, loss in fp32
    scaler.scale(loss).backward()                   # gradients of loss * scale (no fp16 underflow)
    scaler.step(optimizer)                          # unscale; skip the step if any grad is inf/NaN
    scaler.update()                                 # back off after an overflow, grow after 2000 good steps

Under autocast the nn layers' matmul and convolution ops (``nn.linear``, ``nn.conv2d`` and the
attention matmuls) take float16/bfloat16 inputs (the weights stay float32: the cast is on the
tape, so their gradients arrive in float32); softmax, the norms and the losses run in float32.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np

from neurenix_core.autograd.grad import no_grad
from neurenix_core.errors import ConfigurationError, UnsupportedDTypeError
from neurenix_core.tensor import ops as xp
from neurenix_core.tensor.dtypes import as_dtype
from neurenix_core.tensor.tensor import Tensor, placement_for

__all__ = ["GradScaler", "at_least_fp32", "autocast", "cast", "low_precision"]

_PRECISIONS = {"fp16": "float16", "float16": "float16", "half": "float16", "bf16": "bfloat16", "bfloat16": "bfloat16"}
_active: list[np.dtype[Any] | None] = []


def low_precision() -> np.dtype[Any] | None:
    """The dtype matmul/conv run in under the innermost autocast (None: autocast is off)."""
    return _active[-1] if _active else None


class autocast(contextlib.ContextDecorator):  # PyTorch's name
    """Run the nn layers' matmul/conv in ``precision`` ("fp16" or "bf16") inside the block."""

    def __init__(self, precision: str = "fp16", device: Any = None, enabled: bool = True) -> None:
        name = _PRECISIONS.get(str(precision).lower())
        if name is None:
            raise ConfigurationError(f"autocast: precision must be 'fp16' or 'bf16', got {precision!r}")
        self.dtype = as_dtype(name) if enabled else None
        if device is not None and self.dtype is not None:
            p = placement_for(device)
            if not p.backend.supports_dtype(self.dtype):
                raise UnsupportedDTypeError(f"autocast({precision!r}): {p.device} (backend {p.backend.name}) does not support {name}; use the other precision or fp32")

    def __enter__(self) -> autocast:  # noqa: PYI034 - typing.Self needs Python 3.11; the core supports 3.10
        _active.append(self.dtype)
        return self

    def __exit__(self, *exc: object) -> None:
        _active.pop()


def cast(*tensors: Any) -> tuple[Any, ...]:
    """``tensors`` in the autocast dtype (floating ones; None and others pass through)."""
    dt = low_precision()
    if dt is None:
        return tensors
    return tuple(xp.astype(t, dt) if type(t) is Tensor and t.dtype != dt and t.dtype.kind in "fV" else t for t in tensors)


def at_least_fp32(x: Any) -> Any:
    """``x`` in float32 when it is float16/bfloat16 (reductions and losses), else ``x``."""
    if type(x) is Tensor and x.dtype.name in ("float16", "bfloat16"):
        return xp.astype(x, np.float32)
    return x


class GradScaler:
    """Dynamic loss scaling (PyTorch's GradScaler): gradients of ``loss * scale`` stay above fp16's
    underflow; steps whose gradients overflowed are skipped and the scale backs off."""

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True) -> None:
        if growth_factor <= 1.0 or not 0.0 < backoff_factor < 1.0 or growth_interval < 1:
            raise ConfigurationError(f"GradScaler: need growth_factor > 1, 0 < backoff_factor < 1, growth_interval >= 1 "
                                     f"(got {growth_factor}, {backoff_factor}, {growth_interval})")
        self.enabled = bool(enabled)
        self._scale = float(init_scale)
        self.growth_factor, self.backoff_factor, self.growth_interval = float(growth_factor), float(backoff_factor), int(growth_interval)
        self._good_steps = 0
        self._pending: dict[int, bool] = {}  # id(optimizer) -> found inf/NaN since the last update
        self.skipped_steps = 0

    def get_scale(self) -> float:
        return self._scale if self.enabled else 1.0

    def scale(self, loss: Tensor) -> Tensor:
        return loss * self._scale if self.enabled else loss

    def unscale_(self, optimizer: Any) -> None:
        """Divide the optimizer's gradients by the scale (once per step) and look for inf/NaN."""
        if not self.enabled:
            return
        if id(optimizer) in self._pending:
            raise ConfigurationError("GradScaler.unscale_: already called for this optimizer since the last update()")
        inverse, found = 1.0 / self._scale, False
        with no_grad():
            for slot in optimizer.slots():
                g = slot.grad
                if g is None:
                    continue
                g = g * inverse
                slot.grad = g
                found = found or not bool(xp.all(xp.isfinite(g)))
        self._pending[id(optimizer)] = found

    def step(self, optimizer: Any) -> Any:
        """``optimizer.step()`` unless the (unscaled) gradients hold inf/NaN; then nothing changes."""
        if not self.enabled:
            return optimizer.step()
        if id(optimizer) not in self._pending:
            self.unscale_(optimizer)
        if self._pending[id(optimizer)]:
            self.skipped_steps += 1
            return None
        return optimizer.step()

    def update(self) -> None:
        """Back off after an overflow; grow after ``growth_interval`` clean steps in a row."""
        if not self.enabled:
            return
        if any(self._pending.values()):
            self._scale *= self.backoff_factor
            self._good_steps = 0
        else:
            self._good_steps += 1
            if self._good_steps >= self.growth_interval:
                self._scale *= self.growth_factor
                self._good_steps = 0
        self._pending.clear()

    def state_dict(self) -> dict[str, Any]:
        return {"scale": self._scale, "growth_factor": self.growth_factor, "backoff_factor": self.backoff_factor,
                "growth_interval": self.growth_interval, "good_steps": self._good_steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._scale, self._good_steps = float(state["scale"]), int(state["good_steps"])
        self.growth_factor, self.backoff_factor = float(state["growth_factor"]), float(state["backoff_factor"])
        self.growth_interval = int(state["growth_interval"])
