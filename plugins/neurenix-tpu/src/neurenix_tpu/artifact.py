"""Compiled artifacts of the tpu plugin (hooks neurenix_save_compiled / neurenix_load_compiled).

The artifact is the XLA program as a serialized ``jax.export`` module (``model.jax_export``,
StableHLO with its calling convention; the weights are its first argument, not constants) and
the weights in the core's array file (``weights.arrays``). Loading deserializes it and calls it
through ``jax.jit``: no lowering, no source framework. The module is bound to the platform it
was exported for (``cpu`` in emulation, ``tpu`` on hardware); another platform is refused.
"""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from neurenix_core.contract import CompiledModel, Device, call_runtime, read_arrays, write_arrays
from neurenix_core.errors import ArtifactFormatError, ArtifactMismatchError, ArtifactUnsupportedError
from neurenix_tpu.compiled import TPUCompiledModel

if TYPE_CHECKING:
    from neurenix_tpu.backend import JaxTPUBackend

__all__ = ["LoadedTPUModel", "load_compiled", "save_compiled"]


def save_compiled(backend: JaxTPUBackend, model: Any, directory: Path) -> dict[str, Any]:
    where = f"tpu:{getattr(getattr(model, 'program', None), 'index', 0)} (plugin tpu)"
    if isinstance(model, LoadedTPUModel):  # a loaded artifact saved again: its files as they are
        (directory / "model.jax_export").write_bytes(model.serialized)
        write_arrays(directory / "weights.arrays", {f"w{i}": np.asarray(leaf) for i, leaf in enumerate(model.leaves)})
        return dict(model.meta)
    if not isinstance(model, TPUCompiledModel) or not hasattr(model, "input_dtypes"):
        raise ArtifactUnsupportedError(f"{where}: a {type(model).__name__} cannot be saved; compile the model with nx.compile first")
    program = model.program
    if program.parallel > 1:
        raise ArtifactUnsupportedError(f"{where}: a data-parallel program (over {program.parallel} devices) cannot be saved yet; "
                                       "compile without data_parallel= to export it")
    leaves = [np.asarray(leaf) for leaf in program.leaves]
    shapes = [(model.padded, *s[1:]) if s else s for s in model.input_shapes]
    args = [jax.ShapeDtypeStruct(s, d) for s, d in zip(shapes, model.input_dtypes)]
    exported = jax.export.export(program.jitted)(tuple(jax.ShapeDtypeStruct(a.shape, a.dtype) for a in leaves), *args)
    (directory / "model.jax_export").write_bytes(bytes(exported.serialize()))
    write_arrays(directory / "weights.arrays", {f"w{i}": a for i, a in enumerate(leaves)})
    return {
        "runtime": f"jax {jax.__version__}", "platforms": list(exported.platforms), "leaves": len(leaves),
        "input_shapes": [list(s) for s in model.input_shapes], "batch": model.batch, "padded": model.padded,
        "summary": model.summary, "precision": model.precision,
    }


class LoadedTPUModel(CompiledModel):
    """A deserialized ``jax.export`` module with its weights on one device; called as
    :class:`~neurenix_tpu.compiled.TPUCompiledModel` is (JAX arrays in and out)."""

    def __init__(self, backend: JaxTPUBackend, exported: Any, serialized: bytes, leaves: list[np.ndarray], meta: dict[str, Any],
                 index: int, source: str) -> None:
        self.meta, self.serialized, self.index = meta, serialized, index
        self.input_shapes = tuple(tuple(s) for s in meta["input_shapes"])
        self.batch, self.padded, self.precision = int(meta["batch"]), int(meta["padded"]), meta["precision"]
        self.summary = f"{meta['summary']}; loaded from {source} (jax.export module, platforms {', '.join(meta['platforms'])})"
        nbytes = sum(int(a.nbytes) for a in leaves)
        backend.memory.check(index, nbytes)
        device = backend._native_device(index)
        self.leaves = tuple(jax.device_put(leaves, device))
        backend.memory.charge(index, nbytes)
        weakref.finalize(self, backend.memory.release, index, nbytes)
        self._fn = jax.jit(exported.call)
        self._backend, self._device = backend, Device("tpu", index)
        self._array_type = backend.placement(index).array_type

    def __call__(self, *inputs: Any) -> Any:
        if inputs and all(type(a) is self._array_type for a in inputs):
            return self._run(*inputs)
        return call_runtime(self._run, inputs, self._device, self._backend)

    def _run(self, *inputs: Any) -> Any:
        extra = self.padded - self.batch
        xs = [jnp.pad(x, [(0, extra)] + [(0, 0)] * (x.ndim - 1)) for x in inputs] if extra else inputs
        out = self._fn(self.leaves, *xs)
        return self._cut(out) if extra else out

    def _cut(self, out: Any) -> Any:
        return tuple(self._cut(o) for o in out) if isinstance(out, (tuple, list)) else out[: self.batch]


def load_compiled(backend: JaxTPUBackend, directory: Path, meta: dict[str, Any], options: Any) -> LoadedTPUModel:
    index = int(getattr(options.device, "index", 0))
    platform = backend._native_device(index).platform
    if platform not in meta["platforms"]:
        raise ArtifactMismatchError(f"tpu:{index} (plugin tpu): the saved XLA program was exported for {meta['platforms']}, this device runs "
                                    f"on {platform!r}; export the model again on this kind of machine (neurenix export ... --device tpu)")
    serialized = (directory / "model.jax_export").read_bytes()
    try:
        exported = jax.export.deserialize(bytearray(serialized))
    except Exception as exc:
        raise ArtifactFormatError(f"tpu:{index} (plugin tpu): {directory / 'model.jax_export'} cannot be deserialized "
                                  f"({type(exc).__name__}: {exc}); export the model again") from exc
    arrays = read_arrays(directory / "weights.arrays")
    leaves = [arrays[f"w{i}"] for i in range(int(meta["leaves"]))]
    return LoadedTPUModel(backend, exported, serialized, leaves, meta, index, directory.parent.parent.name)
