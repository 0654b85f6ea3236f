"""The entry point scan, remembered while nothing it read has changed.

Finding the ``neurenix.backends`` entry points means listing every folder on ``sys.path`` and
opening the ``entry_points.txt`` of every distribution there (~80 files in a usual environment,
about 1 ms of ``import neurenix_core``). The answer changes only when a distribution is installed,
removed or upgraded, and installers do that by creating or removing a ``*.dist-info`` folder
directly inside a ``sys.path`` folder, which changes that folder's modification time: the same
signal Python's own import system trusts for its directory caches.

So the cache file (``entry-points.cache`` in the state folder, beside the crash journal) keeps, per
``sys.path`` (relative entries resolved against the current folder), the device, inode and
modification time of every ``sys.path`` entry and of every ``entry_points.txt`` that contributed,
and the entry points found. A lookup stats those (~25 ``stat`` calls) and any difference means a
fresh scan. Limits: an ``entry_points.txt`` edited in place in a distribution that had no
``neurenix.backends`` entry point is not seen until its folder changes (installers never edit in
place; deleting the cache file forces a scan). A result is only written when everything it
depends on is at least two seconds old, so that a change within one timestamp tick of the
filesystem cannot hide behind an equal time. Text with tabs or newlines (paths, names) is never
cached, and any unreadable, malformed or unwritable cache just means a scan: the cache only ever
saves time, it never decides what is installed. The state folder may be shared: a cache file is
believed only when it is a regular file of this user that nobody else may write (POSIX), and it
is written through ``O_EXCL | O_NOFOLLOW`` and an atomic rename.
"""

from __future__ import annotations

import os
import stat
import sys
import time
from typing import Final

from neurenix_core.plugins.entrypoints import EntryPoint, entry_points

__all__ = ["CACHE_FILE", "cached_entry_points"]

CACHE_FILE: Final = "entry-points.cache"
_HEADER: Final = "neurenix-entry-points 1"
#: Records kept (one per distinct sys.path: virtual environments, working folders).
_RECORDS: Final = 8
#: Anything modified this recently is not trusted to show a later change in its timestamp.
_SETTLE_NS: Final = 2_000_000_000
_MISSING: Final = "-"
_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)


def _uid() -> int:
    return os.getuid() if hasattr(os, "getuid") else 0

# A record: its key lines ("group", "path" and "file" lines) and its "ep" lines.
_Record = tuple[tuple[str, ...], tuple[str, ...]]


def cached_entry_points(group: str, state_dir: str | None) -> list[EntryPoint]:
    """``entry_points(group)`` for ``sys.path``, from the cache file when it is still valid."""
    if state_dir is None:
        return entry_points(group)
    path = os.path.join(state_dir, CACHE_FILE)
    entries = [os.path.abspath(entry or ".") for entry in sys.path]
    records = _read(path)
    for key, eps in records:
        if _valid(key, group, entries):
            return [_entry_point(line, group) for line in eps]
    found = entry_points(group)
    record = _record(group, entries, found)
    if record is not None:
        mine = _identity(record[0])
        _write(state_dir, path, [record, *(r for r in records if _identity(r[0]) != mine)])
    return found


def _identity(key: tuple[str, ...]) -> tuple[str, ...]:
    """The group and the sys.path folders of a record, without their stamps: one record each."""
    return tuple(line.rsplit("\t", 1)[0] if line.startswith("path\t") else line for line in key if not line.startswith("file\t"))


def _stamp(path: str) -> tuple[str, int]:
    """``"dev:ino:mtime_ns:size"`` of ``path`` (or ``-`` when it is missing) and its mtime."""
    try:
        st = os.stat(path)
    except OSError:
        return _MISSING, 0
    return f"{st.st_dev}:{st.st_ino}:{st.st_mtime_ns}:{st.st_size}", st.st_mtime_ns


def _valid(key: tuple[str, ...], group: str, entries: list[str]) -> bool:
    if len(key) < len(entries) + 1 or key[0] != f"group\t{group}":
        return False
    for line, entry in zip(key[1:], entries):
        kind, path, stamp = line.split("\t")
        if kind != "path" or path != entry or stamp != _stamp(path)[0]:
            return False
    for line in key[len(entries) + 1:]:
        kind, path, stamp = line.split("\t")
        if kind != "file" or stamp != _stamp(path)[0]:
            return False
    return True


def _entry_point(line: str, group: str) -> EntryPoint:
    _, name, value, dist, version, folder = line.split("\t")
    return EntryPoint(name, value, group, None if dist == _MISSING else dist, None if version == _MISSING else version, folder)


def _record(group: str, entries: list[str], found: list[EntryPoint]) -> _Record | None:
    """The cache record of a fresh scan, or None when it must not be cached."""
    key = [f"group\t{group}"]
    newest = 0
    for entry in entries:
        stamp, mtime = _stamp(entry)
        key.append(f"path\t{entry}\t{stamp}")
        newest = max(newest, mtime)
    eps = []
    for ep in found:
        if ep.folder is None:
            return None
        stamp, mtime = _stamp(os.path.join(ep.folder, "entry_points.txt"))
        key.append(f"file\t{os.path.join(ep.folder, 'entry_points.txt')}\t{stamp}")
        newest = max(newest, mtime)
        if _MISSING in (ep.dist_name, ep.dist_version):
            return None  # would read back as "unknown"
        dist = _MISSING if ep.dist_name is None else ep.dist_name
        version = _MISSING if ep.dist_version is None else ep.dist_version
        eps.append("\t".join(("ep", ep.name, ep.value, dist, version, ep.folder)))
    text = "".join(key) + "".join(eps)
    if "\n" in text or "\r" in text or newest > time.time_ns() - _SETTLE_NS:
        return None
    if any(line.count("\t") != (2 if not line.startswith("ep\t") else 5) for line in (*key[1:], *eps)):
        return None  # a tab inside a path or a name would make the line ambiguous
    return tuple(key), tuple(eps)


def _read(path: str) -> list[_Record]:
    # NEURENIX_STATE_DIR may name a shared folder: only a regular file of this user that nobody
    # else may write is believed (it names the modules this process will import).
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
    except OSError:  # no cache yet, or a symlink: a scan answers
        return []
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != _uid() or st.st_mode & 0o022:
            return []
        with os.fdopen(os.dup(fd), encoding="utf-8") as fh:
            lines = fh.read().split("\n")
    except (OSError, UnicodeError):  # unreadable: a scan answers
        return []
    finally:
        os.close(fd)
    if not lines or lines[0] != _HEADER:
        return []
    records: list[_Record] = []
    key: list[str] = []
    eps: list[str] = []
    for line in lines[1:]:
        if line == "end":
            if key:
                records.append((tuple(key), tuple(eps)))
            key, eps = [], []
        elif line.startswith("ep\t") and line.count("\t") == 5:
            eps.append(line)
        elif line.startswith(("group\t", "path\t", "file\t")) and line.count("\t") == (1 if line.startswith("group\t") else 2):
            key.append(line)
        elif line:
            return []  # not a file this version wrote: ignore it all
    return records


def _write(state_dir: str, path: str, records: list[_Record]) -> None:
    body = "".join("\n".join((*key, *eps, "end")) + "\n" for key, eps in records[:_RECORDS])
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(state_dir, mode=0o700, exist_ok=True)
        # O_EXCL | O_NOFOLLOW: a planted file or symlink in a shared folder is never written through.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(f"{_HEADER}\n{body}")
        os.replace(tmp, path)  # readers see the old file or the new one, never half of one
    except FileExistsError:  # another import of this process id is writing (or a planted file): leave it
        return
    except (OSError, UnicodeError):
        # A read-only or full state folder: the next import scans again, which is only slower.
        try:
            os.unlink(tmp)
        except OSError:
            pass
