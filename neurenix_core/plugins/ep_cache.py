"""The entry point scan, remembered per ``sys.path`` folder while nothing it read has changed.

Finding the ``neurenix.backends`` entry points means listing every folder on ``sys.path`` and
opening the ``entry_points.txt`` of every distribution there (~80 files in a usual environment,
about 1 ms of ``import neurenix_core``). A folder's answer changes only when a distribution in it
is installed, removed or upgraded, and installers do that by creating or removing a
``*.dist-info`` folder directly inside it, which changes the folder's modification time: the same
signal Python's own import system trusts for its directory caches.

So the cache file (``entry-points.cache`` in the state folder, beside the crash journal) keeps one
record per ``sys.path`` folder: its device, inode, modification time and size, the name and stamp
of every distribution folder in it, the stamp of every ``entry_points.txt`` that has the group,
and those entry points. A lookup stats each ``sys.path`` folder and each contributing file (~25
``stat`` calls); a folder whose stamp changed (the current folder of ``python -c``, where files
come and go) is listed again, and when its distribution folders are the same ones with the same
stamps its record stands. Only a folder whose distributions changed is scanned again; the winners
across folders (first distribution of a name on ``sys.path``) are picked exactly as a full scan
picks them (``entrypoints.combine``). Records are per folder, so a new working folder or virtual
environment adds its own folders and reuses the rest.

A stamp is only trusted when it is at least two seconds old, so that a change within one timestamp
tick of the filesystem cannot hide behind an equal time: a recently changed folder is recorded as
"always list it", and a folder with a recently changed distribution is not recorded. Limit: an
``entry_points.txt`` edited in place (no new file, no rename) in a distribution that had no
``neurenix.backends`` entry point is not seen until its folder changes; installers never edit in
place, and deleting the cache file forces a scan.

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

from neurenix_core.plugins.entrypoints import (
    EntryPoint,
    FolderAnswer,
    combine,
    distribution_key,
    folder_answer,
    folder_entry_points,
)

__all__ = ["CACHE_FILE", "cached_entry_points"]

CACHE_FILE: Final = "entry-points.cache"
_HEADER: Final = "neurenix-entry-points 5"
#: Folder records kept: this process's, then the most recently written others.
_RECORDS: Final = 128
#: Anything modified this recently is not trusted to show a later change in its timestamp.
_SETTLE_NS: Final = 2_000_000_000
_MISSING: Final = "-"
#: Recorded for a folder changed too recently to trust its stamp: its distributions are always listed.
_RECENT: Final = "?"
_METADATA: Final = (".dist-info", ".egg-info")
_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)
#: Tabs per line kind: a line with another count (a tab inside a field) is never written or read.
_TABS: Final = {"folder": 3, "dist": 3, "file": 2, "ep": 5, "keys": 1}

#: What one folder's record says (``entrypoints.FolderAnswer``).
_Answer = FolderAnswer


class _Folder:
    """One ``sys.path`` folder's record, kept as text and split into lines only when a lookup
    needs it (the cache file holds up to ``_RECORDS`` folders; one import reads a handful).

    Lines in order: ``file`` and ``ep`` lines (the distributions with entry points of the group
    that are the first of their key in the folder), one ``keys`` line (every distribution's key
    in scan order, each after a ``/``: folder names cannot hold one), then a ``dist`` line per
    distribution folder, read only when the folder's own stamp changed.
    """

    __slots__ = ("_body", "_lines", "group", "path", "stamp")

    def __init__(self, path: str, group: str, stamp: str, lines: list[str] | None = None, body: str = "") -> None:
        self.path = path
        self.group = group
        self.stamp = stamp
        self._body = body
        self._lines = lines

    @property
    def lines(self) -> list[str]:
        if self._lines is None:
            self._lines = self._body.split("\n") if self._body else []
        return self._lines

    def text(self) -> str:
        return "\n".join((f"folder\t{self.path}\t{self.group}\t{self.stamp}", *self.lines, "end")) + "\n"


def cached_entry_points(group: str, state_dir: str | None) -> list[EntryPoint]:
    """``entry_points(group)`` for ``sys.path``, from the cache file where it is still valid."""
    if state_dir is None:
        return combine(folder_answer(folder_entry_points(entry, group)) for entry in sys.path)
    path = os.path.join(state_dir, CACHE_FILE)
    records = _read(path)
    answers: list[_Answer] = []
    mine: dict[str, _Folder] = {}
    changed = False
    for entry in sys.path:
        folder = os.path.abspath(entry or ".")
        record = records.get((folder, group))
        answer = None if record is None else _answer(record, group)
        if answer is None or record is None:
            answer, record = _scan(folder, group)
            changed = changed or record is not None  # a stale record left in the file fails its check again
        answers.append(answer)
        if record is not None:
            mine[folder] = record
    if changed:
        others = [r for (folder, g), r in records.items() if (g != group or folder not in mine) and _well_formed(r)]
        _write(state_dir, path, [*mine.values(), *others])
    return combine(answers)


def _stamp(path: str) -> tuple[str, int]:
    """``"dev:ino:mtime_ns:size"`` of ``path`` (or ``-`` when it is missing) and its mtime."""
    try:
        st = os.stat(path)
    except OSError:
        return _MISSING, 0
    return f"{st.st_dev}:{st.st_ino}:{st.st_mtime_ns}:{st.st_size}", st.st_mtime_ns


def _metadata_names(folder: str) -> list[str]:
    try:
        return sorted(n for n in os.listdir(folder) if n.endswith(_METADATA))
    except OSError:  # a zip or a missing folder: no distribution folders
        return []


def _answer(record: _Folder, group: str) -> _Answer | None:
    """The record's answer when the folder still holds what it recorded, else None (also for a
    line this version does not write: the unpacking below checks each line's field count)."""
    lines = record.lines
    # A folder that changed (or is too recent to tell) still stands if its distributions did not.
    changed = record.stamp == _RECENT or record.stamp != _stamp(record.path)[0]
    if changed and _listing(record.path) != [line[5:] for line in lines if line.startswith("dist\t")]:
        return None
    eps: list[tuple[str, list[EntryPoint]]] = []
    try:
        for line in lines:
            if line.startswith("ep\t"):
                _, name, ep_name, value, dist, version = line.split("\t")
                key = distribution_key(name)
                if not eps or eps[-1][0] != key:
                    eps.append((key, []))
                eps[-1][1].append(EntryPoint(
                    ep_name, value, group, None if dist == _MISSING else dist, None if version == _MISSING else version,
                    os.path.join(record.path, name),
                ))
            elif line.startswith("file\t"):
                _, name, stamp = line.split("\t")
                if _stamp(os.path.join(record.path, name, "entry_points.txt"))[0] != stamp:
                    return None
            elif line.startswith("keys\t"):
                keys = line[5:].split("/")[1:]
                return (keys, eps) if all(key in keys for key, _ in eps) else None
            else:
                return None
    except ValueError:  # a field count this version does not write
        return None
    return None  # no keys line: not a record this version wrote


def _listing(folder: str) -> list[str]:
    """``name<TAB>key<TAB>stamp`` of every distribution folder in ``folder``, as records keep them."""
    return [f"{n}\t{distribution_key(n)}\t{_stamp(os.path.join(folder, n))[0]}" for n in _metadata_names(folder)]


def _scan(folder: str, group: str) -> tuple[_Answer, _Folder | None]:
    """Scan one folder; its record too, unless something in it changed too recently to cache."""
    # Stamps first, then the scan: a distribution installed in between is then newer than the
    # recorded stamps and is found by the next lookup (the other order could hide it).
    settled = time.time_ns() - _SETTLE_NS
    stamp, mtime = _stamp(folder)
    dists = []
    cacheable = True
    for name in _metadata_names(folder):
        dstamp, dmtime = _stamp(os.path.join(folder, name))
        cacheable = cacheable and dmtime <= settled
        dists.append(f"dist\t{name}\t{distribution_key(name)}\t{dstamp}")
    answer = folder_answer(folder_entry_points(folder, group))
    lines = []
    for _, eps in answer[1]:  # the distributions that can win, each with its entry points
        assert eps[0].folder is not None  # folder_entry_points names the dist-info folder it read
        name = os.path.basename(eps[0].folder)
        fstamp, fmtime = _stamp(os.path.join(folder, name, "entry_points.txt"))
        cacheable = cacheable and fmtime <= settled
        lines.append(f"file\t{name}\t{fstamp}")
        for ep in eps:
            if _MISSING in (ep.dist_name, ep.dist_version):
                cacheable = False  # would read back as "unknown"
            dist = _MISSING if ep.dist_name is None else ep.dist_name
            version = _MISSING if ep.dist_version is None else ep.dist_version
            lines.append(f"ep\t{name}\t{ep.name}\t{ep.value}\t{dist}\t{version}")
    lines.append("keys\t" + "".join(f"/{key}" for key in answer[0]))
    lines.extend(dists)
    record = _Folder(folder, group, _RECENT if mtime > settled else stamp, lines)
    if not cacheable or not _well_formed(record):
        return answer, None
    return answer, record


def _well_formed(record: _Folder) -> bool:
    """False when a tab or newline inside a path or a name would make the record ambiguous (never
    written), or a line is not one this version writes (never believed)."""
    head = f"folder\t{record.path}\t{record.group}\t{record.stamp}"
    return all(
        "\n" not in line and "\r" not in line and line.count("\t") == _TABS.get(line.split("\t", 1)[0], -1)
        for line in (head, *record.lines)
    )


def _read(path: str) -> dict[tuple[str, str], _Folder]:
    """The records of the cache file by (folder, group); {} when it is missing or not believed."""
    # NEURENIX_STATE_DIR may name a shared folder: only a regular file of this user that nobody
    # else may write is believed (it names the modules this process will import).
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
    except OSError:  # no cache yet, or a symlink: a scan answers
        return {}
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != _uid() or st.st_mode & 0o022:
            return {}
        with os.fdopen(os.dup(fd), encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeError):  # unreadable: a scan answers
        return {}
    finally:
        os.close(fd)
    head, _, body = text.partition("\n")
    if head != _HEADER or (body and not body.endswith("\nend\n")):
        return {}
    records: dict[tuple[str, str], _Folder] = {}
    for chunk in body[:-5].split("\nend\n") if body else ():
        first, _, rest = chunk.partition("\n")
        fields = first.split("\t")
        if len(fields) != 4 or fields[0] != "folder":
            return {}  # not a file this version wrote: ignore it all
        # The other lines are split and checked when the record is used or written back (_well_formed).
        records.setdefault((fields[1], fields[2]), _Folder(fields[1], fields[2], fields[3], body=rest))
    return records


def _write(state_dir: str, path: str, records: list[_Folder]) -> None:
    body = "".join(record.text() for record in records[:_RECORDS])
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


def _uid() -> int:
    return os.getuid() if hasattr(os, "getuid") else 0
