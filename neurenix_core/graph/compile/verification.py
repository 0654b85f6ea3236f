"""``Compiled.verify``: a static int8/int16 compile run on a few calibration-style batches beside
the core's integer and float references (graph.quantization.verify); the first layer where they
disagree beyond rounding is named, found by compiling prefixes of the graph (``locate``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from neurenix_core.errors import CompilationError
from neurenix_core.graph.compile.state import CompiledState
from neurenix_core.graph.ir import Graph

__all__ = ["verify_compiled"]

#: A compiled model as host arrays in -> a list of host arrays out.
HostRun = Callable[..., list[np.ndarray]]


def verify_compiled(compiled: CompiledState, batches: Sequence[Any], run: HostRun, locate: Callable[[Graph], HostRun]) -> Any:
    """The verification of ``compiled`` (run as ``run``) on the first ``VERIFY_BATCHES`` of
    ``batches``; ``locate(prefix)`` compiles a prefix of the graph the same way."""
    from neurenix_core.graph.quantization import verify as V
    from neurenix_core.graph.quantization.calibration import batch_arrays

    plan = compiled.plan
    if plan is None or plan.dynamic:
        raise CompilationError(
            f"{compiled.device}: verify() checks a static int8/int16 compile; this model has {compiled.precision or 'no'} precision plan")
    chosen = [batch_arrays(b, len(compiled.graph.inputs), i) for i, b in enumerate(list(batches)[: V.VERIFY_BATCHES])]
    return V.verify_outputs(compiled.graph, plan, chosen, run, device=str(compiled.device), locate=locate)
