"""The step model kept across processes: a second process generates without exporting again.

Exporting a language model's step through torch.export takes most of the start-up (about 50 s
for a 30-layer model here); the graph it gives depends only on the model's code and
configuration, not on its weight values. An entry holds that graph with every weight that is a
whole tensor of the model's ``state_dict`` replaced by a reference to it by name (the step graph's
weights are views of the model's tensors, ``step.export_step``); the few arrays the import
derived (folded constants, rotary frequencies) are stored. Loading puts views of the given
model's tensors back in. Since a derived array may have been computed from a weight, the key
includes a digest of the weights (SHA-256 of every tensor's bytes: about 0.4 s for 540 MB here):
an entry serves only the model it was exported from, never another model's values.

An entry lives in ``<state folder>/generation/steps/<key>.nxs`` (the array-file layout of model
files, written atomically). Its key hashes everything the graph depends on: the model's class and
configuration, the names, shapes, dtypes and bytes of its ``state_dict``, the step's geometry, and
the versions of neurenix, PyTorch and transformers. The key is stored in the entry and checked on
reading; an entry that cannot be used (another key, a damaged file) is exported again and
overwritten, with a warning naming the reason. ``NEURENIX_COMPILE_CACHE=0`` turns it off with the
compile cache.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Final

import numpy as np

from neurenix_core.errors import ModelFormatError, NeurenixError
from neurenix_core.user_frame import user_stacklevel

__all__ = ["FORMAT", "entry_path", "load_or_export"]

#: The entry format, and the step wrapper's version (``step._wrapper``): a change to either makes
#: every older entry a miss (2: the head runs on the last position only).
FORMAT: Final = 2
_REMEDY = "the step model is exported again and the entry rewritten"


def load_or_export(model: Any, spec: Any, export: Callable[[], Any]) -> Any:
    """The step model of ``model`` from its entry, else ``export()``'s, stored for next time."""
    path, key = entry_path(model, spec)
    if path is None:
        return export()
    if path.exists():
        try:
            return _load(path, key, model)
        except (ModelFormatError, OSError, KeyError, TypeError, ValueError) as exc:
            warnings.warn(f"step-model cache entry {path} not used ({exc}); {_REMEDY}", RuntimeWarning, stacklevel=user_stacklevel())
    module = export()
    try:
        _save(path, key, model, module)
    except (NeurenixError, OSError) as exc:  # a full or read-only state folder: this process runs on, the next exports
        warnings.warn(f"step-model cache entry {path} not written ({exc}); the next process exports the model again",
                      RuntimeWarning, stacklevel=user_stacklevel())
    return module


def entry_path(model: Any, spec: Any) -> tuple[Path | None, str]:
    """Where ``model``'s entry lives (None when the cache is off or there is no state folder), and its key."""
    from neurenix_core.config import read_config
    from neurenix_core.graph.compile.cache import compile_cache_enabled

    key = _key(model, spec)
    state = read_config().state_dir
    if not compile_cache_enabled() or not state:
        return None, key
    return Path(state) / "generation" / "steps" / f"{key[:32]}.nxs", key


def _key(model: Any, spec: Any) -> str:
    import torch
    import transformers

    from neurenix_core._version import __version__

    cls = type(model)
    state = model.state_dict()
    layout = [[name, list(t.shape), str(t.dtype)] for name, t in state.items()]
    doc = {"format": FORMAT, "neurenix": __version__, "torch": torch.__version__, "transformers": transformers.__version__,
           "class": f"{cls.__module__}.{cls.__qualname__}", "config": model.config.to_dict(), "state": layout, "spec": asdict(spec),
           "weights": _digest(state)}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


def _digest(state: dict[str, Any]) -> str:
    """SHA-256 of the bytes of every tensor (a tied weight once), in state_dict order."""
    import torch

    h = hashlib.sha256()
    seen: set[tuple[int, int]] = set()
    for t in state.values():
        t = t.detach()
        if (t.data_ptr(), t.numel()) in seen:
            continue
        seen.add((t.data_ptr(), t.numel()))
        c = t.cpu().contiguous()
        if c.numel():
            h.update(c.view(-1).view(torch.uint8).numpy().data)
    return h.hexdigest()


def _tensors(model: Any) -> dict[tuple[int, tuple[int, ...], tuple[int, ...], str], tuple[str, np.ndarray]]:
    """The model's CPU tensors as NumPy views, by (address, shape, strides, dtype)."""
    out: dict[tuple[int, tuple[int, ...], tuple[int, ...], str], tuple[str, np.ndarray]] = {}
    for name, t in model.state_dict().items():
        if t.device.type != "cpu":
            continue
        try:
            arr = t.detach().numpy()
        except TypeError:  # a dtype NumPy has no type for (bfloat16): such a weight is stored, not referenced
            continue
        out.setdefault((arr.__array_interface__["data"][0], arr.shape, arr.strides, arr.dtype.str), (name, arr))
    return out


def _save(path: Path, key: str, model: Any, module: Any) -> None:
    from neurenix_core.graph.ir.serialize import Encoder, graph_to_json
    from neurenix_core.io.array_file import encode, write

    tensors = _tensors(model)
    refs: dict[str, list[Any]] = {}
    nodes = []
    symbolic = module.symbolic_graph()
    for node in symbolic.nodes:
        params = dict(node.params)
        for k, v in node.params.items():
            hit = tensors.get((v.__array_interface__["data"][0], v.shape, v.strides, v.dtype.str)) if isinstance(v, np.ndarray) and v.size else None
            if hit is not None:
                refs[f"{node.name}.{k}"] = [hit[0], list(v.shape), v.dtype.str]
                params[k] = np.zeros(0, v.dtype)  # the reference stands for it
        nodes.append(replace(node, params=params))
    graph = replace(symbolic, nodes=tuple(nodes))
    enc = Encoder()
    doc = graph_to_json(graph, enc)
    meta = {"key": key, "format": str(FORMAT), "graph": json.dumps(doc), "refs": json.dumps(refs), "source": module._source}
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    write(path, encode(enc.arrays, meta), what="the step-model cache entry")


def _load(path: Path, key: str, model: Any) -> Any:
    from neurenix_core.graph.ir.serialize import Decoder, graph_from_json
    from neurenix_core.graph.models.graph_module import GraphModule
    from neurenix_core.io.array_file import read

    arrays, meta, _ = read(path, remedy=_REMEDY)
    if meta.get("key") != key or meta.get("format") != str(FORMAT):
        raise ModelFormatError(f"it belongs to another model or version (key {meta.get('key', '?')[:12]}, not {key[:12]})")
    graph = graph_from_json(json.loads(meta["graph"]), Decoder(arrays, str(path), remedy=_REMEDY))
    state = model.state_dict()
    refs = json.loads(meta["refs"])
    nodes = []
    for node in graph.nodes:
        params = dict(node.params)
        for k in params:
            ref = refs.get(f"{node.name}.{k}")
            if ref is not None:
                params[k] = _view(state, ref)
        nodes.append(replace(node, params=params))
    return GraphModule(replace(graph, nodes=tuple(nodes)), str(meta.get("source", "from_torch(Step)")))


def _view(state: dict[str, Any], ref: list[Any]) -> np.ndarray:
    """A read-only view of the state tensor ``ref`` names, checked against the shape and dtype stored."""
    name, shape, dtype = ref
    arr = state[name].detach().numpy()
    if list(arr.shape) != list(shape) or arr.dtype.str != dtype:
        raise ModelFormatError(f"{name} is {arr.dtype.str}{list(arr.shape)} in the model, {dtype}{list(shape)} in the entry")
    arr.flags.writeable = False
    return arr
