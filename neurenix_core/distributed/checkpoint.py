"""Data-parallel checkpoints: rank 0 writes, every rank resumes.

A checkpoint is a folder: ``model.npz`` (``model.save``'s format), ``optimizer.npz`` (the
optimizer's state tensors, host NumPy) and ``meta.json`` (the step, the optimizer's scalar state
and hyperparameters). Safe formats only, nothing is unpickled. Ranks hold identical parameters
(that is what data parallelism maintains), so one writer suffices; the others wait at a barrier so
nobody reads a half-written folder, and every rank loads the same files.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from neurenix_core.errors import ModelFormatError

__all__ = ["load_checkpoint", "save_checkpoint"]

_META = "meta.json"


def save_checkpoint(path: str | os.PathLike[str], model: Any, optimizer: Any = None, *, step: int = 0) -> Path:
    """Rank 0 writes ``model`` (and ``optimizer``) to the folder ``path``; every rank returns once it exists."""
    from neurenix_core.distributed.engine import current

    eng = current("save_checkpoint")
    folder = Path(path)
    if eng.rank == 0:
        folder.mkdir(parents=True, exist_ok=True)
        model.save(folder / "model.npz")
        meta: dict[str, Any] = {"step": int(step), "world_size": eng.world_size}
        if optimizer is not None:
            from neurenix_core.nn.serialization import save_state

            arrays, meta["optimizer"] = _split_optimizer(optimizer.state_dict())
            save_state(arrays, folder / "optimizer.npz")  # atomic, as model.save
        tmp = folder / f".{_META}.tmp"
        tmp.write_text(json.dumps(meta))
        os.replace(tmp, folder / _META)  # written last: its presence means the checkpoint is complete
    eng.barrier()
    return folder


def load_checkpoint(path: str | os.PathLike[str], model: Any, optimizer: Any = None) -> int:
    """Load the folder written by :func:`save_checkpoint` into ``model`` (and ``optimizer``) on this
    rank; returns the saved step (resume from the next one). Any world size may resume."""
    folder = Path(path)
    meta_file = folder / _META
    if not meta_file.is_file():
        raise ModelFormatError(f"{folder}: not a complete nx.distributed checkpoint (no {_META}); was save_checkpoint interrupted?")
    meta = json.loads(meta_file.read_text())
    _load_in_place(model, folder / "model.npz")
    if optimizer is not None:
        if "optimizer" not in meta:
            raise ModelFormatError(f"{folder}: the checkpoint holds no optimizer state; load it without optimizer=")
        from neurenix_core.nn.serialization import load_state

        optimizer.load_state_dict(_join_optimizer(load_state(folder / "optimizer.npz"), meta["optimizer"]))
    return int(meta["step"])


def _load_in_place(model: Any, weights: Path) -> None:
    """``model.load`` (its checks and dtype rules), keeping the parameter objects: an optimizer
    built before the load still holds the model's parameters afterwards."""
    from neurenix_core.training.step import replace_data

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
