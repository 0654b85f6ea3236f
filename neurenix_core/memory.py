"""Per-device byte accounting with optional limits, shared by every backend.

The core charges a device when a tensor is created on it and releases the bytes when the
tensor is freed; an allocation that would pass the limit raises before anything is created, so
existing tensors stay intact.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import final

from neurenix_core.errors import OutOfMemoryError

__all__ = ["MemoryStats", "MemoryTracker"]


@final
@dataclass(frozen=True, slots=True)
class MemoryStats:
    device: str
    in_use: int
    peak: int
    limit: int | None
    allocations: int

    def as_dict(self) -> dict[str, int | str | None]:
        return {"device": self.device, "in_use": self.in_use, "peak": self.peak, "limit": self.limit, "allocations": self.allocations}


@final
class MemoryTracker:
    """Bytes held per device index. Lists indexed by device index keep the hot path to a few ops."""

    __slots__ = ("_label", "in_use", "peak", "limit", "count", "_lock")

    def __init__(self, label: str, device_count: int) -> None:
        self._label = label
        self.in_use = [0] * device_count
        self.peak = [0] * device_count
        self.limit: list[int | None] = [None] * device_count
        self.count = [0] * device_count
        self._lock = threading.Lock()

    def charge(self, index: int, nbytes: int) -> None:
        limit = self.limit[index]
        if limit is not None and self.in_use[index] + nbytes > limit:
            self._refuse(index, nbytes, limit)
        with self._lock:
            used = self.in_use[index] + nbytes
            self.in_use[index] = used
            self.count[index] += 1
            if used > self.peak[index]:
                self.peak[index] = used

    def release(self, index: int, nbytes: int) -> None:
        with self._lock:
            self.in_use[index] -= nbytes
            self.count[index] -= 1

    def check(self, index: int, nbytes: int) -> None:
        """Raise OutOfMemoryError if ``nbytes`` more would pass the limit (before allocating)."""
        limit = self.limit[index]
        if limit is not None and self.in_use[index] + nbytes > limit:
            self._refuse(index, nbytes, limit)

    def _refuse(self, index: int, nbytes: int, limit: int) -> None:
        device = f"{self._label}:{index}"
        used = self.in_use[index]
        raise OutOfMemoryError(
            f"{device}: allocating {nbytes} bytes would exceed the memory limit of {limit} bytes "
            f"({used} bytes in use). Free tensors, raise the limit with nx.set_memory_limit('{device}', n) "
            f"or move work to another device.",
            device=device,
            limit=limit,
            in_use=used,
            requested=nbytes,
        )

    def set_limit(self, index: int, nbytes: int | None) -> None:
        if nbytes is not None and (isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes <= 0):
            raise ValueError(f"memory limit for {self._label}:{index} must be a positive int of bytes or None, got {nbytes!r}")
        self.limit[index] = nbytes

    def stats(self, index: int) -> MemoryStats:
        return MemoryStats(f"{self._label}:{index}", self.in_use[index], self.peak[index], self.limit[index], self.count[index])
