"""Saves that replace what they save as a whole, or not at all (docs/saving.md).

Every save of the core goes through here: model files and weights files (:func:`replace_file`),
compiled artifacts and checkpoints (:func:`replace_folder`). The new version is written beside
the target under a staging name, made durable (every file and folder fsynced), then swapped in by
one rename:

* a file: ``os.replace(staging, target)``, atomic on every POSIX filesystem;
* a folder that does not exist yet: ``rename(staging, target)``;
* a folder that exists: ``renameat2(staging, target, RENAME_EXCHANGE)`` (Linux 3.15+; ext4, xfs,
  btrfs, tmpfs, f2fs, overlayfs) swaps the two names in one step, so the target is the complete
  old folder before it and the complete new one after it; the old one, now under the staging name,
  is then removed;
* a folder on a filesystem that cannot exchange (NFS, most FUSE filesystems: EINVAL): the target is
  renamed to a backup name, the staging folder to the target, then the backup is removed. A kill
  between those two renames leaves no target but a complete backup; :func:`settled`, which every
  loader and every folder save calls first, renames the backup back.

A process killed at any instruction therefore leaves the previous version loadable (or the new
one, once its swap ran) and at most a staging file or folder, never a mix. Staging names carry
the writer's pid and host, ``.<name>.nx<pid>-<random>-<host>.tmp`` (``.old`` for a backup), so the
next save of the same target removes those whose process is gone (:func:`remove_stale`).

An ``OSError`` while saving (disk full, read-only filesystem, permission denied), or a runtime's
own error while the filesystem is full or read-only (OpenVINO's ``save_model`` raises
``RuntimeError: basic_ios::clear: iostream error`` on a full disk), becomes a
:class:`~neurenix_core.errors.SaveError` naming the target and the remedy, with the original as
``__cause__``; the staging file or folder is removed first.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import secrets
import shutil
import socket
import stat
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from neurenix_core.errors import NeurenixError, NeurenixWarning, SaveError
from neurenix_core.user_frame import user_stacklevel

__all__ = ["STALE_FOREIGN_S", "STALE_LEGACY_S", "remove_stale", "replace_file", "replace_folder", "settled", "write_file"]

#: Staging names of another host are removed when untouched this long (its pids cannot be checked).
STALE_FOREIGN_S: Final = 24 * 3600.0
#: Staging names written before they carried a pid (``.<name>.XXXXXXXX``), removed when untouched this long.
STALE_LEGACY_S: Final = 3600.0
#: A runtime's own error counts as "disk full" when less than this is free on the target's filesystem.
_FULL_BYTES: Final = 1 << 20
#: How long a loader waits for a save that is between its two renames (the no-exchange scheme only).
_SWAP_WAIT_S: Final = 5.0

_RENAME_EXCHANGE: Final = 2
_AT_FDCWD: Final = -100
#: renameat2's syscall number where libc lacks the wrapper (glibc < 2.28).
_SYS_RENAMEAT2: Final = {"x86_64": 316, "aarch64": 276, "riscv64": 276, "ppc64le": 357, "s390x": 347}
#: The errors with which a filesystem or kernel says it cannot exchange two names.
_NO_EXCHANGE: Final = frozenset({errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV})

#: Staging names this process is writing now: its own pid is alive, yet they are in use only while listed.
_ACTIVE: set[str] = set()


# ------------------------------------------------------------------------------------ names
def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname())[:40] or "host"


def _stem(target: Path) -> str:
    """``.<name>``, shortened with a digest so that a staging name stays within 255 bytes."""
    name = target.name
    if len(name.encode()) <= 120:
        return f".{name}"
    return f".{name[:80]}~{hashlib.sha256(name.encode()).hexdigest()[:16]}"


def _staging_name(target: Path, kind: str) -> Path:
    return target.with_name(f"{_stem(target)}.nx{os.getpid()}-{secrets.token_hex(4)}-{_host()}.{kind}")


@dataclass(frozen=True)
class _Staged:
    """A staging file or folder beside a target: who wrote it, and whether it is a backup."""

    path: Path
    pid: int | None  # None: written before staging names carried one
    host: str
    kind: str  # "tmp", "old" or "legacy"


def _staged(target: Path) -> list[_Staged]:
    stem = re.escape(_stem(target))
    ours = re.compile(rf"{stem}\.nx(\d+)-[0-9a-f]{{8}}-([A-Za-z0-9_-]*)\.(tmp|old)")
    # Before this module: tempfile.mkdtemp(prefix=".<name>.") and mkstemp(..., suffix=".tmp").
    legacy = re.compile(rf"{stem}\.[a-z0-9_]{{8}}(\.tmp)?")
    try:
        names = os.listdir(target.parent)
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        if m := ours.fullmatch(name):
            found.append(_Staged(target.parent / name, int(m.group(1)), m.group(2), m.group(3)))
        elif (m := legacy.fullmatch(name)) and (m.group(1) or _legacy_artifact(target.parent / name)):
            found.append(_Staged(target.parent / name, None, "", "legacy"))
    return found


#: What an artifact's staging folder held before this module (written in this order: parts first).
_LEGACY_ARTIFACT: Final = re.compile(r"parts|graph\.json|graph\.arrays|artifact\.json|\.graph\.arrays\.[a-z0-9_]{8}\.tmp")


def _legacy_artifact(folder: Path) -> bool:
    """Whether ``folder`` (named as ``tempfile.mkdtemp`` named staging folders) holds nothing but
    what a killed ``compiled.save`` of an earlier version left: never a user's own folder."""
    try:
        return folder.is_dir() and not folder.is_symlink() and all(_LEGACY_ARTIFACT.fullmatch(n) for n in os.listdir(folder))
    except OSError:
        return False


def _age_s(path: Path) -> float:
    try:
        return time.time() - path.lstat().st_mtime
    except FileNotFoundError:
        return 0.0


def _in_use(s: _Staged) -> bool:
    """Whether a save may still be writing ``s``: its process alive on this host (not a later
    process that reuses its pid), or, where that cannot be checked, touched recently."""
    if s.pid is None:
        return _age_s(s.path) < STALE_LEGACY_S
    if s.host != _host():
        return _age_s(s.path) < STALE_FOREIGN_S
    if s.pid == os.getpid():
        return s.path.name in _ACTIVE
    try:
        os.kill(s.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return not _started_after(s.pid, s.path)


def _started_after(pid: int, path: Path) -> bool:
    """Whether process ``pid`` started after ``path`` was last written: then it reuses the pid of the
    process that wrote it (a restarted container's job often gets the same small pid)."""
    try:
        ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime "))
        written = path.lstat().st_mtime
    except (OSError, IndexError, ValueError, StopIteration):
        return False  # no /proc: a live pid counts as the writer
    return boot + ticks / os.sysconf("SC_CLK_TCK") > written + 1.0


def remove_stale(target: str | os.PathLike[str]) -> list[Path]:
    """Remove the staging files and folders of earlier saves of ``target`` that nothing writes any
    more (see :func:`_in_use`); returns them. A backup is kept while ``target`` is missing: it is
    the previous version, which :func:`settled` restores."""
    target = Path(target)
    removed = []
    for s in _staged(target):
        if _in_use(s) or (s.kind == "old" and not os.path.lexists(target)):
            continue
        try:
            _remove(s.path)
        except OSError as exc:  # another user's leftover must not stop this save: said, and left
            warnings.warn(f"{s.path} is left from an interrupted save of {target.name} and could not be removed ({exc}); delete it "
                          "yourself", NeurenixWarning, stacklevel=user_stacklevel())
            continue
        removed.append(s.path)
    return removed


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


# ------------------------------------------------------------------------------------ loading
def settled(target: str | os.PathLike[str]) -> Path:
    """``target`` as a loader should read it: where a save on a filesystem without exchange was
    killed between its two renames, the backup it left (the previous version) is renamed back
    first. Returns ``target``, or the backup itself where it cannot be renamed (read-only)."""
    target = Path(target)
    deadline = time.monotonic() + _SWAP_WAIT_S
    while not os.path.lexists(target):
        backups = sorted((s for s in _staged(target) if s.kind == "old"), key=lambda s: _age_s(s.path))
        if not backups:
            return target
        if _in_use(backups[0]) and time.monotonic() < deadline:
            time.sleep(0.01)  # a live save is between its two renames (microseconds): the target comes back
            continue
        try:
            os.rename(backups[0].path, target)
        except FileNotFoundError:
            continue  # another process restored it (or its save finished) meanwhile
        except OSError as exc:
            if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                continue
            return backups[0].path  # cannot rename here (read-only): read the backup where it is
    return target


# ------------------------------------------------------------------------------------ saving
def write_file(target: str | os.PathLike[str], chunks: Iterable[bytes], *, what: str) -> Path:
    """Write ``chunks`` to the file ``target`` through :func:`replace_file`."""
    def write(staging: Path) -> None:
        with staging.open("xb") as fh:
            for chunk in chunks:
                fh.write(chunk)

    return replace_file(target, write, what=what)


def replace_file(target: str | os.PathLike[str], write: Callable[[Path], None], *, what: str) -> Path:
    """Replace the file ``target`` by what ``write(staging)`` writes to the path it is given:
    fsynced, then renamed over ``target`` in one step. ``what`` ("the model file") names it in
    errors. Returns ``target``."""
    target = Path(target)
    previous = target.exists()
    if target.parent.name in _ACTIVE and not previous:
        # A file of a folder this process is staging (an artifact's graph.arrays, a checkpoint's
        # model.npz): nothing reads it before the folder's swap, which fsyncs the whole tree.
        with _saving(target, what, previous):
            write(target)
        return target
    with _saving(target, what, previous):
        remove_stale(target)
        staging = _staging_name(target, "tmp")
        _ACTIVE.add(staging.name)
        try:
            with _discarding(staging, target, what, previous):
                write(staging)
                _keep_mode(staging, target)
                _fsync(staging)
                os.replace(staging, target)
        finally:
            _ACTIVE.discard(staging.name)
    _flush_folder(target, what)
    return target


def replace_folder(target: str | os.PathLike[str], write: Callable[[Path], None], *, what: str,
                   check: Callable[[Path], None] | None = None) -> Path:
    """Replace the folder ``target`` as a whole by what ``write(staging)`` writes into the (empty,
    existing) folder it is given. ``check(target)`` runs first and may refuse the target (a folder
    that holds something else). A symbolic link is followed: the folder it names is replaced.
    Returns ``target``."""
    target = Path(target)
    if target.is_symlink():
        target = Path(os.path.realpath(target))
    previous = target.exists()
    with _saving(target, what, previous):
        target.parent.mkdir(parents=True, exist_ok=True)
        settled(target)  # a save killed mid-swap (no-exchange scheme): the previous version first
        previous = target.exists()
        if check is not None:
            check(target)
        remove_stale(target)
        staging = _staging_name(target, "tmp")
        _ACTIVE.add(staging.name)
        try:
            with _discarding(staging, target, what, previous):
                staging.mkdir()
                write(staging)
                _keep_mode(staging, target)
                _fsync_tree(staging)
                old = _swap(staging, target)
        finally:
            _ACTIVE.discard(staging.name)
    _flush_folder(target, what)
    if old is not None:
        _remove_leftover(old, target)
    return target


def _swap(staging: Path, target: Path) -> Path | None:
    """Put ``staging`` at ``target`` in one step; returns where the old version now is, or None."""
    if not os.path.lexists(target):
        try:
            os.rename(staging, target)
            return None
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise  # else another save created it meanwhile: exchange with that one
    if _exchange(staging, target):
        return staging
    backup = _staging_name(target, "old")
    os.rename(target, backup)
    # The target is missing from here to the next rename: settled() restores the backup if killed.
    try:
        os.rename(staging, target)
    except BaseException:
        os.rename(backup, target)
        raise
    return backup


def _exchange(a: Path, b: Path) -> bool:
    """renameat2(a, b, RENAME_EXCHANGE); False where this kernel or filesystem cannot."""
    import ctypes
    import platform

    libc = ctypes.CDLL(None, use_errno=True)
    args = (_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if hasattr(libc, "renameat2"):
        rc = libc.renameat2(ctypes.c_int(args[0]), ctypes.c_char_p(args[1]), ctypes.c_int(args[2]), ctypes.c_char_p(args[3]),
                            ctypes.c_uint(args[4]))
    elif platform.machine() in _SYS_RENAMEAT2:
        rc = libc.syscall(ctypes.c_long(_SYS_RENAMEAT2[platform.machine()]), ctypes.c_int(args[0]), ctypes.c_char_p(args[1]),
                          ctypes.c_int(args[2]), ctypes.c_char_p(args[3]), ctypes.c_uint(args[4]))
    else:
        return False
    if rc == 0:
        return True
    code = ctypes.get_errno()
    if code in _NO_EXCHANGE:
        return False
    raise OSError(code, os.strerror(code), str(b))


def _flush_folder(target: Path, what: str) -> None:
    """After the swap, the rename made durable. Its failure is told as such: the new version is
    already in place, so "the previous one is unchanged" would be wrong."""
    try:
        _fsync(target.parent)
    except OSError as exc:
        err = SaveError(f"{what} was saved to {target}, but flushing its folder to the disk failed ({type(exc).__name__}: {exc}); "
                        "after a power cut the path may hold the previous version: check the disk, then save again")
        err.errno = exc.errno
        raise err from exc


def _remove_leftover(old: Path, target: Path) -> None:
    """The old version, swapped out: removed now, or by the next save if this fails (the new one
    is in place either way, so a failure here is a warning, not the save's error)."""
    try:
        _remove(old)
    except OSError as exc:
        warnings.warn(f"{target} was saved, but its previous version at {old} could not be removed ({exc}); the next save of "
                      f"{target.name} removes it, or delete it yourself", NeurenixWarning, stacklevel=user_stacklevel())


def _keep_mode(staging: Path, target: Path) -> None:
    """The new version gets the permission bits of the one it replaces (a file shared with a group
    stays shared, a private one private); a first save gets the umask's."""
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        return
    os.chmod(staging, mode)


def _fsync(path: Path) -> None:
    """Flush ``path`` (a file, or a folder's entries) to the disk: after a power cut the renamed
    name must not point at data that was never written."""
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if path.is_dir() else 0))
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno != errno.EINVAL:  # a filesystem without fsync for this kind of file (some FUSE)
            raise
    finally:
        os.close(fd)


def _fsync_tree(folder: Path) -> None:
    for root, _, files in os.walk(folder, topdown=False):
        for name in files:
            if not os.path.islink(os.path.join(root, name)):
                _fsync(Path(root, name))
        _fsync(Path(root))


# ------------------------------------------------------------------------------------ errors
@contextmanager
def _saving(target: Path, what: str, previous: bool) -> Iterator[None]:
    """Any ``OSError`` of the save outside the staging write (creating the parent folder, listing
    it, checking the target) as a SaveError naming ``target``."""
    try:
        yield
    except OSError as exc:
        if isinstance(exc, NeurenixError):
            raise
        raise _save_error(target, exc, what, previous, exc.errno) from exc


@contextmanager
def _discarding(staging: Path, target: Path, what: str, previous: bool) -> Iterator[None]:
    """Remove ``staging`` when the body fails, after reading the filesystem's state (a full disk
    has room again once the staging is gone); re-raise as a SaveError where the cause is the disk."""
    try:
        yield
    except BaseException as exc:
        code = _cause_errno(exc, target.parent) if isinstance(exc, Exception) else None
        if os.path.lexists(staging):
            try:
                _remove(staging)
            except OSError as cleanup:
                _note(exc, f"the staging {staging} could not be removed ({cleanup}); the next save of {target.name} removes it")
        if code is None:
            raise
        raise _save_error(target, exc, what, previous, code) from _root(exc)


def _note(exc: BaseException, text: str) -> None:
    """Said with the error that is raised (a note, Python 3.11+), or as a warning (3.10)."""
    if hasattr(exc, "add_note"):
        exc.add_note(text)
    else:
        warnings.warn(text, NeurenixWarning, stacklevel=user_stacklevel())


def _root(exc: BaseException) -> BaseException:
    """The error to keep as ``__cause__``: an inner save's own cause rather than its SaveError."""
    return exc.__cause__ if isinstance(exc, SaveError) and exc.__cause__ is not None else exc


def _cause_errno(exc: BaseException, folder: Path) -> int | None:
    """The errno behind a failed save: the OSError's own, one in its chain, or (for a runtime's
    error such as OpenVINO's ``basic_ios::clear``) what the filesystem says now: read-only or full.
    None: not a filesystem failure; the error is re-raised as it is."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return exc.errno
    if isinstance(exc, NeurenixError):
        return None  # raised on purpose (a refused model), whatever it was handling
    seen = exc.__cause__ or exc.__context__
    for _ in range(8):  # a runtime's error raised from an OSError (torch.export.save, safetensors)
        if seen is None:
            break
        if isinstance(seen, OSError) and seen.errno is not None:
            return seen.errno
        seen = seen.__cause__ or seen.__context__
    return _filesystem_state(folder)


def _filesystem_state(folder: Path) -> int | None:
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    if st.f_flag & os.ST_RDONLY:
        return errno.EROFS
    if _free_bytes(st) < _FULL_BYTES or (st.f_files and st.f_favail == 0):
        return errno.ENOSPC
    return None


def _free_bytes(st: os.statvfs_result) -> int:
    # root may write into the blocks reserved for it; everybody else gets f_bavail.
    return (st.f_bfree if os.geteuid() == 0 else st.f_bavail) * st.f_frsize


_REASONS: Final = {
    errno.ENOSPC: ("the disk is full", "free space there, or save to a folder on another disk"),
    errno.EDQUOT: ("the disk quota is exhausted", "free space within the quota, or save to a folder on another disk"),
    errno.EFBIG: ("the file is larger than the filesystem allows", "save to a folder on another filesystem"),
    errno.EROFS: ("the folder is on a read-only filesystem", "choose a writable folder"),
    errno.EACCES: ("permission denied", "choose a folder you can write to, or change the folder's permissions"),
    errno.EPERM: ("the operation is not permitted (permissions, or an immutable folder)",
                  "choose a folder you can write to, or change the folder's permissions"),
    errno.ENOENT: ("a folder of the path does not exist", "create the folder first, or check the path"),
    errno.ENOTDIR: ("a part of the path is a file, not a folder", "check the path"),
    errno.ENAMETOOLONG: ("the name is too long for the filesystem", "choose a shorter path"),
}


def _save_error(target: Path, exc: BaseException, what: str, previous: bool, code: int | None) -> SaveError:
    reason, remedy = _REASONS.get(code or 0, (os.strerror(code) if code else "the filesystem refused it", "check the folder and try again"))
    if code in (errno.ENOSPC, errno.EDQUOT):
        reason += _free_note(target.parent)
    kept = f"the previous {what.removeprefix('the ')} at {target} is unchanged" if previous else "nothing was written"
    original = " ".join(f"{type(_root(exc)).__name__}: {_root(exc)}".split())  # one line (the CLI prints one)
    err = SaveError(f"cannot save {what} to {target}: {reason}; {remedy}; {kept} (the system's error: {original[:300]})")
    err.errno = code  # so that `except OSError as e: e.errno == ENOSPC` still works
    return err


def _free_note(folder: Path) -> str:
    # Measured after the partial save was removed: what the user has to work with, not zero.
    try:
        return f" ({_free_bytes(os.statvfs(folder)):,} bytes free there once the partial save was removed)"
    except OSError:
        return ""
