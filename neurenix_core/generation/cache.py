"""The key/value cache: one buffer per layer and per keys/values on the device, written in place.

A generation allocates its buffers once, ``(B, H, capacity, D)`` each, where ``capacity`` holds
the (padded) prompt and every new token. The step model takes the past keys/values and returns
the logits and only the **new** keys/values ``(B, H, n, D)``; :meth:`KVCache.advance` writes those
into the buffers at the next free slots (a slice assignment on the device: in place on cpu:0 and
on PyTorch, the backend's own update elsewhere). The host keeps which slots hold a real token and
the next position of each sequence, and builds the additive mask ``(B, 1, n, S + n)`` per step: a
query attends to the valid slots and to the new tokens up to itself. Slot order does not matter
to attention (positions are inputs, rotary embeddings are applied before a key is stored), so a
new key appended at the end of the past in the step and stored at its slot afterwards is the
same key.

- ``fixed``: the past is the whole buffer at every decode step (unused slots masked), so every
  decode step has one input shape: one compilation serves them all (as OpenVINO's NPU LLM
  pipeline runs static-shape hardware), and the cost of a step does not depend on its position.
  The prefill takes an empty past (length 0): one shape per prompt bucket either way.
- ``dynamic``: the past is the filled slots only (``S`` grows by ``n`` per step); every step is a
  new input shape, for checking against the exact computation.
- ``state``: the runtime keeps the keys/values (``state.py``); the host keeps only the slots'
  bookkeeping and builds the mask over the filled slots, as for ``dynamic`` (no buffers here).
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
    """One generation's cache: device buffers plus the host's slot and position bookkeeping."""

    __slots__ = ("buffers", "filled", "grows", "positions", "valid")

    def __init__(self, spec: StepSpec, batch: int, capacity: int, device: Any, *, grows: bool, buffers: bool = True) -> None:
        from neurenix_core.tensor.creation import zeros

        shape = (batch, spec.kv_heads, capacity, spec.head_dim)
        # buffers=False: the runtime keeps the keys/values (cache="state"); the steps take no past.
        self.buffers: list[Any] = [zeros(shape, device=device) for _ in range(2 * spec.layers)] if buffers else []
        self.valid = np.zeros((batch, capacity), bool)
        self.positions = np.zeros(batch, np.int64)
        self.filled = 0
        self.grows = grows

    @property
    def capacity(self) -> int:
        """Slots each buffer holds."""
        return int(self.valid.shape[1])

    def step_inputs(self, ids: np.ndarray, new_valid: np.ndarray) -> tuple[Any, ...]:
        """The step model's inputs for ``ids (B, n)`` whose real tokens are ``new_valid (B, n)``."""
        n = ids.shape[1]
        if self.filled + n > self.capacity:
            raise CacheCapacityError(
                f"the key/value cache holds {self.capacity} tokens and is full; give a larger capacity "
                "(CausalLM(..., capacity=...)) or fewer max_new_tokens")
        # The prefill (nothing stored yet) attends over no past in both kinds: a fixed cache's
        # empty slots would cost a 1,024-token prompt attention over 2,304 positions, not 1,024.
        seen = self.filled if self.grows or self.filled == 0 else self.capacity
        kv_valid = np.concatenate([self.valid[:, :seen], new_valid], axis=1)
        past = self.buffers if seen == self.capacity else [b[:, :, :seen] for b in self.buffers]
        return (ids.astype(np.int64), _mask(kv_valid, n), self._positions(new_valid), *past)

    def advance(self, new_kv: tuple[Any, ...], new_valid: np.ndarray) -> None:
        """Store the step's new keys/values (device Tensors ``(B, H, n, D)``) at the next slots."""
        n = new_valid.shape[1]
        end = self.filled + n
        for buffer, kv in zip(self.buffers, new_kv, strict=True):
            buffer[:, :, self.filled:end] = kv
        self.valid[:, self.filled:end] = new_valid
        self.filled = end
        self.positions = self.positions + new_valid.sum(axis=1)

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
