"""The entry point scan, remembered while nothing it read has changed.

Finding the ``neurenix.backends`` entry points means listing every folder on ``sys.path`` and
opening the ``entry_points.txt`` of every distribution there (~80 files in a usual environment,
about 1 ms of ``import neurenix_core``). The answer changes only when a distribution is installed,
removed or upgraded, and installers do that by creating or removing a ``*.dist-info`` folder
directly inside a ``sys.path`` folder, which changes that folder's modification time: the same
signal Python's own import system trusts for its directory caches.

So the cache file (``entry-points.cache`` in the state folder, beside the crash journal) keeps, per
``sys.path`` (relative entries resolved against the current folder), the device, inode,
modification time and size of every ``sys.path`` folder, of every distribution folder in it and of
every ``entry_points.txt`` that contributed, and the entry points found. A lookup stats the
``sys.path`` folders and the contributing files (~25 ``stat`` calls). A folder whose stamp changed
(the current folder of ``python -c``, where files come and go) is listed again: when its
distribution folders are still the same ones with the same stamps, the answer stands; any other
difference means a fresh scan.

A stamp is only trusted when it is at least two seconds old, so that a change within one
timestamp tick of the filesystem cannot hide behind an equal time: a recently changed ``sys.path``
folder is recorded as "always list it", and a result that depends on a recently changed
distribution is not cached at all. Limit: an ``entry_points.txt`` edited in place (no new file, no
rename) in a distribution that had no ``neurenix.backends`` entry point is not seen until its
folder changes; installers never edit in place, and deleting the cache file forces a scan.

Text with tabs or newlines (paths, names) is never cached, and an unreadable, malformed or
unwritable cache only means a scan: the cache saves time, it never decides what is installed. The
state folder may be shared: a cache file is believed only when it is a regular file of this user
that nobody else may write (POSIX), and it is written through ``O_EXCL | O_NOFOLLOW`` and an atomic
rename.
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
_HEADER: Final = "neurenix-entry-points 2"
#: Records kept (one per distinct sys.path: virtual environments, working folders).
_RECORDS: Final = 8
#: Anything modified this recently is not trusted to show a later change in its timestamp.
_SETTLE_NS: Final = 2_000_000_000
_MISSING: Final = "-"
_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)


def _uid() -> int:
    return os.getuid() if hasattr(os, "getuid") else 0


#: Recorded for a folder changed too recently to trust its stamp: its distributions are always listed.
_RECENT: Final = "?"
_METADATA: Final = (".dist-info", ".egg-info")

#: One record: the group, per sys.path folder (folder, stamp, its distribution folders as
#: ``name<TAB>stamp`` strings), the contributing entry_points.txt files with their stamps, and the
#: entry point lines.
_Folder = tuple[str, str, tuple[str, ...]]
_Record = tuple[str, tuple[_Folder, ...], tuple[tuple[str, str], ...], tuple[str, ...]]


def cached_entry_points(group: str, state_dir: str | None) -> list[EntryPoint]:
    """``entry_points(group)`` for ``sys.path``, from the cache file when it is still valid."""
    if state_dir is None:
        return entry_points(group)
    path = os.path.join(state_dir, CACHE_FILE)
    entries = [os.path.abspath(entry or ".") for entry in sys.path]
    chunks = _read(path)
    records: list[_Record] = []
    for chunk in chunks:  # most recent first: usually the first one is this process's
        record = _parse(chunk)
        if record is None:
            records = []  # not a file this version wrote: replace it all
            break
        if _valid(record, group, entries):
            return [_entry_point(line, group) for line in record[3]]
        records.append(record)
    # Stamps first, then the scan: a distribution installed in between is then newer than its
    # recorded folder stamp and is found by the next lookup (the other order could hide it).
    settled = time.time_ns() - _SETTLE_NS
    folders = [_folder(entry, settled) for entry in entries]
    found = entry_points(group)
    record = _record(group, folders, found, settled)
    if record is not None:
        mine = _identity(record)
        _write(state_dir, path, [record, *(r for r in records if _identity(r) != mine)])
    return found


def _identity(record: _Record) -> tuple[str, tuple[str, ...]]:
    """The group and the sys.path folders: one record each."""
    return record[0], tuple(f[0] for f in record[1])


def _stamp(path: str) -> tuple[str, int]:
    """``"dev:ino:mtime_ns:size"`` of ``path`` (or ``-`` when it is missing) and its mtime."""
    try:
        st = os.stat(path)
    except OSError:
        return _MISSING, 0
    return f"{st.st_dev}:{st.st_ino}:{st.st_mtime_ns}:{st.st_size}", st.st_mtime_ns


def _metadata_names(entry: str) -> list[str]:
    try:
        return sorted(n for n in os.listdir(entry) if n.endswith(_METADATA))
    except OSError:  # a zip or a missing folder: no distribution folders
        return []


def _distributions(entry: str) -> tuple[str, ...]:
    """``name<TAB>stamp`` of every distribution folder in ``entry``."""
    return tuple(f"{n}\t{_stamp(os.path.join(entry, n))[0]}" for n in _metadata_names(entry))


def _folder(entry: str, settled: int) -> _Folder | None:
    """What a record keeps of one sys.path folder; None when a distribution in it changed within
    the last two seconds (such a scan is not cached)."""
    stamp, mtime = _stamp(entry)
    dists = []
    for name in _metadata_names(entry):
        dstamp, dmtime = _stamp(os.path.join(entry, name))
        if dmtime > settled:
            return None
        dists.append(f"{name}\t{dstamp}")
    return entry, (_RECENT if mtime > settled else stamp), tuple(dists)


def _valid(record: _Record, group: str, entries: list[str]) -> bool:
    rgroup, folders, files, _ = record
    if rgroup != group or len(folders) != len(entries):
        return False
    for (entry, stamp, dists), current in zip(folders, entries):
        if entry != current:
            return False
        if stamp != _RECENT and stamp == _stamp(entry)[0]:
            continue
        if _distributions(entry) != dists:  # the folder changed: did its distributions?
            return False
    return all(_stamp(file)[0] == stamp for file, stamp in files)


def _entry_point(line: str, group: str) -> EntryPoint:
    _, name, value, dist, version, folder = line.split("\t")
    return EntryPoint(name, value, group, None if dist == _MISSING else dist, None if version == _MISSING else version, folder)


def _record(group: str, folders: list[_Folder | None], found: list[EntryPoint], settled: int) -> _Record | None:
    """The cache record of a fresh scan, or None when it must not be cached."""
    if any(f is None for f in folders):
        return None
    files: list[tuple[str, str]] = []
    eps: list[str] = []
    for ep in found:
        if ep.folder is None or _MISSING in (ep.dist_name, ep.dist_version):
            return None  # made in code, or a name that would read back as "unknown"
        file = os.path.join(ep.folder, "entry_points.txt")
        stamp, mtime = _stamp(file)
        if mtime > settled:
            return None
        files.append((file, stamp))
        dist = _MISSING if ep.dist_name is None else ep.dist_name
        version = _MISSING if ep.dist_version is None else ep.dist_version
        eps.append("\t".join(("ep", ep.name, ep.value, dist, version, ep.folder)))
    record: _Record = (group, tuple(f for f in folders if f is not None), tuple(files), tuple(eps))
    lines = _lines(record)
    if any("\n" in line or "\r" in line or line.count("\t") != _TABS[line.split("\t", 1)[0]] for line in lines):
        return None  # a tab or newline inside a path or a name would make the file ambiguous
    return record


#: Tabs per line kind: a line with more (a tab inside a field) is never written or read.
_TABS: Final = {"group": 1, "path": 2, "dist": 2, "file": 2, "ep": 5}


def _lines(record: _Record) -> list[str]:
    group, folders, files, eps = record
    out = [f"group\t{group}"]
    for entry, stamp, dists in folders:
        out.append(f"path\t{entry}\t{stamp}")
        out.extend(f"dist\t{d}" for d in dists)
    out.extend(f"file\t{file}\t{stamp}" for file, stamp in files)
    out.extend(eps)
    return out


def _parse(chunk: str) -> _Record | None:
    """One record from its lines; None when any line is not what this version writes."""
    lines = chunk.split("\n")
    if not lines[0].startswith("group\t") or lines[0].count("\t") != 1:
        return None
    folders: list[_Folder] = []
    dists: list[str] = []
    files: list[tuple[str, str]] = []
    eps: list[str] = []
    for line in lines[1:]:
        if line.startswith("dist\t") and folders and line.count("\t") == 2:
            dists.append(line[5:])  # kept as text: compared only when its folder changed
            continue
        if folders and dists:
            folders[-1] = (folders[-1][0], folders[-1][1], tuple(dists))
            dists = []
        kind, _, body = line.partition("\t")
        if line.count("\t") != _TABS.get(kind, -1) or kind in ("group", "dist"):
            return None
        if kind == "path":
            entry, stamp = body.split("\t")
            folders.append((entry, stamp, ()))
        elif kind == "file":
            file, stamp = body.split("\t")
            files.append((file, stamp))
        else:
            eps.append(line)
    if folders and dists:
        folders[-1] = (folders[-1][0], folders[-1][1], tuple(dists))
    return lines[0][6:], tuple(folders), tuple(files), tuple(eps)


def _read(path: str) -> list[str]:
    """The records of the cache file, as text (parsed one by one, only as far as needed)."""
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
            text = fh.read()
    except (OSError, UnicodeError):  # unreadable: a scan answers
        return []
    finally:
        os.close(fd)
    head, _, body = text.partition("\n")
    if head != _HEADER or (body and not body.endswith("end\n")):
        return []
    return [chunk for chunk in body.split("\nend\n") if chunk] if body else []


def _write(state_dir: str, path: str, records: list[_Record]) -> None:
    body = "".join("\n".join(_lines(record)) + "\nend\n" for record in records[:_RECORDS])
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
