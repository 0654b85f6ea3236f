"""Threads for the NumPy interpreter: a small pool that splits a kernel's independent work
(samples, rows, blocks) across cores, and the BLAS thread count while it does.

NumPy releases the GIL in ufunc loops, copies and BLAS calls, but runs each of them on one
core, so an interpreter step is single-threaded except inside BLAS. With ``threads=N`` (N > 1)
a plan run (:func:`using`) splits each heavy step into N shards (:func:`split`): the caller
runs one, N - 1 pool workers the others, each writing its own slice of a preallocated output.
BLAS is held at one thread meanwhile, as each shard runs its own GEMM: measured on ResNet-18's
3x3 convolutions at batch 32, two shards with single-threaded OpenBLAS ran 1.4-2.7x faster than
one batched GEMM on OpenBLAS's two threads (the im2col copies and the epilogue run on both cores
too, and each sample's columns stay in cache). A GEMM that its step does not split and that is
large enough (:func:`matmul`) gets BLAS's threads for its own duration instead.

With ``threads=1`` nothing is split and no pool exists; BLAS is held at one thread too, so the
count asked for is the count used. ``threads=None`` leaves everything as the process set it
(the BLAS pool sized by OPENBLAS_NUM_THREADS & co. at import, ufuncs on the caller's core).
The BLAS count is set through OpenBLAS's own ``openblas_set_num_threads`` (found in the library
NumPy loaded); with another BLAS it is left alone and :func:`blas_threads` says None.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Final

import numpy as np

__all__ = ["THREADED_BLOCK_SCALE", "WIDE_GEMM_MACS", "blas_threads", "block", "checked", "current", "matmul", "split", "using"]

#: OpenBLAS's thread-count entry points under the names its builds export (NumPy's wheels ship
#: it as scipy_openblas with a 64-bit-integer suffix).
_SETTERS: Final = ("scipy_openblas_set_num_threads64_", "openblas_set_num_threads64_", "openblas_set_num_threads")
_GETTERS: Final = ("scipy_openblas_get_num_threads64_", "openblas_get_num_threads64_", "openblas_get_num_threads")

_state = threading.local()
_lock = threading.Lock()
_pools: dict[int, ThreadPoolExecutor] = {}
_blas: list[tuple[Callable[[int], None], Callable[[], int]] | None] = []  # [] until looked up, then [found or None]


def asked() -> int | None:
    """The thread count a caller's :func:`using` set for this thread (None: none set)."""
    n: int | None = getattr(_state, "threads", None)
    return n


def current() -> int:
    """Shards per step in this thread: the plan run's ``threads`` (1 in pool workers and outside a run)."""
    n: int = getattr(_state, "threads", 1)
    return n


def _openblas() -> tuple[Callable[[int], None], Callable[[], int]] | None:
    """(set, get) of the OpenBLAS NumPy loaded, or None for another BLAS."""
    with _lock:
        if not _blas:
            _blas.append(_find_openblas())
        return _blas[0]


def _find_openblas() -> tuple[Callable[[int], None], Callable[[], int]] | None:
    here = os.path.dirname(np.__file__)
    # Wheels vendor it next to the package (numpy.libs); dlopen of the loaded path gives the same library.
    for path in sorted(glob.glob(os.path.join(here + ".libs", "*openblas*")) + glob.glob(os.path.join(here, ".dylibs", "*openblas*"))):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for setter, getter in zip(_SETTERS, _GETTERS):
            if hasattr(lib, setter) and hasattr(lib, getter):
                set_fn, get_fn = getattr(lib, setter), getattr(lib, getter)
                set_fn.restype, get_fn.restype = None, ctypes.c_int
                set_fn.argtypes = [ctypes.c_int]
                return (lambda n, f=set_fn: f(n)), (lambda f=get_fn: int(f()))
    return None


def blas_threads() -> int | None:
    """OpenBLAS's thread count now, or None where NumPy's BLAS is not an OpenBLAS found here."""
    found = _openblas()
    return None if found is None else found[1]()


def _forget_pools() -> None:
    """In a forked child the parent's workers do not exist: a pool that thinks it has them would
    never run a shard, so the child starts without pools (and makes its own on first use)."""
    global _lock
    _pools.clear()
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pools)


def _pool(threads: int) -> ThreadPoolExecutor:
    with _lock:
        pool = _pools.get(threads)
        if pool is None:
            pool = _pools[threads] = ThreadPoolExecutor(threads - 1, thread_name_prefix=f"neurenix-interpreter-{threads}")
        return pool


@contextlib.contextmanager
def using(threads: int | None) -> Iterator[None]:
    """Run the enclosed plan steps on ``threads`` cores (None: as the process is set up)."""
    if threads is None:
        yield
        return
    found = _openblas()
    before = found[1]() if found is not None else None
    if found is not None and before != 1:
        found[0](1)  # each shard runs its own single-threaded GEMM; matmul() widens a large unsplit one
    outer = asked()
    _state.threads = max(1, int(threads))
    try:
        yield
    finally:
        if outer is None:  # unset again: asked() says no caller set a count here
            del _state.threads
        else:
            _state.threads = outer
        if found is not None and before is not None and before != 1:
            found[0](before)


#: Multiply-adds from which an unsplit GEMM runs on BLAS's own threads (:func:`matmul`). Smaller
#: ones stay on one: OpenBLAS's hand-off cost MobileNetV3's squeeze-excite products 7% at batch
#: 32, 2 threads; a ViT-Tiny linear at batch 1 (22M) ran faster on both cores than as row shards.
WIDE_GEMM_MACS: Final = 4_000_000


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``np.matmul(a, b, out=out)``, on BLAS's threads (as many as the run's) where the run has
    several, this product is not split into shards by its caller, and it has
    :data:`WIDE_GEMM_MACS` multiply-adds or more; else as BLAS is set (one thread in a run)."""
    threads = current()
    found = _openblas() if threads > 1 and a.size * b.shape[-1] >= WIDE_GEMM_MACS else None
    if found is None:
        return np.matmul(a, b, out=out)
    found[0](threads)
    try:
        return np.matmul(a, b, out=out)
    finally:
        found[0](1)


#: How much larger a kernel's cache block is when its step is split across threads. Each ufunc
#: call releases the GIL, and a shard must take it back after every call: with 2 threads, blocks
#: of 32K float32 ran gelu slower than 1 thread (the hand-offs cost more than a call), blocks of
#: 128K 1.8x faster than 1 thread at 32K (a few tens of µs per call).
THREADED_BLOCK_SCALE: Final = 4


def block(elements: int, total: int, min_items: int = 1) -> int:
    """A kernel's block size in elements: ``elements``, or larger when its step will be split
    (``total`` items in shards of at least ``min_items``, as :func:`split` is called; see
    :data:`THREADED_BLOCK_SCALE`). A step that stays on one thread keeps the cache-sized block:
    the larger one made an unsplit gelu at batch 1 (ViT-Tiny, 2 threads) 15% slower."""
    return elements * THREADED_BLOCK_SCALE if current() > 1 and total // max(1, min_items) >= 2 else elements


def ranges(total: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous, nearly equal (start, stop) ranges covering range(total)."""
    step, extra = divmod(total, parts)
    out, start = [], 0
    for k in range(parts):
        stop = start + step + (1 if k < extra else 0)
        out.append((start, stop))
        start = stop
    return out


def split(total: int, fn: Callable[[int, int], object], min_items: int = 1) -> None:
    """Run ``fn(start, stop)`` over range(total) in up to :func:`current` shards of at least
    ``min_items`` items each: shard 0 on the caller, the others on the pool. A shard no worker
    has started when the caller is done with its own, the caller runs too (on a machine whose
    other cores are busy the workers may not get one for a while; waiting for them would make
    the split slower than no split). Every shard has finished when this returns (so a raised
    error never leaves a worker writing); the first error is raised."""
    threads = current()
    parts = min(threads, total // max(1, min_items))
    if parts <= 1:
        fn(0, total)
        return
    chunks = ranges(total, parts)
    pool = _pool(threads)
    futures = [(pool.submit(fn, a, b), (a, b)) for a, b in chunks[1:]]
    _state.threads = 1  # the caller's shards split no further: the workers are busy with this split
    ok = False
    try:
        fn(*chunks[0])
        for future, (a, b) in reversed(futures):  # the last submitted is the least likely started
            if future.cancel():
                fn(a, b)
        ok = True
    finally:
        _state.threads = threads
        if not ok:
            for future, _ in futures:
                future.cancel()
        errors = [None if f.cancelled() else f.exception() for f, _ in futures]
    for e in errors:
        if e is not None:
            raise e


def checked(threads: object) -> int | None:
    """``threads=`` as given to nx.compile for the interpreter: None or a positive int."""
    if threads is None:
        return None
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        from neurenix_core.errors import ConfigurationError

        raise ConfigurationError(f"cpu:0 (the NumPy interpreter): threads={threads!r} must be a positive int or None "
                                 "(None: the process's BLAS pool as its environment sized it)")
    return threads
