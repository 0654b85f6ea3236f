"""Key/value caches for the step model: past keys and values stay on the device between steps.

Both kinds hold the same state: one device Tensor per layer and per keys/values ``(B, H, S, D)``
(fed back into the compiled step as inputs: a Tensor on the compiled device is used without a
copy, see ``neurenix_core.graph.compile.inputs``), and on the host which slots hold a real token and
the next position of each sequence. Per step the host builds the additive mask ``(B, 1, n, S + n)``:
a query attends to the valid slots up to itself.

- ``dynamic``: S grows by n per step (the present is the past with the new tokens appended);
  every step is a new input shape, for devices that run graphs per shape cheaply (cpu).
- ``fixed``: S is a capacity chosen up front; the step drops the oldest n slots (masked empty
  ones) as it appends n, so every decode step has the same shapes and one compilation serves
  them all, as OpenVINO's NPU LLM pipeline does for static-shape hardware.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from neurenix_core.generation.errors import CacheCapacityError
from neurenix_core.generation.step import StepSpec

__all__ = ["MASKED", "KVCache"]

#: The additive mask value of a slot a query must not see (transformers uses the dtype's minimum):
#: exp(MASKED - max) is exactly 0 in float32, and a row with nothing to see stays finite.
MASKED = float(np.finfo(np.float32).min)


class KVCache:
    """One generation's cache: device tensors plus the host's slot and position bookkeeping."""

    __slots__ = ("past", "positions", "valid", "window")

    def __init__(self, spec: StepSpec, batch: int, slots: int, device: Any, *, window: bool) -> None:
        from neurenix_core.tensor.creation import zeros

        shape = (batch, spec.kv_heads, slots, spec.head_dim)
        self.past: list[Any] = [zeros(shape, device=device) for _ in range(2 * spec.layers)]
        self.valid = np.zeros((batch, slots), bool)
        self.positions = np.zeros(batch, np.int64)
        self.window = window

    @property
    def length(self) -> int:
        """Slots the cache holds now (the capacity of a fixed cache)."""
        return int(self.valid.shape[1])

    def step_inputs(self, ids: np.ndarray, new_valid: np.ndarray) -> tuple[Any, ...]:
        """The step model's inputs for ``ids (B, n)`` whose real tokens are ``new_valid (B, n)``."""
        n = ids.shape[1]
        kv_valid = np.concatenate([self.valid, new_valid], axis=1)
        if self.window and kv_valid[:, :n].any():
            raise CacheCapacityError(
                f"the fixed key/value cache holds {self.length} tokens and this step would drop one still attended to; "
                "give a larger capacity (CausalLM(..., capacity=...)) or fewer max_new_tokens")
        return (ids.astype(np.int64), _mask(kv_valid, n), self._positions(new_valid), *self.past)

    def advance(self, present: tuple[Any, ...], new_valid: np.ndarray) -> None:
        """Take the step's present keys/values (device Tensors) as the next past."""
        n = new_valid.shape[1]
        kv_valid = np.concatenate([self.valid, new_valid], axis=1)
        self.valid = kv_valid[:, n:] if self.window else kv_valid
        self.positions = self.positions + new_valid.sum(axis=1)
        self.past = list(present)

    def _positions(self, new_valid: np.ndarray) -> np.ndarray:
        """Positions as transformers' generate computes them: the count of real tokens before
        each one (cumsum of the mask minus one), 1 on padding."""
        pos = self.positions[:, None] + np.cumsum(new_valid, axis=1) - 1
        return np.where(new_valid, pos, 1).astype(np.int64)


def _mask(kv_valid: np.ndarray, n: int) -> np.ndarray:
    """The additive mask ``(B, 1, n, S + n)``: query q (the slot S + q) sees valid slots <= its own."""
    total = kv_valid.shape[1]
    causal = np.arange(total)[None, :] <= (total - n + np.arange(n))[:, None]  # (n, S + n)
    allowed = kv_valid[:, None, None, :] & causal[None, None]
    return np.where(allowed, np.float32(0.0), np.float32(MASKED)).astype(np.float32)
