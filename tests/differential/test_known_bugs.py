"""One deterministic reproduction per known bug (known_failures.py), strict xfail where it shows:
fixing the bug turns it XPASS, which fails the run until the entry is removed. Where the bug does
not show (cpu:0) the same test runs as a plain check, so it guards the fixed behaviour too."""

from __future__ import annotations

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.testing.plugin import devices_under_test

from .harness import check_fields
from .known_failures import KNOWN_BUGS

BUGS = {bug.key: bug for bug in KNOWN_BUGS}


def _devices(key: str, shows_on_cpu: bool = False) -> list[object]:
    """Every device under test, strict-xfail where the bug ``key`` shows (off cpu:0)."""
    out: list[object] = []
    for dut in devices_under_test():
        # raises=AssertionError: an error of another kind on the way is not the known bug, and fails.
        marks = [] if dut.device == "cpu:0" and not shows_on_cpu else [pytest.mark.xfail(strict=True, raises=AssertionError, reason=BUGS[key].reason)]
        out.append(pytest.param(dut.device, marks=marks, id=dut.backend))
    return out


@pytest.mark.parametrize("device", _devices("from_dlpack-device"))
def test_from_dlpack_keeps_the_tensors_device(device: str) -> None:
    with nx.fallback_policy("allow"):
        x = nx.asarray(np.arange(3, dtype=np.float32), device=device)
        assert nx.from_dlpack(x).device == x.device


@pytest.mark.parametrize("device", _devices("compiled-output-aliases-input"))
def test_a_compiled_identity_output_is_charged_as_a_view(device: str) -> None:
    compiled = nx.compile(nn.Sequential(nn.Identity()), device=device, progress=False)
    x = nx.asarray(np.arange(4, dtype=np.float32), device=device)
    y = compiled(x)
    check_fields(y, "compiled Identity output", nx.Device(device), [x], on_tape=False)  # a Mismatch is an AssertionError
