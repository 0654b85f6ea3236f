"""Compiled artifacts of the cuda plugin (hooks neurenix_save_compiled / neurenix_load_compiled).

The artifact is a ``torch.export`` program (``model.pt2``, ``torch.export.save``: the ATen graph
as JSON and the weights, loaded back with ``torch.export.load``, which reads weights only) of
the lowered module at its input shapes and precision dtype. It runs on the CPU wheel as on CUDA;
AOTInductor packages would add a C++ compile per model and need a compiler on the target.
Loading runs ``ExportedProgram.module()`` under the same precision rules as a fresh compile.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from neurenix_core.contract import member
from neurenix_core.errors import ArtifactFormatError, ArtifactUnsupportedError
from neurenix_cuda_tc.compiled import _TORCH_DTYPES, TorchCompiledModel

__all__ = ["LoadedTorchModel", "load_compiled", "save_compiled"]


class LoadedTorchModel(TorchCompiledModel):
    """An ``ExportedProgram.module()`` run as :class:`TorchCompiledModel` runs its module (same
    input casts, precision context and float32 results). The exported module is already in the
    precision dtype on its device, and refuses ``.eval()``/``.train()``: the base constructor's
    placement step is skipped."""

    def __init__(self, module: Any, *, device: Any, precision: str, emulated: bool, switches: Any, summary: str) -> None:
        import torch

        self.precision = precision
        self.dtype = getattr(torch, _TORCH_DTYPES[precision])
        self.module = self._runner = module
        self.device, self.emulated, self._switches, self.summary = device, emulated, switches, summary


def save_compiled(backend: Any, model: Any, directory: Path) -> dict[str, Any]:
    import torch

    if not isinstance(model, TorchCompiledModel) or not hasattr(model, "input_specs"):
        raise ArtifactUnsupportedError(f"cuda (plugin cuda): a {type(model).__name__} cannot be saved; compile the model with nx.compile first")
    examples = tuple(
        torch.zeros(shape, dtype=model.dtype if dtype.startswith(("float", "bfloat")) else getattr(torch, dtype), device=model.device)
        for shape, dtype in model.input_specs
    )
    try:
        program = torch.export.export(model.module, examples, strict=False)
    except Exception as exc:
        raise ArtifactUnsupportedError(f"cuda (plugin cuda): torch.export cannot capture the lowered model "
                                       f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); compile for another device to deploy it") from exc
    torch.export.save(program, str(directory / "model.pt2"))
    return {"runtime": f"torch {torch.__version__}", "file": "model.pt2", "precision": model.precision, "summary": model.summary,
            "input_specs": [[list(shape), dtype] for shape, dtype in model.input_specs]}


def load_compiled(backend: Any, directory: Path, meta: dict[str, Any], options: Any) -> LoadedTorchModel:
    import torch

    index = int(getattr(options.device, "index", 0))
    try:
        program = torch.export.load(str(member(directory, meta["file"])))
    except Exception as exc:
        raise ArtifactFormatError(f"cuda:{index} (plugin cuda): {member(directory, meta['file'])} is not a loadable torch.export program "
                                  f"({type(exc).__name__}: {exc}); export the model again") from exc
    model = LoadedTorchModel(program.module(), device=backend._native_device(index), precision=meta["precision"], emulated=backend.emulated,
                             switches=backend.switches, summary=f"{meta['summary']}; loaded from {directory.parent.parent.name} (torch.export program)")
    model.input_specs = tuple((tuple(shape), dtype) for shape, dtype in meta["input_specs"])
    return model
