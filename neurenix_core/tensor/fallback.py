"""The fallback policy for ops a backend does not run natively: error | warn | allow.

A fallback copies the operands to the host, runs the CPU backend's op and copies the result back
to the *same* device, so the user's tensor never silently changes device. Every fallback is
counted; ``warn`` warns once per (op, backend).
"""

from __future__ import annotations

import _thread
import contextlib
import contextvars
import warnings
from collections import Counter
from collections.abc import Iterator

from neurenix_core.config import FALLBACK_POLICIES, inspect_config
from neurenix_core.errors import ConfigurationError, FallbackError, NeurenixWarning
from neurenix_core.kwargs import strict_kwargs
from neurenix_core.user_frame import user_stacklevel

__all__ = ["FallbackWarning", "fallback_policy", "fallback_stats", "get_fallback_policy", "record", "reset_fallback_stats", "set_fallback_policy"]


class FallbackWarning(NeurenixWarning):
    """An op ran on the host CPU because the device's backend does not run it natively."""


# The initial policy; an unusable NEURENIX_FALLBACK reads as 'warn' here and is raised as a
# ConfigurationError by discovery (state.initialize), the one place configuration errors surface.
_global: str = inspect_config().config.fallback
_context: contextvars.ContextVar[str | None] = contextvars.ContextVar("neurenix_fallback", default=None)
_stats: Counter[tuple[str, str]] = Counter()
_warned: set[tuple[str, str]] = set()
_lock = _thread.allocate_lock()  # what threading.Lock() returns, without importing threading (~0.5 ms)


def _check(policy: str) -> str:
    if policy not in FALLBACK_POLICIES:
        raise ConfigurationError(f"unknown fallback policy {policy!r}: use one of {', '.join(FALLBACK_POLICIES)}")
    return policy


def get_fallback_policy() -> str:
    return _context.get() or _global


@strict_kwargs("nx.set_fallback_policy")
def set_fallback_policy(policy: str) -> None:
    """Set the process-wide policy (``NEURENIX_FALLBACK`` sets the initial one)."""
    global _global
    _global = _check(policy)


@contextlib.contextmanager
@strict_kwargs("nx.fallback_policy")
def fallback_policy(policy: str) -> Iterator[str]:
    """``with nx.fallback_policy("error"):`` the policy inside the block."""
    token = _context.set(_check(policy))
    try:
        yield policy
    finally:
        _context.reset(token)


def record(op: str, backend: str, device: str) -> None:
    """Apply the policy to one fallback of ``op`` on ``backend``: raise, warn once, or count."""
    policy = get_fallback_policy()
    if policy == "error":
        raise FallbackError(
            f"{op} is not native on {device} (backend {backend}) and the fallback policy is 'error'. "
            f"Allow host fallback with nx.fallback_policy('allow') or NEURENIX_FALLBACK=allow, "
            f"or move the tensors explicitly with .to('cpu')."
        )
    key = (backend, op)
    with _lock:
        _stats[key] += 1
        first = key not in _warned
        _warned.add(key)
    if policy == "warn" and first:
        warnings.warn(
            f"{op} is not native on {device} (backend {backend}); it ran on the host CPU and the result "
            f"was copied back to {device}. Silence with NEURENIX_FALLBACK=allow; forbid with NEURENIX_FALLBACK=error.",
            FallbackWarning,
            stacklevel=user_stacklevel(),  # the user's line, whichever operator, function or kernel got here
        )


def fallback_stats() -> dict[str, dict[str, int]]:
    """``{backend: {op: count}}`` of every fallback in this process."""
    out: dict[str, dict[str, int]] = {}
    with _lock:
        for (backend, op), n in sorted(_stats.items()):
            out.setdefault(backend, {})[op] = n
    return out


def reset_fallback_stats() -> None:
    with _lock:
        _stats.clear()
        _warned.clear()
