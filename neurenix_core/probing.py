"""Running plugin probes in bounded time, and native probes in a subprocess.

A probe is plugin code run at ``import neurenix_core``; it must not be able to hang or crash the
user's process. Python probes run in a daemon thread joined with a deadline (a thread cannot be
killed, so an overrunning probe is abandoned and recorded). Native probes, which load driver
libraries through ctypes, run in a child interpreter: a segfault there is only a return code.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from neurenix_core.manifest import ProbeContext, ProbeResult

__all__ = ["ProbeFailure", "PendingProbe", "run_bounded", "run_native_probe"]

_MARK: Final = "NEURENIX-NATIVE-PROBE:"


class ProbeFailure(Exception):
    """A probe overran its deadline, raised, crashed or answered garbage; ``str()`` is the cause."""


class PendingProbe:
    """A probe running in a daemon thread; :meth:`result` waits for it up to a deadline.

    All plugins' probes are started first and collected afterwards, so import waits for the
    slowest probe rather than for the sum of them.
    """

    __slots__ = ("_thread", "_box", "_what")

    def __init__(self, fn: Callable[[], Any], what: str) -> None:
        self._box: dict[str, Any] = {}
        self._what = what
        box = self._box

        def target() -> None:
            try:
                box["value"] = fn()
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread in result()
                box["error"] = exc

        self._thread = threading.Thread(target=target, name=f"neurenix-probe-{what}", daemon=True)
        self._thread.start()

    def result(self, deadline: float, timeout: float) -> Any:
        """The probe's return value; raises ProbeFailure if it raised or is still running at ``deadline``."""
        self._thread.join(max(0.0, deadline - time.monotonic()))
        if self._thread.is_alive():
            raise ProbeFailure(f"probe did not return within {timeout:g}s (NEURENIX_PROBE_TIMEOUT) and was abandoned")
        if "error" in self._box:
            exc = self._box["error"]
            raise ProbeFailure(f"probe raised {type(exc).__name__}: {exc}") from exc
        return self._box.get("value")


def run_bounded(fn: Callable[[], Any], timeout: float, what: str) -> Any:
    """Call ``fn`` in a daemon thread and return its result, or raise ``ProbeFailure``."""
    return PendingProbe(fn, what).result(time.monotonic() + timeout, timeout)


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
    cmd = [sys.executable, "-m", "neurenix_core._native_probe", module, json.dumps({"emulate": context.emulate})]
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
            return ProbeResult.from_dict(json.loads(line[len(_MARK):]))
    raise ProbeFailure("native probe printed no result")
