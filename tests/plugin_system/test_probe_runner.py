"""run_all_bounded: each probe has its own deadline; one that hangs delays only by that deadline."""

from __future__ import annotations

import threading

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
