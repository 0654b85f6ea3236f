"""Did a plugin change ``os.environ`` or ``sys.path`` while its code ran at import?

The core reads its own configuration (NEURENIX_*) before importing any plugin, so a plugin cannot
change it for this process; but other libraries read the environment later (``JAX_PLATFORMS``,
``CUDA_VISIBLE_DEVICES``, ``LD_LIBRARY_PATH`` for child processes) and ``sys.path`` decides what
every later ``import`` finds. Such a change is not undone (the plugin may rely on it) but recorded
as a warning on the plugin, visible in ``neurenix doctor``. Values are never shown: they may be
secrets. ``os.putenv`` and C-level ``setenv`` do not update ``os.environ`` and are not seen.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Final

__all__ = ["Snapshot", "changes", "snapshot"]

_SHOWN: Final = 8  # names listed per kind of change; the rest are counted

Snapshot = tuple[dict[Any, Any], list[str]]


def snapshot() -> Snapshot:
    """The environment and ``sys.path`` now (a C-level dict copy: a few microseconds)."""
    data = getattr(os.environ, "_data", None)  # CPython's encoded mapping: copied without decoding
    return (dict(data) if isinstance(data, dict) else dict(os.environ), list(sys.path))


def changes(before: Snapshot, after: Snapshot) -> list[str]:
    """Sentences describing what changed between two snapshots; [] when nothing did."""
    (env0, path0), (env1, path1) = before, after
    out: list[str] = []
    if env0 != env1:
        added = [_key(k) for k in env1.keys() - env0.keys()]
        removed = [_key(k) for k in env0.keys() - env1.keys()]
        changed = [_key(k) for k in env0.keys() & env1.keys() if env0[k] != env1[k]]
        parts = [f"{verb} {_names(keys)}" for verb, keys in (("set", added), ("changed", changed), ("removed", removed)) if keys]
        own = sorted(k for k in added + changed + removed if k.startswith("NEURENIX_"))
        tail = (
            f" ({', '.join(own)}: neurenix read its configuration before importing plugins, so this"
            " process is unaffected; nx.rediscover() would read the new value)" if own else ""
        )
        out.append(f"changed os.environ: {'; '.join(parts)}{tail}")
    if path0 != path1:
        added = [p for p in path1 if p not in path0]
        removed = [p for p in path0 if p not in path1]
        parts = [f"{verb} {_names(items)}" for verb, items in (("added", added), ("removed", removed)) if items]
        out.append(f"changed sys.path: {'; '.join(parts) or 'reordered it'}")
    return out


def _key(key: Any) -> str:
    return key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key)


def _names(items: list[str]) -> str:
    items = sorted(items)
    more = f" and {len(items) - _SHOWN} more" if len(items) > _SHOWN else ""
    return ", ".join(items[:_SHOWN]) + more
