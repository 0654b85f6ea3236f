"""Data-parallel checkpoints: rank 0 writes, every rank resumes.

A checkpoint is a folder: ``model.npz`` (``model.save``'s format), ``optimizer.npz`` (the
optimizer's state tensors, host NumPy) and ``meta.json`` (the step, the optimizer's scalar state
and hyperparameters, and the SHA-256 of the two other files). Safe formats only, nothing is
unpickled. Ranks hold identical parameters (that is what data parallelism maintains), so one writer
suffices; the others wait at a barrier so nobody reads a half-written folder, and every rank loads
the same files.

The folder is replaced as a whole (``neurenix_core.io.atomic``, docs/saving.md): written under a
staging name beside it, then swapped in by one rename, so a save killed at any point leaves the
previous checkpoint or the new one, never a mix of two steps. Loading checks each file against the
digest ``meta.json`` recorded (a mix copied together by hand is a ModelFormatError); checkpoints
written before the digests load as before.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Final

import numpy as np

from neurenix_core.errors import ModelFormatError, SaveError
from neurenix_core.io.digest import file_sha256
from neurenix_core.kwargs import strict_kwargs

__all__ = ["load_checkpoint", "save_checkpoint"]

_META: Final = "meta.json"
_MODEL: Final = "model.npz"
_OPTIMIZER: Final = "optimizer.npz"
#: What a checkpoint folder holds; saving over a folder that holds anything else is refused.
_MEMBERS: Final = frozenset({_META, _MODEL, _OPTIMIZER})


@strict_kwargs("nx.distributed.save_checkpoint")
def save_checkpoint(path: str | os.PathLike[str], model: Any, optimizer: Any = None, *, step: int = 0) -> Path:
    """Rank 0 writes ``model`` (and ``optimizer``) to the folder ``path``, replacing the checkpoint
    there as a whole; every rank returns once it exists. A full or read-only disk is a SaveError."""
    from neurenix_core.distributed.engine import current
    from neurenix_core.io.atomic import replace_folder

    eng = current("save_checkpoint")
    folder = Path(path)
    if eng.rank == 0:
        replace_folder(folder, lambda staging: _write(staging, model, optimizer, int(step), eng.world_size), what="the checkpoint",
                       check=_check_target)
    eng.barrier()
    return folder


def _write(folder: Path, model: Any, optimizer: Any, step: int, world_size: int) -> None:
    model.save(folder / _MODEL)
    meta: dict[str, Any] = {"step": step, "world_size": world_size}
    if optimizer is not None:
        from neurenix_core.nn.serialization import save_state

        arrays, meta["optimizer"] = _split_optimizer(optimizer.state_dict())
        save_state(arrays, folder / _OPTIMIZER)
    meta["sha256"] = {name: file_sha256(folder / name) for name in (_MODEL, _OPTIMIZER) if (folder / name).is_file()}
    (folder / _META).write_text(json.dumps(meta))


def _check_target(folder: Path) -> None:
    """The folder is replaced as a whole: one that holds anything but a checkpoint is refused, not emptied."""
    if folder.exists() and not folder.is_dir():
        raise SaveError(f"cannot save the checkpoint to {folder}: it is a file, not a folder; choose a new or empty folder")
    # Hidden staging files of the layout before whole-folder saves (``.meta.json.tmp``) go with it.
    names = [p.name for p in folder.iterdir()] if folder.is_dir() else []
    foreign = sorted(n for n in names if n not in _MEMBERS and not (n.startswith(".") and n.endswith(".tmp")))
    if foreign:
        raise SaveError(f"cannot save the checkpoint to {folder}: it holds {', '.join(foreign[:5])}{' ...' if len(foreign) > 5 else ''}, "
                        "which is not part of a checkpoint, and saving replaces the whole folder; choose a new or empty folder, "
                        "or move those files")


@strict_kwargs("nx.distributed.load_checkpoint")
def load_checkpoint(path: str | os.PathLike[str], model: Any, optimizer: Any = None) -> int:
    """Load the folder written by :func:`save_checkpoint` into ``model`` (and ``optimizer``) on this
    rank; returns the saved step (resume from the next one). Any world size may resume."""
    from neurenix_core.io.atomic import settled

    folder = settled(path)  # an interrupted save's backup (no-exchange filesystems) first
    meta_file = folder / _META
    if not meta_file.is_file():
        raise ModelFormatError(f"{folder}: not a complete nx.distributed checkpoint (no {_META}); was save_checkpoint interrupted?")
    try:
        meta = json.loads(meta_file.read_text())
    except (UnicodeDecodeError, ValueError) as exc:
        raise ModelFormatError(f"{meta_file} is not readable JSON ({exc}); save the checkpoint again") from exc
    _check_digests(folder, meta)
    _load_in_place(model, folder / _MODEL)
    if optimizer is not None:
        if "optimizer" not in meta:
            raise ModelFormatError(f"{folder}: the checkpoint holds no optimizer state; load it without optimizer=")
        from neurenix_core.nn.serialization import load_state

        optimizer.load_state_dict(_join_optimizer(load_state(folder / _OPTIMIZER), meta["optimizer"]))
    return int(meta["step"])


def _check_digests(folder: Path, meta: dict[str, Any]) -> None:
    """Every file against the SHA-256 ``meta.json`` recorded, before anything is loaded: files of two
    saves put together are refused, never loaded as one step."""
    for name, digest in (meta.get("sha256") or {}).items():
        if name not in _MEMBERS or not (folder / name).is_file():
            raise ModelFormatError(f"{folder}: {name} of the checkpoint is missing; save the checkpoint again or copy the whole folder")
        if file_sha256(folder / name) != digest:
            raise ModelFormatError(f"{folder}: {name} is not the file this checkpoint's {_META} was written with (a file of another "
                                   "save, or a corrupted copy); load the folder as save_checkpoint wrote it, or save it again")


def _load_in_place(model: Any, weights: Path) -> None:
    """``model.load`` (its checks and dtype rules), keeping the parameter objects: an optimizer
    built before the load still holds the model's parameters afterwards."""
    from neurenix_core.tensor.tensor import replace_data

    before = {name: t for name, _, _, t in model._slots()}
    model.load(weights)
    for name, mod, attr, new in list(model._slots()):
        old = before[name]
        replace_data(old, new._data)
        (mod._parameters if attr in mod._parameters else mod._buffers)[attr] = old


def _split_optimizer(state_dict: dict[str, Any]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(arrays for the .npz, everything else for JSON): state "i/name" arrays, scalars as JSON."""
    arrays: dict[str, np.ndarray] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for i, entries in state_dict["state"].items():
        for name, value in entries.items():
            if isinstance(value, np.ndarray):
                arrays[f"{i}/{name}"] = value
            else:
                scalars.setdefault(str(i), {})[name] = value.item() if isinstance(value, np.generic) else value
    groups = [{k: (list(v) if isinstance(v, tuple) else v) for k, v in g.items()} for g in state_dict["param_groups"]]
    return arrays, {"scalars": scalars, "param_groups": groups}


def _join_optimizer(arrays: dict[str, np.ndarray], saved: dict[str, Any]) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {}
    for key, value in arrays.items():
        i, name = key.split("/", 1)
        state.setdefault(int(i), {})[name] = value
    for i, entries in saved["scalars"].items():
        state.setdefault(int(i), {}).update(entries)
    groups = [{k: (tuple(v) if k == "betas" else v) for k, v in g.items()} for g in saved["param_groups"]]
    return {"state": state, "param_groups": groups}
