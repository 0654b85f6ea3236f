"""Is ONNX Runtime installed, and which of its execution providers have hardware here?

No framework import (onnxruntime is never imported by a probe): the installed wheel's provider
libraries are listed from disk and each accelerator provider is checked for its driver.
"""

from __future__ import annotations

import importlib.util

from neurenix_core.contract import ProbeContext, ProbeResult
from neurenix_onnxruntime import providers

__all__ = ["probe"]


def probe(context: ProbeContext) -> ProbeResult:
    try:
        capi = providers.runtime_dir()
    except providers.Shadowed as exc:
        return ProbeResult.missing(str(exc))
    if capi is None:
        return ProbeResult.missing("the onnxruntime package is not installed: pip install onnxruntime (or onnxruntime-gpu for the CUDA provider)")
    if importlib.util.find_spec("onnx") is None:
        return ProbeResult.missing("the onnx package is not installed (needed to build ONNX graphs): pip install onnx")
    found = providers.present(capi)
    # One device per provider present, best first: ort:0 is the best provider of this machine.
    return ProbeResult.found(
        len(found),
        providers=[p.name for p in found],
        accelerated=any(p.accelerator for p in found),
    )
