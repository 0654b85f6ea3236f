"""``CausalLM.from_pretrained``: a saved transformers model folder prepared for generation.

The first process builds the transformers model from the folder (``AutoModelForCausalLM``, float32)
and prepares it as ``CausalLM(model, ...)`` does. Where cpu:0 keeps the cache in its runtime's
state and that runtime stores its models (OpenVINO's), the compiled step is also written to the
compile cache (``state_store.py``), keyed by the folder's contents. A later process with the same
folder and arguments loads that entry: no transformers model is built and torch is not imported,
so it starts in about a second and holds the weights only as the runtime does (for the 135M model of
docs/generation.md: 1.5 GB peak in fp32, 0.6 GB with int8 weights, against 1.9 and 1.4 GB when the
transformers model is handed in). After a first preparation the float model is not kept either
(the stateful model holds what it needs): ``check_quantization`` loads it from the folder again.

Other caches and devices prepare the model from the folder each time (they keep it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neurenix_core.generation.errors import GenerationError

if TYPE_CHECKING:
    from neurenix_core.generation.state_store import Stored
    from neurenix_core.graph.ir.host import HostRuntime

__all__ = ["GenerationDefaults", "from_pretrained", "load_model"]


@dataclass(frozen=True, slots=True)
class GenerationDefaults:
    """The generation settings ``CausalLM.generate`` reads from a model's ``generation_config``,
    kept in a stored entry so that a loaded model stops and pads as the transformers model would."""

    eos_token_id: Any = None
    pad_token_id: Any = None
    max_new_tokens: int | None = None
    max_length: int | None = None

    @classmethod
    def of(cls, config: Any) -> GenerationDefaults:
        return cls(**{k: getattr(config, k, None) for k in cls.__dataclass_fields__})


def _folder(path: Any) -> Path:
    folder = Path(path).expanduser()
    if not (folder / "config.json").is_file():
        raise GenerationError(f"CausalLM.from_pretrained({str(path)!r}): not a saved model folder (no config.json there); give the "
                              "folder of model.save_pretrained(...), or for a hub model the folder huggingface_hub.snapshot_download(id) returns")
    return folder


def load_model(folder: Any) -> Any:
    """The transformers causal LM saved in ``folder``, in float32, for inference."""
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()


def _storing_runtime(cache: str, device: Any, options: Mapping[str, Any], quantize: str | None) -> HostRuntime | None:
    """The host runtime whose stateful model would be stored: cpu:0, cache="state", a runtime that
    stores its models and computes ``quantize``; None otherwise (the model is prepared each time)."""
    from neurenix_core.graph.compile.host_select import host_runtime_named
    from neurenix_core.graph.ir.host import HostRuntime

    if cache != "state" or device.type != "cpu" or set(options) - {"runtime", "threads"}:
        return None
    name = str(options.get("runtime", "openvino"))
    runtime = host_runtime_named(name).get(name)
    if not isinstance(runtime, HostRuntime) or not (runtime.keeps_state and runtime.stores_state_models):
        return None
    return runtime if quantize is None or quantize in runtime.weight_schemes else None


def from_pretrained(cls: Any, path: Any, device: Any, *, cache: str | None, capacity: int | None, precision: str | None,
                    quantize: str | None, options: Mapping[str, Any] | None) -> Any:
    """``CausalLM.from_pretrained``'s work (see the module's docstring); ``cls``: CausalLM (not
    imported here: generate.py imports this module)."""
    from neurenix_core.generation.state import default_cache
    from neurenix_core.generation.state_store import entry_folder, entry_key, folder_digest, load, storing
    from neurenix_core.graph.ir.host import HostOptions
    from neurenix_core.tensor.placement import default_backend

    folder = _folder(path)
    _, dev, _ = default_backend(device)
    opts = dict(options or {})
    kind = default_cache(dev, capacity, precision, opts) if cache is None else cache
    runtime = _storing_runtime(kind, dev, opts, quantize) if precision in (None, "fp32") else None
    entry = key = None
    if runtime is not None:
        key = entry_key(folder_digest(folder), quantize, runtime)
        entry = entry_folder(key)
        found = None if entry is None else load(entry, key, runtime, HostOptions(threads=opts.get("threads")))
        if found is not None:
            return _loaded(cls, found, runtime, dev, quantize, folder)
    model = load_model(folder)
    lm = cls.__new__(cls)
    if entry is None or key is None:
        lm._prepare(model, device, cache, capacity, precision, quantize, options)
        lm.source = folder
        lm._owned = model  # nothing else holds the model: it lives as long as this CausalLM
        return lm
    with storing(entry, key) as (tmp, facts):
        lm._prepare(model, device, cache, capacity, precision, quantize, options, store=tmp)
        if lm.cache == "state":  # not a fallback to the fixed cache: its stateful model is kept
            facts.update(spec=asdict(lm.spec), model_name=lm.model_name, quantize=quantize,
                         generation=asdict(GenerationDefaults.of(lm.generation_config)))
    lm.source = folder
    if lm.cache == "state":
        lm.graph = None  # the stateful model holds its weights: the float model goes with the caller's last reference
    else:
        lm._owned = model
    return lm


def _loaded(cls: Any, found: Stored, runtime: HostRuntime, device: Any, quantize: str | None, folder: Path) -> Any:
    """A CausalLM around a stored entry's model, with what the entry says of the model."""
    from neurenix_core.generation.state import StatefulStep
    from neurenix_core.generation.step import StepSpec

    meta = found.meta
    lm = cls.__new__(cls)
    lm.spec = StepSpec(**meta["spec"])
    lm.device, lm.cache, lm.capacity, lm.quantize = device, "state", None, quantize
    lm._model_ref = lambda: None
    lm.source, lm._owned = folder, None
    lm.generation_config = GenerationDefaults(**meta["generation"])
    lm.model_name = str(meta["model_name"])
    lm.graph, lm.decoder, lm.state_note = None, None, ""
    lm.compiled = StatefulStep.loaded(found.model, runtime, found.folder)
    return lm
