"""Is an ACME accelerator here? Files only: no runtime import, no subprocess, no network."""

from __future__ import annotations

import glob
import importlib.util

from neurenix_core.contract import ProbeContext, ProbeResult

__all__ = ["DEVICE_GLOB", "RUNTIME_MODULE", "probe"]

#: Where the ACME driver puts its device nodes (a real vendor names theirs).
DEVICE_GLOB = "/dev/acme[0-9]*"
#: The Python module of the vendor runtime; the template's "runtime" is NumPy.
RUNTIME_MODULE = "numpy"


def probe(context: ProbeContext) -> ProbeResult:
    if importlib.util.find_spec(RUNTIME_MODULE) is None:
        return ProbeResult.missing(f"the ACME runtime ({RUNTIME_MODULE}) is not installed: pip install neurenix-acme")
    if context.emulate:
        # NEURENIX_EMULATE=acme: run the same backend code on the host CPU, and say so.
        return ProbeResult.emulating(1, reason="emulated: the ACME backend runs on the host CPU with NumPy")
    nodes = sorted(glob.glob(DEVICE_GLOB))
    if not nodes:
        return ProbeResult.missing(
            "no /dev/acme* device node: install the ACME accelerator driver, or set NEURENIX_EMULATE=acme to run on the host CPU"
        )
    return ProbeResult.found(len(nodes), nodes=nodes)
