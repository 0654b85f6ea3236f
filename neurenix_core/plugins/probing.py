"""Running plugin probes in bounded time, and native probes in a subprocess.

A probe is plugin code run at ``import neurenix_core``; it must not be able to hang or crash the
user's process. Python probes run in a daemon worker thread, each against its own deadline (a
thread cannot be killed, so an overrunning probe is abandoned and recorded). Native probes, which load driver
libraries through ctypes, run in a child interpreter: a segfault there is only a return code.
"""

from __future__ import annotations

import _thread
import os
import sys
import time
from collections.abc import Callable
from typing import Any, Final

from neurenix_core.plugins.manifest import ProbeContext, ProbeResult
from neurenix_core.plugins.sanitize import describe

__all__ = ["ProbeFailure", "ProbeTimeout", "run_all_bounded", "run_native_probe"]

_MARK: Final = "NEURENIX-NATIVE-PROBE:"


class ProbeFailure(Exception):
    """A probe overran its deadline, raised, crashed or answered garbage; ``str()`` is the cause."""


class ProbeTimeout(ProbeFailure):
    """The probe overran its deadline and was abandoned, still running in a daemon thread."""


class _Batch:
    """Runs probes one after another in one daemon worker thread.

    One worker instead of a thread per probe: the caller waits (releasing the GIL), so the probes
    run without contention; a thread per probe cost several milliseconds of GIL hand-overs at every
    import. For the same reason the worker wakes the caller only when the last probe is done: the
    caller sleeps until the deadline of the probe running when it went to sleep, and on waking
    re-reads which probe runs now and since when, so every probe still gets exactly its own
    deadline (a wake-up per probe made the caller take the GIL from the worker after each one,
    which cost milliseconds on a busy machine).

    Built on ``_thread`` rather than ``threading``: importing ``threading`` costs ~0.5 ms of
    ``import neurenix_core``, and ``Thread.start()`` makes the caller wait until the worker runs,
    one more hand-over. The worker behaves as a daemon thread (it never delays interpreter exit);
    it is not listed by ``threading.enumerate()``.
    """

    def __init__(self, calls: list[Callable[[], Any]], first: int) -> None:
        self.calls = calls
        self.outcomes: dict[int, tuple[bool, Any]] = {}
        self.current = first
        self.started = time.monotonic()
        self.mutex = _thread.allocate_lock()  # guards current, started and outcomes
        self._finished = _thread.allocate_lock()  # held until the last probe has an outcome
        self._finished.acquire()
        self._first = first
        _thread.start_new_thread(self._run, ())

    def _run(self) -> None:
        for i in range(self._first, len(self.calls)):
            with self.mutex:
                self.current, self.started = i, time.monotonic()
            try:
                outcome = (True, self.calls[i]())
            except BaseException as exc:  # noqa: BLE001 - handed to the caller as the probe's failure
                outcome = (False, exc)
            with self.mutex:
                self.outcomes[i] = outcome
        self._finished.release()

    def wait(self, seconds: float) -> None:
        """Sleep until the last probe is done or ``seconds`` have passed."""
        if self._finished.acquire(timeout=seconds):
            self._finished.release()  # stays "done" for every later wait


def run_all_bounded(calls: list[Callable[[], Any]], timeout: float) -> list[Any]:
    """Run every call with ``timeout`` seconds each; a result, or a ProbeFailure, per call.

    A call that overruns is abandoned (its thread keeps running as a daemon) and the calls after
    it continue in a fresh worker thread, so one hanging probe delays import by ``timeout`` at
    most and does not take the other plugins down with it.
    """
    results: list[Any] = [None] * len(calls)
    index = 0
    while index < len(calls):
        batch = _Batch(calls, index)
        while index < len(calls):
            with batch.mutex:
                outcome = batch.outcomes.get(index)
                left = batch.started + timeout - time.monotonic() if batch.current == index else timeout
            if outcome is not None:
                ok, value = outcome
                results[index] = value if ok else _failure(value)
                index += 1
                continue
            if left <= 0:
                results[index] = ProbeTimeout(
                    f"probe did not return within {timeout:g}s (NEURENIX_PROBE_TIMEOUT) and was abandoned"
                )
                index += 1
                break  # the worker is stuck in this probe: the rest go to a fresh worker
            batch.wait(left)
    return results


def _failure(exc: BaseException) -> ProbeFailure:
    failure = ProbeFailure(f"probe raised {describe(exc)}")
    failure.__cause__ = exc
    return failure


def run_native_probe(module: str, context: ProbeContext) -> ProbeResult:
    """Run ``neurenix_native_probe`` of plugin ``module`` in a child interpreter."""
    import json  # only plugins with driver-level probes pay for these imports
    import signal
    import subprocess

    env = dict(os.environ)
    # The child must see the same plugins as this process, including temporary sys.path entries.
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    # The child only needs this one plugin: no discovery of the others (and no recursion).
    env["NEURENIX_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    env.pop("NEURENIX_STRICT", None)
    cmd = [sys.executable, "-m", "neurenix_core.plugins.native_probe", module, json.dumps({"emulate": context.emulate})]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=context.timeout, env=env, check=False)
    except subprocess.TimeoutExpired:
        raise ProbeFailure(f"native probe did not return within {context.timeout:g}s and was killed") from None
    if proc.returncode < 0:
        sig = signal.Signals(-proc.returncode).name
        raise ProbeFailure(f"native probe crashed with {sig} (in a subprocess; this process is unharmed)")
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ProbeFailure(f"native probe exited with status {proc.returncode}: {tail}")
    for line in proc.stdout.splitlines():
        if line.startswith(_MARK):
            try:
                return ProbeResult.from_dict(json.loads(line[len(_MARK):]))
            except (ValueError, TypeError, AttributeError) as exc:  # the child's stdout is the plugin's too
                raise ProbeFailure(f"native probe printed a malformed result: {describe(exc)}") from None
    raise ProbeFailure("native probe printed no result")
