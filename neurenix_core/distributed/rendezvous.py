"""Meeting point and watchdog: torch's TCPStore at MASTER_ADDR:MASTER_PORT.

Every rank writes the world size it was launched with and waits for the others, so a job whose
processes disagree (or that is short of a rank) ends with WorldSizeMismatchError naming the ranks
instead of waiting forever in the engine's own rendezvous. Afterwards each rank bumps a heartbeat
counter in the store from a daemon thread; when a collective fails, the counters that stopped
moving name the ranks that died. The store is torch's (torchrun's agent hosts it, or rank 0);
nothing of ours goes on the wire besides these keys.
"""

from __future__ import annotations

import atexit
import queue
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar, cast

from neurenix_core.distributed.launch import LaunchEnv
from neurenix_core.errors import DistributedError, RankFailedError, WorldSizeMismatchError

__all__ = ["HEARTBEAT_S", "Rendezvous"]

T = TypeVar("T")

HEARTBEAT_S = 0.5  # a rank whose counter did not move for 3 periods is taken for dead


class Rendezvous:
    """The job's TCPStore, the world-size check, and the heartbeat watchdog."""

    def __init__(self, launch: LaunchEnv, timeout_s: float) -> None:
        import torch.distributed as dist

        self.dist, self.launch, self.timeout_s = dist, launch, timeout_s
        self.prefix = f"neurenix/{launch.run_id}/"
        self.hosts_store = launch.rank == 0 and not launch.agent_store
        self.store = self._connect(is_master=self.hosts_store)
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        self._helper: _Helper | None = None

    # ------------------------------------------------------------------ store
    def _connect(self, *, is_master: bool) -> Any:
        launch = self.launch
        if launch.master_addr is None or launch.master_port is None:
            raise DistributedError(f"nx.distributed.init (rank {launch.rank}): no MASTER_ADDR/MASTER_PORT to meet at ({launch.source})")
        try:
            raw = self.dist.TCPStore(launch.master_addr, launch.master_port, launch.world_size, is_master,
                                     timeout=timedelta(seconds=self.timeout_s), wait_for_workers=False,
                                     use_libuv=True)
        except (RuntimeError, OSError) as exc:
            who = "host" if is_master else "reach"
            raise DistributedError(
                f"nx.distributed.init (rank {launch.rank}): could not {who} the rendezvous at "
                f"{launch.master_addr}:{launch.master_port} within {self.timeout_s:g} s ({exc}); check MASTER_ADDR/MASTER_PORT "
                "and that rank 0 is running"
            ) from exc
        return self.dist.PrefixStore(self.prefix, raw)

    # ------------------------------------------------------------------ world size
    def join(self) -> None:
        """Publish this rank's world size; wait for every rank; refuse disagreements."""
        launch, store = self.launch, self.store
        store.set(f"world/{launch.rank}", str(launch.world_size))
        joined = store.add("joined", 1)
        deadline = time.monotonic() + self.timeout_s
        while True:
            seen = self._published()
            wrong = {r: w for r, w in seen.items() if w != launch.world_size}
            if wrong or joined > launch.world_size:
                raise WorldSizeMismatchError(
                    f"nx.distributed.init (rank {launch.rank}): launched with world size {launch.world_size}, but "
                    + (", ".join(f"rank {r} with {w}" for r, w in sorted(wrong.items())) if wrong else f"{joined} processes joined")
                    + "; start every process with the same WORLD_SIZE (torchrun --nnodes x --nproc-per-node)"
                )
            if len(seen) == launch.world_size:
                return
            if time.monotonic() > deadline:
                missing = sorted(set(range(launch.world_size)) - set(seen))
                raise WorldSizeMismatchError(
                    f"nx.distributed.init (rank {launch.rank}): world size {launch.world_size}, but rank(s) {missing} did not "
                    f"join within {self.timeout_s:g} s; start them (or lower WORLD_SIZE), or raise init(timeout=...)"
                )
            time.sleep(0.05)
            joined = store.add("joined", 0)

    def _published(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for r in range(self.launch.world_size):
            k = f"world/{r}"
            if self.store.check([k]):
                out[r] = int(self.store.get(k).decode())
        return out

    # ------------------------------------------------------------------ watchdog
    def start_heartbeat(self) -> None:
        # Its own client: the engine's calls on the main store must not queue behind ours.
        store = self._connect(is_master=False) if not self.hosts_store else self.store
        key = f"beat/{self.launch.rank}"

        def beat() -> None:
            while not self._stop.wait(HEARTBEAT_S):
                try:
                    store.add(key, 1)
                except (RuntimeError, OSError):
                    return  # the store's host is gone: diagnose() says so when a collective fails

        store.add(key, 1)
        self._beat = threading.Thread(target=beat, name="neurenix-heartbeat", daemon=True)
        self._beat.start()
        # A process that ends without nx.distributed.shutdown() must still stop the beat first: a daemon
        # thread that comes back from the store's C++ call while the interpreter finalizes aborts the
        # whole process ("terminate called ..."), after all its work is done.
        atexit.register(self.close)

    def run_watched(self, what: str, fn: Callable[[], T]) -> T:
        """``fn()`` on a helper thread while this one watches the other ranks' heartbeats: for an
        engine whose collectives block in native code until its own (long) timeouts when a peer
        dies (XLA's CPU collectives), RankFailedError as soon as a peer's heartbeat stops.

        One long-lived helper thread (a thread per call costs milliseconds on a busy machine), and
        the store is read only once a call has waited HEARTBEAT_S: a normal step costs no round trip.
        """
        if self._helper is None:
            self._helper = _Helper()
        call = self._helper.submit(fn)
        last: dict[int, int] | None = None
        moved: dict[int, float] = {}
        deadline = time.monotonic() + self.timeout_s
        while True:
            if call.done.wait(HEARTBEAT_S):
                return cast(T, call.result())
            now, beats = time.monotonic(), self._beats_or_raise(what)
            if last is None:
                last, moved = beats, dict.fromkeys(beats, now)  # when each peer's counter last changed
            moved.update({r: now for r in beats if beats[r] != last[r]})
            last = beats
            stalled = tuple(r for r in beats if now - moved[r] > 3 * HEARTBEAT_S)
            if stalled or now > deadline:
                cause = f"rank(s) {list(stalled)} stopped (no heartbeat)" if stalled else f"no result within {self.timeout_s:g} s"
                raise RankFailedError(
                    f"nx.distributed.{what} on rank {self.launch.rank} of {self.launch.world_size} failed: {cause}. "
                    "See the failed rank's own error; every rank must run the same steps with the same batch shapes",
                    ranks=stalled,
                )

    def _beats_or_raise(self, what: str) -> dict[int, int]:
        try:
            return self._beats()
        except (RuntimeError, OSError) as exc:  # the store's host is gone
            raise self.diagnose(what, exc) from exc

    def _beats(self) -> dict[int, int]:
        return {r: self.store.add(f"beat/{r}", 0) for r in range(self.launch.world_size) if r != self.launch.rank}

    def failed_ranks(self) -> tuple[int, ...] | None:
        """Ranks whose heartbeat stopped (None when the store itself cannot be reached)."""
        try:
            before = self._beats()
            time.sleep(3 * HEARTBEAT_S + 0.2)
            after = self._beats()
        except (RuntimeError, OSError):
            return None
        return tuple(r for r in before if after[r] == before[r])

    def diagnose(self, what: str, exc: BaseException) -> RankFailedError:
        """The typed error for a collective that raised ``exc``."""
        launch = self.launch
        dead = self.failed_ranks()
        if dead is None:
            where = f"{launch.master_addr}:{launch.master_port}"
            ranks: tuple[int, ...] = (0,) if not launch.agent_store else ()
            cause = (f"rank(s) [0] stopped (the rendezvous store it hosts at {where} is unreachable)" if ranks
                     else f"the torchrun agent's store at {where} is unreachable (the launcher is ending the job)")
        elif dead:
            ranks, cause = dead, f"rank(s) {list(dead)} stopped (no heartbeat)"
        else:
            ranks, cause = (), "every other rank is alive: one of them did not enter the same collective in time"
        return RankFailedError(
            f"nx.distributed.{what} on rank {launch.rank} of {launch.world_size} failed: {cause} ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}). See the failed rank's own error; every rank must run the same "
            "steps with the same batch shapes",
            ranks=ranks,
        )

    def close(self) -> None:
        """Stop the watchdog's threads and wait for them to leave native code (see start_heartbeat).

        The beat's store call ends within the store's timeout, so waiting for it is bounded; a helper
        stuck in a dead peer's collective is not waited for beyond one heartbeat period (the job has
        already failed, and that call never returns)."""
        atexit.unregister(self.close)
        self._stop.set()
        if self._helper is not None:
            self._helper.stop(wait_s=HEARTBEAT_S)
            self._helper = None
        if self._beat is not None:
            self._beat.join(timeout=self.timeout_s + HEARTBEAT_S)
            self._beat = None


class _Call:
    """One function for the helper thread, and its outcome."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn, self.done = fn, threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.value = self.fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread by result()
            self.error = exc
        self.done.set()

    def result(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


class _Helper:
    """A daemon thread running calls in order: unlike a ThreadPoolExecutor's workers (joined at
    interpreter exit), one stuck in a dead peer's collective does not keep the process alive."""

    def __init__(self) -> None:
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="neurenix-collective", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while (call := self._calls.get()) is not None:
            call.run()

    def submit(self, fn: Callable[[], Any]) -> _Call:
        call = _Call(fn)
        self._calls.put(call)
        return call

    def stop(self, wait_s: float) -> None:
        self._calls.put(None)
        self._thread.join(timeout=wait_s)
