"""``neurenix cache``: the persistent compile cache (``neurenix_core.graph.compile.cache``).

``list`` shows each entry (plugin, model fingerprint, size, age, last use; ``--json`` for
scripts), ``info`` the folder, the limit, the size in use, whether the cache is on, and what it
skips: files in ``entries/`` no process would load, with the reason (damaged, another key's
entry, another format, a FIFO, a folder), and folders moved aside into ``displaced/``. ``clear``
deletes every entry and runtime file (``--plugin NAME`` only that plugin's entries).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

__all__ = ["register"]


def register(sub: Any) -> None:
    """The ``neurenix.cli`` entry point: adds ``cache`` to the ``neurenix`` command."""
    p = sub.add_parser("cache", help="the persistent compile cache: list, info, clear")
    actions = p.add_subparsers(dest="action", required=True)
    ls = actions.add_parser("list", help="entries with plugin, model fingerprint, size and age")
    ls.add_argument("--json", action="store_true", help="machine-readable output")
    ls.set_defaults(func=cmd_list)
    info = actions.add_parser("info", help="folder, size limit, bytes in use, on or off")
    info.add_argument("--json", action="store_true", help="machine-readable output")
    info.set_defaults(func=cmd_info)
    clear = actions.add_parser("clear", help="delete the entries (every file in the cache folder without --plugin)")
    clear.add_argument("--plugin", help="only this plugin's entries (e.g. tpu, npu, edgetpu; an alias such as npu-openvino too)")
    clear.set_defaults(func=cmd_clear)


def _root() -> Any:
    from neurenix_core.graph.compile.cache import cache_root

    return cache_root()


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


def cmd_list(args: argparse.Namespace) -> int:
    from neurenix_core.graph.compile.cache import entries

    now = time.time()
    found = entries(_root())
    if args.json:
        print(json.dumps([{"key": e.key, "plugin": e.plugin, "fingerprint": e.fingerprint, "bytes": e.nbytes, "created": e.created,
                           "used": e.used, "device": e.meta.get("device"), "path": str(e.path)} for e in found], indent=2))
        return 0
    skipped = _skipped_note(_root())
    if not found:
        print("neurenix: the compile cache is empty" if _root() is not None else "neurenix: the compile cache is off (NEURENIX_COMPILE_CACHE=0)")
        if skipped:
            print(skipped)
        return 0
    from rich.table import Table

    from neurenix_core.cli.main import _console

    table = Table(title=f"neurenix compile cache ({len(found)} entries)")
    for col in ("key", "plugin", "device", "model fingerprint", "bytes", "age", "last used"):
        table.add_column(col, overflow="fold")
    for e in found:
        table.add_row(e.key[:12], e.plugin, str(e.meta.get("device", "")), e.fingerprint, f"{e.nbytes:,}", _age(now - e.created),
                      f"{_age(now - e.used)} ago")
    _console().print(table)
    if skipped:
        print(skipped)
    return 0


def _skipped_note(root: Any) -> str:
    """One line naming what ``list`` did not show, or ""."""
    from neurenix_core.graph.compile.cache import unusable

    n = 0 if root is None else len(unusable(root))
    return "" if not n else f"neurenix: {n} unusable entr{'y' if n == 1 else 'ies'} not listed (reasons: neurenix cache info)"


def cmd_info(args: argparse.Namespace) -> int:
    from neurenix_core.config import compile_cache_enabled, compile_cache_limit, read_config
    from neurenix_core.graph.compile.cache import displaced, entries, total_bytes, unusable

    root = _root()
    data: dict[str, Any] = {
        "enabled": compile_cache_enabled(),
        "folder": str(root) if root is not None else None,
        "state_dir": read_config().state_dir,
        "limit_bytes": compile_cache_limit(),
        "used_bytes": total_bytes(root) if root is not None else 0,
        "entries": len(entries(root)) if root is not None else 0,
        "unusable": [{"path": str(p), "reason": why} for p, why in (unusable(root) if root is not None else [])],
        "displaced": [str(p) for p in (displaced(root) if root is not None else [])],
    }
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    state = "on" if data["enabled"] else "off (NEURENIX_COMPILE_CACHE=0)"
    print(f"compile cache: {state}\nfolder: {data['folder']}\nentries: {data['entries']}\n"
          f"in use: {data['used_bytes']:,} bytes of {data['limit_bytes']:,} (NEURENIX_COMPILE_CACHE_MAX_BYTES)")
    if data["unusable"]:
        print(f"unusable entries: {len(data['unusable'])} (never loaded; the next compile of the model replaces each)")
        for u in data["unusable"]:
            print(f"  {Path(u['path']).name}: {u['reason']}")
    if data["displaced"]:
        print(f"displaced folders: {len(data['displaced'])} (found at an entry's path and moved aside; neurenix never deletes "
              "them: look and remove them yourself)")
        for d in data["displaced"]:
            print(f"  {d}")
    return 0


def cmd_clear(args: argparse.Namespace) -> int:
    from neurenix_core.graph.compile.cache import clear, entries

    root = _root()
    if root is None:
        print("neurenix: the compile cache is off (NEURENIX_COMPILE_CACHE=0); nothing cleared")
        return 0
    if args.plugin is None:
        freed = clear(root)
        print(f"neurenix: compile cache cleared ({freed:,} bytes freed in {root})")
        return 0
    from neurenix_core.plugins.state import registry

    record = registry().record_named(args.plugin)
    # Entries name the plugin as it was called when they were written (an older release: its alias).
    names = {args.plugin} if record is None else {n for n in (args.plugin, record.name, record.alias) if n}
    freed, n = 0, 0
    for e in entries(root):
        if e.plugin in names:
            e.path.unlink(missing_ok=True)
            freed, n = freed + e.nbytes, n + 1
    print(f"neurenix: {n} {args.plugin if record is None else record.name} entr{'y' if n == 1 else 'ies'} removed ({freed:,} bytes)")
    return 0
