"""The edgetpu plugin's piece of the persistent compile cache (``neurenix_core.graph.compile.cache``).

An entry is the ``.tflite`` bytes the writer produced (after ``edgetpu_compiler`` where it ran)
and how each input and output meets the user (shape, NHWC, dtype, quantization), so a later
process skips the lowering, the TFLite writing and the Edge TPU compiler; LiteRT loads the bytes.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from typing import Any

import numpy as np

from neurenix_core.contract import Graph, QuantizationPlan, compile_cache

__all__ = ["cached_tflite"]

#: (tflite bytes, inputs, outputs, compiler report, stem): compiled.py's in-process entry.
Written = tuple[bytes, tuple[Any, ...], tuple[Any, ...], Any, "str | None"]


def _edges(edges: tuple[Any, ...]) -> list[list[Any]]:
    return [[e.name, list(e.shape), e.nhwc, np.dtype(e.dtype).str, None if e.quant is None else [float(e.quant[0]), int(e.quant[1])]]
            for e in edges]


def _dump(written: Written) -> bytes:
    data, ins, outs, report, stem = written
    meta = {"inputs": _edges(ins), "outputs": _edges(outs), "stem": stem,
            "report": None if report is None else [report.mapped, report.total, report.log]}
    return compile_cache.pack({"tflite": data, "meta": json.dumps(meta).encode()})


def _load(payload: bytes) -> Written:
    from neurenix_edgetpu.compiler import CompilerReport
    from neurenix_edgetpu.edges import Edge

    parts, _ = compile_cache.unpack(payload)
    meta = json.loads(parts["meta"])

    def edges(rows: list[list[Any]]) -> tuple[Any, ...]:
        return tuple(Edge(n, tuple(s), bool(h), np.dtype(d), None if q is None else (float(q[0]), int(q[1]))) for n, s, h, d, q in rows)

    rep = meta["report"]
    report = None if rep is None else CompilerReport(int(rep[0]), int(rep[1]), str(rep[2]), None)
    return bytes(parts["tflite"]), edges(meta["inputs"]), edges(meta["outputs"]), report, meta["stem"]


def cached_tflite(backend: Any, graph: Graph, precision: str, plan: QuantizationPlan | None, io: str, stem: str,
                  build: Callable[[], Written]) -> compile_cache.CacheResult[Written]:
    """The written model of ``graph`` from the persistent cache, else ``build()`` stored there."""
    from neurenix_core.contract import registry
    from neurenix_edgetpu import __version__

    try:
        from ai_edge_litert import __version__ as litert
    except ImportError:  # an older LiteRT wheel without the attribute: the distribution's version
        from importlib.metadata import version

        litert = version("ai-edge-litert")
    fingerprint = graph.fingerprint()
    options = {"shapes": [list(s.shape) for s in graph.inputs], "precision": precision, "plan": compile_cache.plan_fingerprint(plan),
               "io": io, "stem": stem, "emulated": bool(backend.emulated), "edgetpu_compiler": shutil.which("edgetpu_compiler") is not None}
    versions = {"neurenix-edgetpu": __version__, "litert": str(litert)}
    key = compile_cache.cache_key("edgetpu", fingerprint, options, versions)
    meta = {"fingerprint": fingerprint, "device": "edgetpu" + (" (emulated)" if backend.emulated else ""), "options": options,
            "versions": versions}
    return compile_cache.cached("edgetpu", key, build=build, dump=_dump, load=_load, meta=meta, state_dir=registry().config.state_dir)
