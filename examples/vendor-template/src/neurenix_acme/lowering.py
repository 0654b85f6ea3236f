"""Whole-model compilation for ACME: core ``Graph`` -> what the device runs.

A real vendor lowers ``graph`` to their compiler's format here. The emulated ACME device runs
NumPy, so it lowers only quantized models, to the core's integer reference kernels
(``neurenix_core.graph.reference.run.run_quantized``, TFLite arithmetic); float models return ``None`` and
the core runs them layer by layer through the op table.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from neurenix_core.contract import CompiledModel, CompileOptions, Graph, QuantizationPlan

__all__ = ["AcmeIntegerModel", "lower"]


class AcmeIntegerModel(CompiledModel):
    """An int8/int16 model run with integer arithmetic; takes and returns host NumPy arrays."""

    def __init__(self, graph: Graph, plan: QuantizationPlan, emulated: bool) -> None:
        self.graph = graph
        self.plan = plan
        self.summary = f"ACME int{plan.bits} integer kernels, {len(graph.nodes)} layers" + (" (emulated with NumPy on the host CPU)" if emulated else "")

    def _run(self, *inputs: Any) -> Any:
        from neurenix_core.contract import run_quantized

        out = run_quantized(self.graph, self.plan, *inputs)
        if isinstance(out, tuple):
            return tuple(np.asarray(o, np.float32) for o in out)
        return np.asarray(out, np.float32)


def lower(backend: Any, graph: Graph, options: CompileOptions) -> CompiledModel | None:
    if options.quantization is None or options.quantization.dynamic:
        return None  # fp32: the core runs the layers eagerly on acme through the op table
    return AcmeIntegerModel(graph, options.quantization, backend.emulated)
