"""run_all_bounded: each probe has its own deadline; one that hangs delays only by that deadline."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

from neurenix_core.plugins.probing import ProbeFailure, run_all_bounded


def test_results_in_order_and_failures_carry_their_cause():
    def boom() -> None:
        raise OSError("ioctl failed")

    out = run_all_bounded([lambda: 1, boom, lambda: 3], timeout=5)
    assert out[0] == 1 and out[2] == 3
    assert isinstance(out[1], ProbeFailure) and isinstance(out[1].__cause__, OSError)
    assert "ioctl failed" in str(out[1])


def test_hanging_probes_are_abandoned_and_the_rest_still_run():
    release = threading.Event()
    ran_after: list[int] = []

    def hang() -> None:
        release.wait(30)

    out = run_all_bounded([hang, lambda: ran_after.append(1) or "b", hang, lambda: "d"], timeout=0.2)
    # Returned while both hanging probes are still blocked: had it waited for them, their
    # results would be None instead of ProbeFailure.
    release.set()
    assert [type(o).__name__ if isinstance(o, Exception) else o for o in out] == ["ProbeTimeout", "b", "ProbeTimeout", "d"]  # ProbeTimeout is a ProbeFailure
    assert "did not return within 0.2s" in str(out[0])
    assert ran_after == [1]


def test_each_probe_has_its_own_deadline_while_the_caller_sleeps_across_probes():
    """Three probes of 0.2 s under a 0.35 s deadline: 0.6 s in all, each within its own deadline.

    The caller is woken only when the last probe is done (or at a deadline), so it must re-read
    which probe runs and since when after each wake-up instead of timing the batch as a whole.
    """

    def slow(value: str) -> str:
        time.sleep(0.2)
        return value

    started = time.monotonic()
    out = run_all_bounded([lambda: slow("a"), lambda: slow("b"), lambda: slow("c")], timeout=0.35)
    assert out == ["a", "b", "c"]
    assert time.monotonic() - started >= 0.6


def test_running_probes_does_not_import_threading():
    """The worker runs on ``_thread``: ``threading`` costs ~0.5 ms of ``import neurenix_core``."""
    code = "import sys\nfrom neurenix_core.plugins.probing import run_all_bounded\nprint(run_all_bounded([lambda: 1], timeout=5), 'threading' in sys.modules)"
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")}
    env["NEURENIX_BACKENDS"] = "-onnxruntime"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[1]", "False"]
