"""The crash journal: a plugin that kills the process at import is explained, and skipped, next time.

A probe runs in this process (a subprocess per import would cost tens of milliseconds), so a
third-party probe that calls ``os._exit`` or segfaults in ctypes without declaring a native probe
takes ``import neurenix_core`` down with it. Nothing can catch that; what the core can do is make
it happen at most once. Before a third-party plugin's code runs (import, register, manifest,
probe), a line naming it goes to this process's journal file; the line is closed when the code
returns. A process that dies inside plugin code leaves an open line behind; the next import finds
it, adds the plugin to the quarantine list, and the registry records it as failed without
importing it, with the phase, the time and the remedy (``neurenix doctor --retry NAME``).

Why a file per process, locked with ``flock``: several processes import neurenix at once (test
workers, data loaders); each writes only its own journal, and the kernel drops the lock when its
process dies however it dies, so "unlocked journal" means "owner gone" without trusting process
ids (which containers reuse at every start). Cost: nothing at all when no third-party plugin is
installed; otherwise one small file created and removed per import, plus one short ``write`` per
plugin phase (O_APPEND, no fsync: the note must survive the process, not the machine).

POSIX only (``fcntl.flock``); elsewhere :func:`open_journal` says why it is off and the registry
notes it.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable
from types import ModuleType
from typing import Final, final

__all__ = [
    "Entry",
    "Journal",
    "lift",
    "mark_seen",
    "open_journal",
    "quarantine_cause",
    "read_quarantine",
    "read_seen",
    "set_status",
    "supported",
]

_JOURNAL_PREFIX: Final = "journal-"
_QUARANTINE: Final = "quarantine.tsv"
# Third-party plugin versions whose import and probe returned in a first-run child (first_run.py).
_SEEN: Final = "seen.tsv"
_HEADER: Final = "neurenix-journal 1"
# One file per discovery: nx.rediscover() while an earlier journal is still held (an abandoned
# probe) must not flock the same file twice, which would block this process on itself.
_SERIAL: Final = itertools.count()


@final
class Entry:
    """One quarantined plugin: which distribution and version killed a process, in which phase, when."""

    __slots__ = ("abandoned", "at", "distribution", "name", "phase", "status", "version")

    def __init__(
        self, name: str, distribution: str, version: str, phase: str, at: str, abandoned: bool = False, status: str = ""
    ) -> None:
        self.name = name
        self.distribution = distribution
        self.version = version
        self.phase = phase
        self.at = at
        self.abandoned = abandoned
        #: How a first-run child ended ("exit status 7", "SIGSEGV", ...); "" when this process died
        #: itself (the journal of a dead process carries no exit status).
        self.status = status

    def matches(self, distribution: str | None, version: str | None) -> bool:
        # A new version of the distribution gets a fresh chance: upgrading is the usual fix.
        return (self.distribution, self.version) == (distribution or "-", version or "-")

    def line(self) -> str:
        fields = (self.name, self.distribution, self.version, self.phase, self.at, "abandoned" if self.abandoned else "", self.status)
        return "\t".join(fields) + "\n"

    def __repr__(self) -> str:
        return f"Entry(name={self.name!r}, distribution={self.distribution!r}, version={self.version!r}, phase={self.phase!r}, at={self.at!r})"


def quarantine_cause(entry: Entry) -> str:
    """The failure cause the registry records for a quarantined plugin."""
    what = f"killed the process during its {entry.phase} at {entry.at}"
    if entry.status:
        # The first-run child died, not the user's process (first_run.py).
        return (
            f"killed its first-run child process ({entry.status}) during its {entry.phase} at {entry.at}, "
            f"before it ran in this process; it is quarantined and not loaded. "
            f"Run `neurenix doctor --retry {entry.name}` after fixing (or upgrading) {entry.distribution}"
        )
    if entry.abandoned:
        what = (
            f"its {entry.phase} overran its deadline and was still running when the process died "
            f"without a normal exit at {entry.at}"
        )
    return f"{what}; it was not loaded again. Run `neurenix doctor --retry {entry.name}` after fixing (or upgrading) {entry.distribution}"


def _fcntl() -> ModuleType | None:
    """``fcntl``, imported only when a third-party plugin is installed (it costs ~0.15 ms)."""
    try:
        import fcntl
    except ImportError:  # Windows: no flock; the journal is off and doctor says so
        return None
    return fcntl


def supported() -> bool:
    """Whether journal and quarantine work here (they need ``fcntl.flock``: POSIX)."""
    return _fcntl() is not None


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@final
class Journal:
    """This process's journal file, open and locked until discovery ends (or the process exits)."""

    __slots__ = ("_abandoned", "_open", "fd", "path")

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self.fd = fd
        self._open: set[str] = set()
        self._abandoned: set[str] = set()

    def enter(self, name: str, distribution: str | None, version: str | None, phase: str) -> None:
        """Plugin ``name`` is about to run code in ``phase``."""
        self._open.add(name)
        self._write(f"+{name}\t{distribution or '-'}\t{version or '-'}\t{phase}\n")

    def leave(self, name: str) -> None:
        """Plugin ``name``'s code returned (or raised: a Python exception is no crash)."""
        self._open.discard(name)
        self._abandoned.discard(name)
        self._write(f"-{name}\n")

    def abandon(self, name: str) -> None:
        """Its probe overran the deadline and was left running in a daemon thread."""
        self._abandoned.add(name)
        self._write(f"~{name}\n")

    def finish(self) -> None:
        """Discovery is over: remove the journal, unless an abandoned probe is still running.

        That probe may still kill the process; the journal then stays until a normal exit.
        """
        if self._open:
            import atexit  # only when a probe was abandoned

            atexit.register(self.close)
            return
        self.close()

    def close(self) -> None:
        if self.fd < 0:
            return
        try:
            os.unlink(self.path)
        except OSError:
            pass  # already recovered by another process's cleanup: nothing to remove
        os.close(self.fd)
        self.fd = -1

    def _write(self, line: str) -> None:
        if self.fd >= 0:
            os.write(self.fd, line.encode("utf-8", "replace"))


def open_journal(state_dir: str | None) -> Journal | str:
    """This process's journal in ``state_dir``, or why there is none (a sentence for doctor)."""
    fcntl = _fcntl()
    if fcntl is None:
        return "the crash journal needs fcntl.flock (POSIX); a third-party probe that kills the process is not remembered on this platform"
    if state_dir is None:
        return "no per-user state folder (HOME unset): set NEURENIX_STATE_DIR to enable the crash journal"
    path = os.path.join(state_dir, f"{_JOURNAL_PREFIX}{os.getpid()}-{next(_SERIAL)}.log")
    try:
        os.makedirs(state_dir, mode=0o700, exist_ok=True)
        # O_NOFOLLOW: NEURENIX_STATE_DIR may name a shared folder; a planted symlink must not make
        # this truncate somebody else's file.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except OSError as exc:
        return f"crash journal disabled: cannot write {path} ({exc.strerror}); set NEURENIX_STATE_DIR to a writable folder"
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:  # a stale file of a reused process id, being recovered right now
        os.close(fd)
        return f"crash journal disabled for this import: {path} is locked ({exc.strerror})"
    os.write(fd, f"{_HEADER} {os.getpid()} {_now()}\n".encode())
    return Journal(path, fd)


# ---------------------------------------------------------------------- quarantine list
def read_quarantine(state_dir: str | None) -> dict[str, Entry]:
    """The quarantine list, after turning every journal left by a dead process into entries."""
    if state_dir is None or _fcntl() is None:
        return {}
    try:
        names = os.listdir(state_dir)
    except OSError:  # no state folder yet: nothing was ever journaled
        return {}
    stale = [os.path.join(state_dir, n) for n in names if n.startswith(_JOURNAL_PREFIX)]
    found = [e for path in stale for e in _recover(path)]
    if found:
        _update(state_dir, lambda entries: entries.update({e.name: e for e in found}))
    return _read(os.path.join(state_dir, _QUARANTINE))


def lift(state_dir: str | None, name: str) -> Entry | None:
    """Remove ``name`` from the quarantine list; the entry removed, or None when it was not there."""
    if state_dir is None or _fcntl() is None:
        return None
    removed: list[Entry] = []
    _update(state_dir, lambda entries: removed.extend(filter(None, [entries.pop(name, None)])))
    return removed[0] if removed else None


def set_status(state_dir: str, name: str, status: str) -> Entry | None:
    """Note how ``name``'s first-run child ended on its quarantine entry; the entry, or None."""
    noted: list[Entry] = []

    def change(entries: dict[str, Entry]) -> None:
        entry = entries.get(name)
        if entry is not None:
            entry.status = status
            noted.append(entry)

    _update(state_dir, change)
    return noted[0] if noted else None


# ---------------------------------------------------------------------- seen list
def read_seen(state_dir: str | None) -> dict[str, tuple[str, str]]:
    """name -> (distribution, version) of third-party plugins whose first run returned."""
    if state_dir is None:
        return {}
    try:
        with open(os.path.join(state_dir, _SEEN), encoding="utf-8", errors="replace") as fh:
            rows = [line.rstrip("\n").split("\t") for line in fh]
    except OSError:  # a fresh machine: nothing seen yet
        return {}
    return {r[0]: (r[1], r[2]) for r in rows if len(r) == 3}


def mark_seen(state_dir: str, name: str, distribution: str | None, version: str | None) -> None:
    """Remember that this version of ``name`` imported and probed without killing its child.

    One row per plugin name: an upgrade replaces the row, so the file never grows with history.
    """
    _update_file(state_dir, _SEEN, lambda rows: rows.update({name: (distribution or "-", version or "-")}), read_seen)


def _recover(path: str) -> list[Entry]:
    """Entries for the plugins a dead process was running; [] while the owner is alive."""
    fcntl = _fcntl()
    assert fcntl is not None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # removed meanwhile by its owner or another recovering process
        return []
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return []  # its process holds the lock: alive
        if not _same_file(fd, path):
            return []  # recovered and replaced while we waited: not ours to read
        with os.fdopen(os.dup(fd), encoding="utf-8", errors="replace") as fh:
            entries = _culprits(fh.read())
        os.unlink(path)
        return entries
    finally:
        os.close(fd)


def _same_file(fd: int, path: str) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except OSError:
        return False


def _culprits(text: str) -> list[Entry]:
    lines = text.splitlines()
    header = lines[0].split() if lines else []
    at = header[3] if len(header) == 4 and " ".join(header[:2]) == _HEADER else _now()
    spans: dict[str, tuple[str, str, str]] = {}
    abandoned: set[str] = set()
    for line in lines[1:]:
        mark, body = line[:1], line[1:]
        if mark == "+":
            fields = body.split("\t")
            if len(fields) == 4:
                spans[fields[0]] = (fields[1], fields[2], fields[3])
        elif mark == "-":
            spans.pop(body, None)
            abandoned.discard(body)
        elif mark == "~":
            abandoned.add(body)
    # A plugin whose code was running (not abandoned) is the one that killed the process; an
    # abandoned probe is blamed only when nothing else was running.
    running = [n for n in spans if n not in abandoned] or list(spans)
    return [Entry(n, *spans[n], at, abandoned=n in abandoned) for n in running]


def _read(path: str) -> dict[str, Entry]:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            rows = [line.rstrip("\n").split("\t") for line in fh]
    except OSError:  # no quarantine list: nothing ever crashed
        return {}
    # Six columns before first-run children existed; the seventh is the child's exit status.
    return {r[0]: Entry(r[0], r[1], r[2], r[3], r[4], abandoned=r[5] == "abandoned", status=r[6] if len(r) == 7 else "") for r in rows if len(r) in (6, 7)}


def _update(state_dir: str, change: Callable[[dict[str, Entry]], object]) -> None:
    """Read-modify-write the quarantine list under a lock on the folder, replaced atomically."""

    def lines(entries: dict[str, Entry]) -> list[str]:
        change(entries)
        return [e.line() for e in entries.values()]

    _rewrite(state_dir, os.path.join(state_dir, _QUARANTINE), lambda path: lines(_read(path)))


def _update_file(
    state_dir: str,
    file: str,
    change: Callable[[dict[str, tuple[str, str]]], object],
    read: Callable[[str | None], dict[str, tuple[str, str]]],
) -> None:
    def lines(_path: str) -> list[str]:
        rows = read(state_dir)
        change(rows)
        return ["\t".join((name, *rest)) + "\n" for name, rest in rows.items()]

    _rewrite(state_dir, os.path.join(state_dir, file), lines)


def _rewrite(state_dir: str, path: str, lines: Callable[[str], list[str]]) -> None:
    """Replace ``path`` with ``lines(path)`` under a lock on the folder, atomically."""
    fcntl = _fcntl()
    assert fcntl is not None
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    lock = os.open(state_dir, os.O_RDONLY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.writelines(lines(path))
        os.replace(tmp, path)
    finally:
        os.close(lock)
