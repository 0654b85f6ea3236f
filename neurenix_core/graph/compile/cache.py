"""The persistent compile cache: compiled models kept in the state folder across processes.

A plugin's compile hook asks :func:`cached` for its compiled form under a key made of the graph
fingerprint (structure and weights), the compile options that change the result (precision,
shapes, quantization plan, threads...), the plugin's and runtime's versions and the CPU (model
name and flags: code generated for AVX-512 must not reach a CPU without it). On a miss the plugin
builds, serializes (``dump``) and the bytes are stored; a later process ``load``s them instead of
lowering and compiling again. What the bytes are is the plugin's business: an OpenVINO compiled
blob (npu), a serialized ``jax.export`` module (tpu), ``.tflite`` bytes (edgetpu).
:func:`runtime_folder` gives a runtime its own folder inside the cache (JAX's persistent XLA cache).

Layout, under ``<state folder>/compile_cache/``::

    entries/<key>.nxc     one file per entry: magic, header length, JSON header, payload
    runtime/<name>/...    folders runtimes manage themselves (counted against the size limit)
    locks/<key>.lock      flock()ed while one process builds an entry (the others wait, then hit)
    .evict.lock           flock()ed while one process evicts
    displaced/<name>.<ns> a folder that stood at an entry's path, moved aside (not the cache's:
                          never evicted or cleared)

Safety: an entry is written to a temporary file and renamed over its name (readers see a whole
entry or none); the header carries the payload's SHA-256, checked on every read, so a truncated or
corrupted entry is deleted and compiled again (never loaded). A ``load`` that raises is treated the
same way. Before the payload is even read, the header must name the key asked for, this entry
format, this plugin and the versions the plugin passes in ``meta["versions"]``: another model's
entry copied onto a key, or one from another plugin version, is compiled again and replaced.
Anything at an entry's path that is not a regular file (a FIFO, a symbolic link, a folder) is
never opened for reading: it is skipped with its reason, and the fresh entry takes its name (a
folder that holds files is moved to ``displaced/``, never deleted). Size: after each store the oldest files (by last use: hits touch their entry) are deleted
until the folder is under ``NEURENIX_COMPILE_CACHE_MAX_BYTES`` (default 2 GiB).
``NEURENIX_COMPILE_CACHE=0`` turns the whole cache off (nothing read, nothing written).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import hashlib
import json
import os
import stat
import struct
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Final, Generic, TypeVar, cast

from neurenix_core.config import compile_cache_enabled, compile_cache_limit

__all__ = [
    "FORMAT",
    "CacheResult",
    "Entry",
    "cache_key",
    "cache_root",
    "cached",
    "clear",
    "cpu_identity",
    "displaced",
    "entries",
    "evict",
    "pack",
    "plan_fingerprint",
    "runtime_folder",
    "stats",
    "total_bytes",
    "unpack",
    "unusable",
]

T = TypeVar("T")

#: Bumped when the entry layout or the key's recipe changes: older entries then simply miss.
#: 2: the header holds the producing plugin's versions (``"versions"``), and a read checks the
#: header's key, format, plugin and versions against the ones asked for before the payload.
FORMAT: Final = 2
_MAGIC: Final = b"NXCC\x01"
_HEADER: Final = struct.Struct("<I")
#: How long a process waits for another one building the same entry before building it too.
_BUILD_WAIT_S: Final = 600.0
#: Where a folder found at an entry's path is moved, inside the cache folder (a rename there never
#: crosses a filesystem). Not the cache's: never counted, evicted or cleared.
_DISPLACED: Final = "displaced"

_counts_lock = threading.Lock()
_counts: dict[str, int] = {"hit": 0, "miss": 0, "corrupt": 0, "rejected": 0, "skipped": 0, "off": 0, "evicted": 0}

#: What :func:`CacheResult.line` says an unusable entry was, and what became of it when the fresh
#: compile was stored and when it could not be.
_UNUSABLE: Final[Mapping[str, tuple[str, str, str]]] = {
    "corrupt": ("was unusable", "deleted and compiled again", "deleted and compiled again, not stored"),
    "rejected": ("was not used", "compiled again and stored over it", "compiled again, not stored"),
    "skipped": ("was skipped", "compiled again and stored", "compiled again, not stored"),
}


@dataclass(frozen=True)
class CacheResult(Generic[T]):
    """What :func:`cached` returns: the compiled object and how it was obtained."""

    value: T
    #: "hit"; "miss" (built and stored); "corrupt" (a damaged entry, or one the runtime refused:
    #: deleted, built again); "rejected" (a whole entry, but of another key, format, plugin or
    #: version: built again and stored over it); "skipped" (not a regular file: never opened,
    #: built again and stored in its place); "off"
    state: str
    key: str
    seconds: float  # time spent loading (hit) or building and storing (miss)
    nbytes: int = 0
    reason: str = ""
    #: Why the built value could not be stored ("" when it was); the process keeps its value.
    store_error: str = ""

    def line(self) -> str:
        """One phrase for ``compiled.summary`` and the placement report."""
        short = self.key[:12]
        if self.state == "hit":
            return f"compile cache: hit, entry {short} ({self.nbytes:,} bytes) loaded in {self.seconds * 1e3:.0f} ms"
        if self.state == "off":
            return f"compile cache: off ({self.reason})"
        if self.state == "miss":
            if self.store_error:
                return f"compile cache: miss, compiled in {self.seconds * 1e3:.0f} ms, not stored ({self.store_error})"
            return f"compile cache: miss, compiled in {self.seconds * 1e3:.0f} ms and stored as entry {short} ({self.nbytes:,} bytes)"
        was, stored, unstored = _UNUSABLE[self.state]
        done = f"{unstored} ({self.store_error})" if self.store_error else stored
        return f"compile cache: entry {short} {was} ({self.reason}), {done}"


@dataclass(frozen=True)
class Entry:
    """One stored entry, as ``neurenix cache list`` shows it."""

    key: str
    plugin: str
    fingerprint: str
    nbytes: int
    created: float
    used: float
    path: Path
    meta: Mapping[str, Any]


# ---------------------------------------------------------------------------- where and whether
def cache_root(state_dir: str | None = None) -> Path | None:
    """The cache folder, or None when the cache is off or there is no state folder."""
    if not compile_cache_enabled():
        return None
    if state_dir is None:
        from neurenix_core.config import read_config

        state_dir = read_config().state_dir
    return None if not state_dir else Path(state_dir) / "compile_cache"


def _off_reason(state_dir: str | None) -> str:
    return "NEURENIX_COMPILE_CACHE=0" if not compile_cache_enabled() else "no state folder (set NEURENIX_STATE_DIR)"


def runtime_folder(name: str, state_dir: str | None = None) -> Path | None:
    """A folder a runtime fills itself inside the cache (counted against the size limit), or None
    when the cache is off."""
    root = cache_root(state_dir)
    if root is None:
        return None
    folder = root / "runtime" / name
    with contextlib.suppress(OSError):
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    return folder


# ---------------------------------------------------------------------------- the key
def cpu_identity() -> str:
    """CPU model name, logical CPU count and a hash of the feature flags (``/proc/cpuinfo``)."""
    from neurenix_core.benchkit import cpu_model

    flags = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as fh:
        flags = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("flags")), "")
    return f"{cpu_model()} x{os.cpu_count()} flags:{hashlib.sha256(flags.encode()).hexdigest()[:12]}"


def plan_fingerprint(plan: Any) -> str:
    """``QuantizationPlan.fingerprint()``, or "-" for None (a key part that is always a string)."""
    return "-" if plan is None else str(plan.fingerprint())


@functools.cache
def _code_digest(package: str) -> str:
    """A digest of the installed source of ``package``: each ``.py`` file under it, by relative
    path and content (a plugin's files: a few milliseconds, once per process); "-" where the
    package is not found."""
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return "-"
    digest = hashlib.sha256()
    for root in spec.submodule_search_locations:
        for path in sorted(Path(root).rglob("*.py")):
            digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def plugin_code(plugin: str) -> str:
    """The source digest of the package that registered ``plugin``: part of every entry's key, so
    a lowering changed without a version bump (an editable install, a patched wheel) compiles
    again instead of loading what the old code made. "-" for a name no plugin registered."""
    from neurenix_core.plugins.state import registry

    record = registry().record_named(plugin)
    return "-" if record is None else _code_digest(record.module_name.split(".")[0])


def cache_key(plugin: str, fingerprint: str, options: Mapping[str, Any], versions: Mapping[str, str]) -> str:
    """The entry's key: every input that can change the compiled bytes or their validity (the
    plugin's own source among them: ``plugin_code``)."""
    text = json.dumps(
        {"format": FORMAT, "plugin": plugin, "graph": fingerprint, "options": dict(options), "versions": dict(versions),
         "code": plugin_code(plugin), "cpu": cpu_identity()},
        sort_keys=True, default=repr,
    )
    return hashlib.sha256(text.encode()).hexdigest()[:40]


# ---------------------------------------------------------------------------- reading and writing
def _entry_path(root: Path, key: str) -> Path:
    return root / "entries" / f"{key}.nxc"


class _Skipped(Exception):
    """The path is not a regular file: never opened for reading (the message says what it is)."""


class _Rejected(Exception):
    """A whole entry, but not the one asked for: another key, format, plugin or version."""


#: What a path that is not a regular file is, for the reason a skip gives.
_KINDS: Final = ((stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"),
                 (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def _not_regular(mode: int) -> _Skipped:
    kind = next((name for is_kind, name in _KINDS if is_kind(mode)), "of an unknown kind")
    return _Skipped(f"{kind}, not a regular file")


def _open(path: Path) -> BinaryIO:
    """The file at ``path`` opened for reading; _Skipped when it is not a regular file.

    Checked before opening: opening a FIFO for reading waits for a writer (forever), opening a
    device may act on it, and a symbolic link may lead anywhere (``/dev/zero`` reads without end,
    a file of another user's). The cache writes regular files only, so it follows no link at an
    entry's path (a cache folder that is itself a link still works: only the last part is
    checked). O_NOFOLLOW, O_NONBLOCK and fstat cover a path swapped between the check and the
    open; O_NONBLOCK changes nothing for reads of a regular file.
    """
    mode = os.lstat(path).st_mode  # FileNotFoundError: there is no entry
    if not stat.S_ISREG(mode):
        raise _not_regular(mode)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _not_regular(stat.S_IFLNK) from exc
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(mode)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _read_header(fh: BinaryIO) -> dict[str, Any]:
    head = fh.read(len(_MAGIC) + _HEADER.size)
    if not head.startswith(_MAGIC) or len(head) < len(_MAGIC) + _HEADER.size:
        raise ValueError("not a compile cache entry (bad magic)")
    (n,) = _HEADER.unpack_from(head, len(_MAGIC))
    try:
        header = json.loads(fh.read(n))
    except ValueError as exc:
        raise ValueError(f"unreadable header ({exc})") from exc
    # A damaged entry is a ValueError whatever the damage: the caller deletes it and compiles again.
    if not isinstance(header, dict):
        raise ValueError("unreadable header (not a JSON object)")  # noqa: TRY004
    return header


def _format_differs(found: object) -> str:
    if isinstance(found, int) and not isinstance(found, bool):
        return f"{'older' if found < FORMAT else 'newer'} format {found} (this neurenix reads format {FORMAT})"
    return f"an unknown format {found!r} (this neurenix reads format {FORMAT})"


def _versions_differ(found: object, wanted: Mapping[str, str]) -> str:
    have = found if isinstance(found, dict) else {}
    differ = [f"{name} {have.get(name, 'absent')} (this process: {wanted.get(name, 'absent')})"
              for name in sorted({*have, *wanted}) if have.get(name) != wanted.get(name)]
    return "" if not differ else "written with " + ", ".join(differ)


def _check(header: Mapping[str, Any], key: str, plugin: str | None = None, versions: Mapping[str, str] | None = None) -> None:
    """_Rejected unless the header is that of ``key``, in this format, and (when given) written by
    ``plugin`` at ``versions``. The checksum only says the payload is whole: a whole entry of
    another model copied onto this key would load and give that model's results."""
    if header.get("format") != FORMAT:
        raise _Rejected(_format_differs(header.get("format")))
    if header.get("key") != key:
        raise _Rejected(f"its header names key {str(header.get('key'))[:12]}, not this key {key[:12]}: another entry's file, "
                        "copied or renamed here")
    if plugin is not None and header.get("plugin") != plugin:
        raise _Rejected(f"written by plugin {header.get('plugin')!r}, not {plugin!r}")
    differ = "" if versions is None else _versions_differ(header.get("versions"), versions)
    if differ:
        raise _Rejected(differ)


def _read_payload(fh: BinaryIO, header: Mapping[str, Any]) -> bytes:
    # The payload is the bytes object read from the file rather than a slice copied out of the
    # whole file (17 MB for BERT-tiny on npu).
    payload = fh.read()
    if header.get("nbytes") != len(payload):
        raise ValueError(f"truncated: {len(payload)} payload bytes, the header says {header.get('nbytes')}")
    if hashlib.sha256(payload).hexdigest() != header.get("sha256"):
        raise ValueError("checksum mismatch")
    return payload


def _read(path: Path, key: str, plugin: str | None = None, versions: Mapping[str, str] | None = None) -> tuple[dict[str, Any], bytes]:
    """Header and payload of the entry of ``key`` at ``path``. FileNotFoundError: none there;
    _Skipped: not a regular file; _Rejected: another entry (checked before the payload is read:
    a foreign entry's bytes are not even hashed); ValueError: not a whole, unaltered entry."""
    with _open(path) as fh:
        header = _read_header(fh)
        _check(header, key, plugin, versions)
        return header, _read_payload(fh, header)


def _write(path: Path, header: Mapping[str, Any], payload: bytes | memoryview) -> None:
    """Write the entry atomically: a temporary file in the same folder renamed over the name.
    The payload is written as it is, never joined to the header: a compiled language model's
    export is hundreds of MB, and a joined copy would be as large again at the process's peak."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    head = json.dumps(dict(header), sort_keys=True).encode()
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(_MAGIC + _HEADER.pack(len(head)) + head)
            fh.write(payload)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _make_room(root: Path, path: Path) -> str:
    """Clear the way for an entry at ``path``; what was done, for the reason ("" when nothing).

    The rename in :func:`_write` takes the name of a file of any other kind (a FIFO; a symbolic
    link: the link, never its target), but not of a folder. An empty folder is removed. A folder
    that holds files is not the cache's to delete: it is moved to ``displaced/``, which eviction
    and ``clear`` leave alone and ``neurenix cache info`` lists.
    """
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            return ""
        path.rmdir()
        return "it was empty and is removed"
    except FileNotFoundError:  # gone meanwhile (another process stored the entry): nothing in the way
        return ""
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
    dest = root / _DISPLACED / f"{path.name}.{time.time_ns()}"
    dest.parent.mkdir(exist_ok=True, mode=0o700)
    os.rename(path, dest)
    return f"moved to {dest}"


@contextlib.contextmanager
def _flock(path: Path, *, timeout: float) -> Iterator[bool]:
    """An exclusive flock on ``path``; yields False when it could not be had within ``timeout``
    (the caller then goes on without it: both results are correct, only work is duplicated)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:  # a read-only or unusable state folder: no lock, and no entry will be stored either
        yield False
        return
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    yield False
                    return
                time.sleep(0.05)
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _count(state: str, n: int = 1) -> None:
    with _counts_lock:
        _counts[state] = _counts.get(state, 0) + n


def stats() -> dict[str, int]:
    """This process's counts: hits, misses, corrupt entries replaced, compiles with the cache off,
    files evicted."""
    with _counts_lock:
        return dict(_counts)


@dataclass(frozen=True)
class _Found(Generic[T]):
    """What :func:`_try_load` found: a value ("hit"), nothing ("") or an unusable entry (its state and why)."""

    value: T | None
    nbytes: int = 0
    state: str = ""
    reason: str = ""


def _try_load(path: Path, key: str, plugin: str, versions: Mapping[str, str], load: Callable[[bytes], T]) -> _Found[T]:
    """The entry at ``path`` loaded, when it is one this caller may use."""
    try:
        _, payload = _read(path, key, plugin, versions)
        value = load(payload)
    except (FileNotFoundError, NotADirectoryError):  # no entry (or no usable folder at all)
        return _Found(None)
    except _Skipped as exc:  # left in place: the store takes its name (a folder is moved aside)
        return _Found(None, state="skipped", reason=str(exc))
    except _Rejected as exc:  # another key's whole entry: the store replaces it
        return _Found(None, state="rejected", reason=str(exc))
    except Exception as exc:  # noqa: BLE001 - any unusable entry (bad bytes, a runtime refusing them) is deleted and compiled again, the reason reported
        with contextlib.suppress(OSError):
            path.unlink()
        return _Found(None, state="corrupt", reason=f"{type(exc).__name__}: {exc}")
    with contextlib.suppress(OSError):
        os.utime(path)  # last use, for LRU eviction
    return _Found(value, len(payload), "hit")


def _producer_versions(meta: Mapping[str, Any]) -> dict[str, str]:
    versions = meta.get("versions")
    return {str(k): str(v) for k, v in versions.items()} if isinstance(versions, Mapping) else {}


def cached(
    plugin: str,
    key: str,
    *,
    build: Callable[[], T],
    dump: Callable[[T], bytes | memoryview],
    load: Callable[[bytes], T],
    meta: Mapping[str, Any],
    state_dir: str | None = None,
) -> CacheResult[T]:
    """The compiled object under ``key``: loaded from the cache, or built, dumped and stored.

    ``meta`` (JSON values: fingerprint, device, options, versions) goes into the entry's header
    for ``neurenix cache list``. ``meta["versions"]`` names the producing plugin's version and its
    runtime's: they are stored in the header, and an entry whose header names another key, format,
    plugin or versions is not loaded (state "rejected", built again and stored over it). A process
    that finds another one building the same key waits for it and loads its entry. Errors of
    ``build`` propagate unchanged; a failure to store (a full or read-only disk) only loses the
    entry, and the result's ``store_error`` says why.
    """
    t0 = time.perf_counter()
    root = cache_root(state_dir)
    if root is None:
        _count("off")
        return CacheResult(build(), "off", key, time.perf_counter() - t0, reason=_off_reason(state_dir))
    path = _entry_path(root, key)
    versions = _producer_versions(meta)
    found = _try_load(path, key, plugin, versions, load)
    if found.state == "hit":
        _count("hit")
        return CacheResult(cast(T, found.value), "hit", key, time.perf_counter() - t0, found.nbytes)
    with _flock(root / "locks" / f"{key}.lock", timeout=_BUILD_WAIT_S):
        if not found.state:  # another process may have stored it while this one waited for the lock
            found = _try_load(path, key, plugin, versions, load)
            if found.state == "hit":
                _count("hit")
                return CacheResult(cast(T, found.value), "hit", key, time.perf_counter() - t0, found.nbytes)
        value = build()
        n, room, error = _store(root, path, plugin, key, versions, meta, dump(value))
    state = found.state or "miss"
    _count(state)
    evict(root)
    reason = "; ".join(part for part in (found.reason, room) if part)
    return CacheResult(value, state, key, time.perf_counter() - t0, n, reason, error)


def _store(root: Path, path: Path, plugin: str, key: str, versions: Mapping[str, str], meta: Mapping[str, Any],
           payload: bytes | memoryview) -> tuple[int, str, str]:
    """Store the entry: (bytes stored, what was done to a folder at its path, why it was not stored).
    A full or read-only state folder only loses the entry: this process has its model, the next
    one compiles again."""
    header = {"format": FORMAT, "plugin": plugin, "key": key, "versions": dict(versions), "created": time.time(),
              "nbytes": memoryview(payload).nbytes, "sha256": hashlib.sha256(payload).hexdigest(), "meta": dict(meta)}
    room = ""
    try:
        room = _make_room(root, path)
        _write(path, header, payload)
    except OSError as exc:
        return 0, room, f"{type(exc).__name__}: {exc}"
    return memoryview(payload).nbytes, room, ""


# ---------------------------------------------------------------------------- size and listing
#: A temporary file younger than this may be an entry another process is writing: not evicted.
_WRITING_S: Final = 3600.0


def _files(root: Path) -> list[tuple[float, int, Path]]:
    """(mtime, size, path) of every file the size limit counts: entries, runtime folders, and
    temporary files left by a crashed writer (an hour old); not the locks, and nothing that is
    not the cache's (``displaced/``, a folder found at an entry's path)."""
    out = []
    now = time.time()
    for dirpath, dirnames, names in os.walk(root):
        here = Path(dirpath)
        if here == root:
            dirnames[:] = [d for d in dirnames if d not in ("locks", _DISPLACED)]
        elif here == root / "entries":
            dirnames[:] = []  # a folder at an entry's path: moved aside by the next store of that entry
        dirnames[:] = [d for d in dirnames if not (d.startswith(".tmp-") and _young(here / d, now))]  # a folder being written
        for name in names:
            p = here / name
            if here == root and name.startswith("."):
                continue  # the eviction lock
            with contextlib.suppress(OSError):
                st = p.lstat()  # a link counts as itself (eviction removes the link, never its target)
                if name.startswith(".tmp-") and now - st.st_mtime < _WRITING_S:
                    continue
                out.append((st.st_mtime, st.st_size, p))
    return out


def _young(path: Path, now: float) -> bool:
    """Whether ``path`` changed within the last _WRITING_S (a writer may still be at work in it)."""
    try:
        return now - path.lstat().st_mtime < _WRITING_S
    except OSError:
        return False


def total_bytes(root: Path | None = None) -> int:
    root = root if root is not None else cache_root()
    return 0 if root is None or not root.is_dir() else sum(size for _, size, _ in _files(root))


def evict(root: Path | None = None, limit: int | None = None) -> list[Path]:
    """Delete the least recently used files until the folder holds at most ``limit`` bytes
    (default ``NEURENIX_COMPILE_CACHE_MAX_BYTES``); the deleted paths."""
    root = root if root is not None else cache_root()
    if root is None or not root.is_dir():
        return []
    limit = compile_cache_limit() if limit is None else limit
    removed: list[Path] = []
    with _flock(root / ".evict.lock", timeout=10.0) as held:
        if not held:
            return removed  # another process is evicting
        files = sorted(_files(root), key=lambda f: f[0])
        total = sum(size for _, size, _ in files)
        for _, size, p in files:
            if total <= limit:
                break
            with contextlib.suppress(OSError):
                p.unlink()
                removed.append(p)
                total -= size
    _count("evicted", len(removed))
    return removed


def _scan(root: Path) -> Iterator[tuple[Path, dict[str, Any] | None, str]]:
    """Each path in ``entries/`` with its header (a whole entry of this format under its own key)
    or, instead, why it is unusable. Another process's temporary files are passed over."""
    try:
        names = sorted(os.listdir(root / "entries"))
    except (FileNotFoundError, NotADirectoryError):
        return
    for name in names:
        path = root / "entries" / name
        if name.startswith(".tmp-"):
            continue
        if not name.endswith(".nxc"):
            yield path, None, "not named as an entry (<key>.nxc)"
            continue
        try:
            header, _ = _read(path, path.stem)
        except FileNotFoundError:  # evicted or replaced meanwhile
            continue
        except (_Skipped, _Rejected, ValueError, OSError) as exc:
            yield path, None, str(exc) if not isinstance(exc, OSError) else f"{type(exc).__name__}: {exc}"
            continue
        yield path, header, ""


def entries(root: Path | None = None) -> list[Entry]:
    """Every readable entry, most recently used first (runtime folders are not listed; see
    :func:`unusable` for the rest)."""
    root = root if root is not None else cache_root()
    if root is None:
        return []
    out = []
    for p, header, _ in _scan(root):
        if header is None:
            continue
        with contextlib.suppress(OSError):
            used = p.stat().st_mtime
            meta = header.get("meta") or {}
            out.append(Entry(p.stem, str(header.get("plugin")), str(meta.get("fingerprint", "?")), int(header["nbytes"]),
                             float(header.get("created", used)), used, p, meta))
    return sorted(out, key=lambda e: -e.used)


def unusable(root: Path | None = None) -> list[tuple[Path, str]]:
    """What ``entries/`` holds that no process would load, and why (a damaged file, another key's
    entry, an older format, a FIFO, a folder...). The next compile of that key replaces it."""
    root = root if root is not None else cache_root()
    return [] if root is None else [(p, why) for p, header, why in _scan(root) if header is None]


def displaced(root: Path | None = None) -> list[Path]:
    """Folders found at an entry's path and moved aside by a store: left for their owner to look
    at; eviction and :func:`clear` never delete them."""
    root = root if root is not None else cache_root()
    folder = None if root is None else root / _DISPLACED
    return [] if folder is None or not folder.is_dir() else sorted(folder.iterdir())


def clear(root: Path | None = None) -> int:
    """Delete every entry and runtime file; the bytes freed (``displaced/`` is left alone)."""
    root = root if root is not None else cache_root()
    if root is None or not root.is_dir():
        return 0
    freed = 0
    for _, size, p in _files(root):
        with contextlib.suppress(OSError):
            p.unlink()
            freed += size
    return freed


# ---------------------------------------------------------------------------- payload helpers for plugins
def pack(parts: Mapping[str, bytes], arrays: Mapping[str, Any] | None = None) -> bytes:
    """Several byte strings and NumPy arrays (any dtype the core knows, bfloat16 included) as one
    payload: a JSON index, then the bytes. No pickle."""
    import numpy as np

    index: list[list[Any]] = []
    blobs: list[bytes] = []
    for name, blob in parts.items():
        index.append([name, "bytes", None, len(blob)])
        blobs.append(bytes(blob))
    for name, value in (arrays or {}).items():
        arr = np.ascontiguousarray(value)
        index.append([name, arr.dtype.name, list(arr.shape), arr.nbytes])
        blobs.append(arr.tobytes())
    head = json.dumps(index).encode()
    return _HEADER.pack(len(head)) + head + b"".join(blobs)


def unpack(payload: bytes) -> tuple[dict[str, bytes], dict[str, Any]]:
    """The byte strings and arrays :func:`pack` wrote (arrays are read-only views of ``payload``)."""
    import numpy as np

    from neurenix_core.graph.compile.artifact_arrays import dtype_named

    (n,) = _HEADER.unpack_from(payload, 0)
    index = json.loads(payload[_HEADER.size:_HEADER.size + n])
    offset = _HEADER.size + n
    parts: dict[str, bytes] = {}
    arrays: dict[str, Any] = {}
    for name, kind, shape, size in index:
        chunk = payload[offset:offset + size]
        if len(chunk) != size:
            raise ValueError(f"payload part {name!r} is truncated")
        if kind == "bytes":
            parts[name] = chunk
        else:
            arrays[name] = np.frombuffer(chunk, dtype=dtype_named(kind, "compile cache")).reshape(shape)
        offset += size
    return parts, arrays
