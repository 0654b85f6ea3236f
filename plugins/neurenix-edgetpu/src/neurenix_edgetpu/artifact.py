"""Compiled artifacts of the edgetpu plugin (hooks neurenix_save_compiled / neurenix_load_compiled).

The artifact is the .tflite file LiteRT runs (``model.tflite``: the edgetpu_compiler output on
hardware, the written int8/float model in emulation, which ``edgetpu_compiler`` accepts as it
is) and, in the manifest, how each edge meets the user (NCHW vs NHWC, int8 quantization), so the
loaded model takes and returns the same arrays. A .tflite is portable across LiteRT versions.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from neurenix_core.contract import member
from neurenix_core.errors import ArtifactFormatError, ArtifactUnsupportedError, ModelFormatError, ShapeError
from neurenix_edgetpu.compiled import CompilerReport, EdgeTPUModel
from neurenix_edgetpu.edges import Edge
from neurenix_edgetpu.verify import inspect_model

if TYPE_CHECKING:
    from neurenix_edgetpu.backend import LiteRTBackend

__all__ = ["load_compiled", "save_compiled"]


def _runtime() -> str:
    try:
        return f"ai-edge-litert {metadata.version('ai-edge-litert')}"
    except metadata.PackageNotFoundError:
        return "LiteRT"


def _edge(e: Edge) -> dict[str, Any]:
    return {"name": e.name, "shape": list(e.shape), "nhwc": e.nhwc, "dtype": str(e.dtype), "quant": None if e.quant is None else list(e.quant)}


def _unedge(d: dict[str, Any]) -> Edge:
    quant = None if d["quant"] is None else (float(d["quant"][0]), int(d["quant"][1]))
    return Edge(d["name"], tuple(d["shape"]), bool(d["nhwc"]), np.dtype(d["dtype"]), quant)


def save_compiled(backend: LiteRTBackend, model: Any, directory: Path) -> dict[str, Any]:
    if not isinstance(model, EdgeTPUModel):
        raise ArtifactUnsupportedError(f"edgetpu (plugin edgetpu): a {type(model).__name__} is not a LiteRT model; compile with nx.compile first")
    model.save(directory / "model.tflite")
    report = model.compiler_report
    return {
        "runtime": _runtime(), "file": "model.tflite", "source": model.source, "stem": model.stem,
        "inputs": [_edge(e) for e in model.inputs], "outputs": [_edge(e) for e in model.outputs],
        "edgetpu_compiler": None if report is None else {"mapped": report.mapped, "total": report.total},
    }


def load_compiled(backend: LiteRTBackend, directory: Path, meta: dict[str, Any], options: Any) -> EdgeTPUModel:
    path = member(directory, meta["file"])
    try:
        data = path.read_bytes()
        info = inspect_model(data, source=str(path))
    except (OSError, ModelFormatError, ShapeError) as exc:
        raise ArtifactFormatError(f"edgetpu (plugin edgetpu): {path} is not a usable TFLite model ({exc}); export the model again") from exc
    extra = dict(getattr(options, "extra", {}) or {})
    report = meta.get("edgetpu_compiler")
    return EdgeTPUModel(backend, data, info, [_unedge(e) for e in meta["inputs"]], [_unedge(e) for e in meta["outputs"]],
                        index=int(getattr(options.device, "index", 0)), source=f"{meta['source']} loaded from {directory.parent.parent.name}",
                        num_threads=extra.get("num_threads"), kernels=extra.get("kernels"), stem=meta.get("stem"),
                        report=None if report is None else CompilerReport(report["mapped"], report["total"], "", None))
