"""Per-device byte accounting with optional limits, shared by every backend.

The core charges a device when a tensor that owns a buffer is created on it and releases the
bytes when that tensor is freed. Views (a slice, a reshape that shares memory) charge nothing and
keep the owning tensor alive, so a buffer is counted exactly once for as long as anything uses
it. An allocation that would pass the limit raises before a tensor exists, so existing tensors
stay intact.

Concurrency: the hot path (``Tensor`` creation and ``__del__``) updates a ``DeviceMemory`` with
straight-line attribute arithmetic on ints and no calls in between. On CPython 3.11+ with the
GIL a thread switch only happens at calls and backward jumps, so these updates cannot interleave;
a ``threading.Lock`` here cost ~0.5 µs per op (measured by benchmarks/dispatch.py), more than the
whole dispatch budget. The slow paths below still take the lock.
"""

from __future__ import annotations

import _thread
import sys
from typing import NamedTuple, final

from neurenix_core.errors import OutOfMemoryError

__all__ = ["UNLIMITED", "DeviceMemory", "MemoryStats", "MemoryTracker"]

#: Limit value meaning "no limit": an int compare on the hot path instead of a None check.
UNLIMITED = sys.maxsize


# A NamedTuple, not a dataclass: this module is imported by `import neurenix_core`, and
# creating a dataclass costs ~2 ms there.
class MemoryStats(NamedTuple):
    """One device's accounting: bytes held by live tensors (``in_use``), the most held since start
    (``peak``), the limit (None: unlimited) and ``allocations``, the live tensors (views included)."""

    device: str
    in_use: int
    peak: int
    limit: int | None
    allocations: int

    def as_dict(self) -> dict[str, int | str | None]:
        return {"device": self.device, "in_use": self.in_use, "peak": self.peak, "limit": self.limit, "allocations": self.allocations}


@final
class DeviceMemory:
    """The counters of one device. Tensors hold a reference to it (through their placement)."""

    __slots__ = ("count", "in_use", "label", "limit", "peak")

    def __init__(self, label: str) -> None:
        self.label = label
        self.in_use = 0
        self.peak = 0
        self.limit = UNLIMITED
        self.count = 0

    def refuse(self, nbytes: int) -> OutOfMemoryError:
        """The error for an allocation of ``nbytes`` that does not fit under the limit."""
        limit, used = self.limit, self.in_use
        return OutOfMemoryError(
            f"{self.label}: allocating {nbytes} bytes would exceed the memory limit of {limit} bytes "
            f"({used} bytes in use). Free tensors, raise the limit with nx.set_memory_limit('{self.label}', n) "
            f"or move work to another device.",
            device=self.label,
            limit=limit,
            in_use=used,
            requested=nbytes,
        )

    def charge(self, nbytes: int) -> None:
        used = self.in_use + nbytes
        if used > self.limit:
            raise self.refuse(nbytes)
        self.in_use = used
        self.count += 1
        self.peak = max(self.peak, used)

    def release(self, nbytes: int) -> None:
        self.in_use -= nbytes
        self.count -= 1


@final
class MemoryTracker:
    """The ``DeviceMemory`` of each device index of one backend."""

    __slots__ = ("_label", "_lock", "devices")

    def __init__(self, label: str, device_count: int) -> None:
        self._label = label
        self.devices = [DeviceMemory(f"{label}:{i}") for i in range(device_count)]
        self._lock = _thread.allocate_lock()  # what threading.Lock() returns, without importing threading

    def _device(self, index: int) -> DeviceMemory:
        if not 0 <= index < len(self.devices):
            from neurenix_core.errors import DeviceNotFoundError

            raise DeviceNotFoundError(f"{self._label}:{index} does not exist: {self._label} has {len(self.devices)} device(s)")
        return self.devices[index]

    def charge(self, index: int, nbytes: int) -> None:
        with self._lock:
            self._device(index).charge(nbytes)

    def release(self, index: int, nbytes: int) -> None:
        with self._lock:
            self._device(index).release(nbytes)

    def check(self, index: int, nbytes: int) -> None:
        """Raise OutOfMemoryError if ``nbytes`` more would pass the limit (call before allocating)."""
        dm = self._device(index)
        if dm.in_use + nbytes > dm.limit:
            raise dm.refuse(nbytes)

    def set_limit(self, index: int, nbytes: int | None) -> None:
        if nbytes is not None and (isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes <= 0):
            from neurenix_core.errors import ConfigurationError

            raise ConfigurationError(f"memory limit for {self._label}:{index} must be a positive int of bytes or None, got {nbytes!r}")
        self._device(index).limit = UNLIMITED if nbytes is None else nbytes

    def stats(self, index: int) -> MemoryStats:
        dm = self._device(index)
        limit = None if dm.limit == UNLIMITED else dm.limit
        return MemoryStats(dm.label, dm.in_use, dm.peak, limit, dm.count)

    def reset_peak(self, index: int) -> None:
        dm = self._device(index)
        dm.peak = dm.in_use
