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

Safety: an entry is written to a temporary file and renamed over its name (readers see a whole
entry or none); the header carries the payload's SHA-256, checked on every read, so a truncated or
corrupted entry is deleted and compiled again (never loaded). A ``load`` that raises is treated the
same way. Size: after each store the oldest files (by last use: hits touch their entry) are deleted
until the folder is under ``NEURENIX_COMPILE_CACHE_MAX_BYTES`` (default 2 GiB).
``NEURENIX_COMPILE_CACHE=0`` turns the whole cache off (nothing read, nothing written).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import struct
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Generic, TypeVar

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
    "entries",
    "evict",
    "pack",
    "plan_fingerprint",
    "runtime_folder",
    "stats",
    "total_bytes",
    "unpack",
]

T = TypeVar("T")

#: Bumped when the entry layout or the key's recipe changes: older entries then simply miss.
FORMAT: Final = 1
_MAGIC: Final = b"NXCC\x01"
_HEADER: Final = struct.Struct("<I")
#: How long a process waits for another one building the same entry before building it too.
_BUILD_WAIT_S: Final = 600.0

_counts_lock = threading.Lock()
_counts: dict[str, int] = {"hit": 0, "miss": 0, "corrupt": 0, "off": 0, "evicted": 0}


@dataclass(frozen=True)
class CacheResult(Generic[T]):
    """What :func:`cached` returns: the compiled object and how it was obtained."""

    value: T
    state: str  # "hit", "miss" (built and stored), "corrupt" (bad entry deleted, built again), "off"
    key: str
    seconds: float  # time spent loading (hit) or building and storing (miss)
    nbytes: int = 0
    reason: str = ""

    def line(self) -> str:
        """One phrase for ``compiled.summary`` and the placement report."""
        short = self.key[:12]
        if self.state == "hit":
            return f"compile cache: hit, entry {short} ({self.nbytes:,} bytes) loaded in {self.seconds * 1e3:.0f} ms"
        if self.state == "miss":
            return f"compile cache: miss, compiled in {self.seconds * 1e3:.0f} ms and stored as entry {short} ({self.nbytes:,} bytes)"
        if self.state == "corrupt":
            return f"compile cache: entry {short} was unusable ({self.reason}), deleted and compiled again"
        return f"compile cache: off ({self.reason})"


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
    from neurenix_core.cli.benchkit import cpu_model

    flags = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as fh:
        flags = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("flags")), "")
    return f"{cpu_model()} x{os.cpu_count()} flags:{hashlib.sha256(flags.encode()).hexdigest()[:12]}"


def plan_fingerprint(plan: Any) -> str:
    """``QuantizationPlan.fingerprint()``, or "-" for None (a key part that is always a string)."""
    return "-" if plan is None else str(plan.fingerprint())


def cache_key(plugin: str, fingerprint: str, options: Mapping[str, Any], versions: Mapping[str, str]) -> str:
    """The entry's key: every input that can change the compiled bytes or their validity."""
    text = json.dumps(
        {"format": FORMAT, "plugin": plugin, "graph": fingerprint, "options": dict(options), "versions": dict(versions),
         "cpu": cpu_identity()},
        sort_keys=True, default=repr,
    )
    return hashlib.sha256(text.encode()).hexdigest()[:40]


# ---------------------------------------------------------------------------- reading and writing
def _entry_path(root: Path, key: str) -> Path:
    return root / "entries" / f"{key}.nxc"


def _read(path: Path) -> tuple[dict[str, Any], bytes]:
    """Header and payload of an entry; ValueError when it is not a whole, unaltered entry."""
    # Read in two steps, so the payload is the bytes object read from the file rather than a
    # slice copied out of the whole file (17 MB for BERT-tiny on npu).
    with open(path, "rb") as fh:
        head = fh.read(len(_MAGIC) + _HEADER.size)
        if not head.startswith(_MAGIC) or len(head) < len(_MAGIC) + _HEADER.size:
            raise ValueError("not a compile cache entry (bad magic)")
        (n,) = _HEADER.unpack_from(head, len(_MAGIC))
        text = fh.read(n)
        payload = fh.read()
    try:
        header = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"unreadable header ({exc})") from exc
    if not isinstance(header, dict) or header.get("nbytes") != len(payload):
        raise ValueError(f"truncated: {len(payload)} payload bytes, the header says {header.get('nbytes') if isinstance(header, dict) else '?'}")
    if hashlib.sha256(payload).hexdigest() != header.get("sha256"):
        raise ValueError("checksum mismatch")
    return header, payload


def _write(path: Path, header: Mapping[str, Any], payload: bytes) -> None:
    """Write the entry atomically: a temporary file in the same folder renamed over the name."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    head = json.dumps(dict(header), sort_keys=True).encode()
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(_MAGIC + _HEADER.pack(len(head)) + head + payload)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


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


def _try_load(path: Path, load: Callable[[bytes], T]) -> tuple[T | None, int, str]:
    """(value, payload size, "") on a good entry; (None, 0, why) after deleting a bad one;
    (None, 0, "") when there is none."""
    try:
        _, payload = _read(path)
        value = load(payload)
    except (FileNotFoundError, NotADirectoryError):  # no entry (or no usable folder at all)
        return None, 0, ""
    except Exception as exc:  # noqa: BLE001 - any unusable entry (bad bytes, a runtime refusing them) is deleted and compiled again, the reason reported
        with contextlib.suppress(OSError):
            path.unlink()
        return None, 0, f"{type(exc).__name__}: {exc}"
    with contextlib.suppress(OSError):
        os.utime(path)  # last use, for LRU eviction
    return value, len(payload), ""


def cached(
    plugin: str,
    key: str,
    *,
    build: Callable[[], T],
    dump: Callable[[T], bytes],
    load: Callable[[bytes], T],
    meta: Mapping[str, Any],
    state_dir: str | None = None,
) -> CacheResult[T]:
    """The compiled object under ``key``: loaded from the cache, or built, dumped and stored.

    ``meta`` (JSON values: fingerprint, options, versions) goes into the entry's header for
    ``neurenix cache list``. A process that finds another one building the same key waits for it
    and loads its entry. Errors of ``build`` propagate unchanged; a failure to store (a full or
    read-only disk) only loses the entry.
    """
    t0 = time.perf_counter()
    root = cache_root(state_dir)
    if root is None:
        _count("off")
        return CacheResult(build(), "off", key, time.perf_counter() - t0, reason=_off_reason(state_dir))
    path = _entry_path(root, key)
    value, n, bad = _try_load(path, load)
    if value is not None:
        _count("hit")
        return CacheResult(value, "hit", key, time.perf_counter() - t0, n)
    with _flock(root / "locks" / f"{key}.lock", timeout=_BUILD_WAIT_S):
        if not bad:  # another process may have stored it while this one waited for the lock
            value, n, bad = _try_load(path, load)
            if value is not None:
                _count("hit")
                return CacheResult(value, "hit", key, time.perf_counter() - t0, n)
        value = build()
        n = _store(root, path, plugin, key, meta, dump(value))
    _count("corrupt" if bad else "miss")
    evict(root)
    return CacheResult(value, "corrupt" if bad else "miss", key, time.perf_counter() - t0, n, bad)


def _store(root: Path, path: Path, plugin: str, key: str, meta: Mapping[str, Any], payload: bytes) -> int:
    header = {"format": FORMAT, "plugin": plugin, "key": key, "created": time.time(), "nbytes": len(payload),
              "sha256": hashlib.sha256(payload).hexdigest(), "meta": dict(meta)}
    try:
        _write(path, header, payload)
    except OSError:
        return 0  # a full or read-only state folder: this process has its model; the next one compiles again
    return len(payload)


# ---------------------------------------------------------------------------- size and listing
#: A temporary file younger than this may be an entry another process is writing: not evicted.
_WRITING_S: Final = 3600.0


def _files(root: Path) -> list[tuple[float, int, Path]]:
    """(mtime, size, path) of every file the size limit counts: entries, runtime folders, and
    temporary files left by a crashed writer (an hour old); not the locks."""
    out = []
    now = time.time()
    for dirpath, _, names in os.walk(root):
        if Path(dirpath) == root / "locks":
            continue
        for name in names:
            p = Path(dirpath) / name
            if p.parent == root and name.startswith("."):
                continue  # the eviction lock
            with contextlib.suppress(OSError):
                st = p.stat()
                if name.startswith(".tmp-") and now - st.st_mtime < _WRITING_S:
                    continue
                out.append((st.st_mtime, st.st_size, p))
    return out


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


def entries(root: Path | None = None) -> list[Entry]:
    """Every readable entry, most recently used first (runtime folders are not listed)."""
    root = root if root is not None else cache_root()
    folder = None if root is None else root / "entries"
    if folder is None or not folder.is_dir():
        return []
    out = []
    for p in folder.glob("*.nxc"):
        try:
            header, _ = _read(p)
            used = p.stat().st_mtime
        except (OSError, ValueError):
            continue
        meta = header.get("meta") or {}
        out.append(Entry(p.stem, str(header.get("plugin")), str(meta.get("fingerprint", "?")), int(header["nbytes"]),
                         float(header.get("created", used)), used, p, meta))
    return sorted(out, key=lambda e: -e.used)


def clear(root: Path | None = None) -> int:
    """Delete every entry and runtime file; the bytes freed."""
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

    from neurenix_core.deploy.arrays import dtype_named

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
