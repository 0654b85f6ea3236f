"""How many Hugging Face transformers architectures neurenix imports through torch.export and runs correctly.

Every model type of transformers' auto mappings (``MODEL_MAPPING_NAMES``, and the task mappings
for a type with no base model there: causal LM, masked LM, image classification ...) is built
from its config class with tiny sizes and random weights (nothing is downloaded: no hub access),
given seeded inputs made from its ``main_input_name`` and config, imported with
``nx.nn.from_torch(model, inputs, static=True)``, compiled for each ``--device`` (a comma-separated
list: the build, the eager run and the export, most of the time, are done once per type) and run;
its first tensor output (``last_hidden_state``, ``logits`` ...) is compared with eager PyTorch's.
Only neurenix's public API is used, so the same script measures older and newer versions of the package.

    .venv/bin/python benchmarks/transformers_sweep.py --json now.json            # every type, cpu:0
    .venv/bin/python benchmarks/transformers_sweep.py --types bert,gpt2 -v
    NEURENIX_EMULATE=cuda,tpu,npu,edgetpu JAX_PLATFORMS=cpu XLA_FLAGS=--xla_force_host_platform_device_count=4 \
        .venv/bin/python benchmarks/transformers_sweep.py --device npu:0,tpu:0,cuda:0,edgetpu:0 --precision tpu:0=fp32
    .venv/bin/python benchmarks/transformers_sweep.py --json new.json --diff now.json

Per device: ``nx.compile(model, device, precision)`` (what ``model.to(device)`` does on the first
call), with ``--precision`` one value for every device or per device (``tpu:0=fp32``; a device not
named compiles in its backend's default, which its summary names: tpu:0 bf16, the others fp32).
The tolerance is the precision's (``TOLERANCES``): fp32 rtol 1e-3 atol 1e-4 (the sweep's bar),
tf32 1e-2/1e-3, fp16 1e-2/1e-2, bf16 1e-1/1e-1 (a 16-bit bar only says the output is not garbage).
Each record also keeps the compiled model's ``placement.line()`` and ``on_device``: True when no
node was placed on cpu:0 (the partitioner places there what the device's plugin does not lower).
edgetpu:0 compiles float models as float32 TFLite models that LiteRT runs on the host CPU (the
Edge TPU itself executes only int8 models), so its fp32 bar is LiteRT's float32 arithmetic.

Tiny build: the config class's defaults, with every size attribute it has shrunk (hidden sizes
32, 2 layers, 4 heads, vocabulary 128, images 32x32 ...: ``SHRINK``; per-stage lists such as
``depths`` and ``hidden_sizes`` scaled down; nested configs such as ``text_config`` shrunk the
same way), plus the few per-type fixes in ``OVERRIDES``. A build over ``MAX_PARAMS`` parameters
(a size the shrink missed) is not run. Inputs: batch 2; token ids (and ``decoder_input_ids``
where forward takes them) of length 8 that avoid the config's special token ids; images of
``image_size``; raw audio of 4000 samples; filterbank features of the config's mel bins.

Outcome of a model type:

    pass            imported, ran on the device, and the first output matched eager PyTorch
                    (float: the precision's tolerance, above; integer and bool: exact)
    wrong           ran, but the first output differs (or its shape or dtype kind does)
    run refused     imported, but moving or calling the model raised a NeurenixError (typed refusal)
    import refused  nx.nn.from_torch raised a NeurenixError while torch.export alone succeeds
    export failed   torch.export itself cannot capture the model, or (for a wrong result) its own
                    program differs from eager as much: not neurenix's doing
    crash           neurenix raised anything else (not a NeurenixError): a bug
    timeout         the build, eager run and import, or one device's compile and run, took longer
                    than --timeout seconds (SIGALRM)
    unsupported     no tiny build: no config or model class, inputs this script cannot make,
                    eager PyTorch fails on them, or its outputs are random (two runs differ)

torch.export is run alone only when from_torch fails (as ``opinfo_sweep.py`` does), so an
``export failed`` is torch's refusal of exactly the call from_torch made (``static=True``: the
example's shapes). ``--dynamic`` imports with from_torch's default dynamic axes instead.
``imported`` in the summary is pass + wrong + run refused over the types whose export succeeded.
``--json`` writes one record per type and device (name, model class, device, outcome, error: the
exception type and first message line, precision, on_device, placement), sorted, so two runs diff
cleanly, and rewritten after every type (meta ``complete`` false until the last), so a run cut
short is usable; ``--diff OLD.json`` prints the (type, device) pairs whose outcome changed. A full run (about 670 types, transformers 5.x) takes the better part of an hour
on 2 vCPUs.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import inspect
import io
import json
import logging
import os
import platform
import re
import sys
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# benchmarks/ holds openvino.py, onnxruntime.py ...: as the script's folder it would shadow the runtimes.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "benchmarks"]

import numpy as np


def _opinfo_sweep() -> Any:
    """benchmarks/opinfo_sweep.py, by path (its folder is off sys.path, above): the sweep
    scaffolding both scripts share (the SIGALRM timeout, error first lines, the CPU's name)."""
    spec = importlib.util.spec_from_file_location("neurenix_opinfo_sweep", ROOT / "benchmarks" / "opinfo_sweep.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_SHARED = _opinfo_sweep()
Timeout, alarm, cpu_model, first_line, host_arrays = (_SHARED.Timeout, _SHARED.alarm, _SHARED.cpu_model, _SHARED.first_line,
                                                      _SHARED.host_arrays)

OUTCOMES = ("pass", "wrong", "run refused", "import refused", "crash", "timeout", "export failed", "unsupported")
RTOL, ATOL = 1e-3, 1e-4
#: (rtol, atol) per precision a device compiled the model in (``Compiled.precision``). float32 is
#: the sweep's bar; a 16-bit mode rounds every matmul's inputs (bfloat16: 8 significant bits, so
#: 2 layers of random weights are off by a few percent), which only a loose bar can pass: the
#: sweep is meant to be run in fp32 (``--precision tpu:0=fp32``), the 16-bit bars only say the
#: model is not garbage.
TOLERANCES: dict[str, tuple[float, float]] = {"fp32": (RTOL, ATOL), "tf32": (1e-2, 1e-3), "fp16": (1e-2, 1e-2), "bf16": (1e-1, 1e-1)}
BATCH, SEQ, DECODER_SEQ, AUDIO_SAMPLES = 2, 8, 4, 4000
VOCAB = 128
#: A tiny build with more parameters than this missed a size attribute: it is not run (memory:
#: 1.2 GB of float32 weights, held by eager, the export and the import at once). Builds of 40M to
#: 257M parameters (Florence-2, Gemma 4, SeamlessM4T, VibeVoice...) run and pass.
MAX_PARAMS = 300_000_000

#: Integer size attributes set where the config has them (a config ignores the ones it lacks).
SHRINK: dict[str, int] = {
    # widths
    "hidden_size": 32, "d_model": 32, "n_embd": 32, "embed_dim": 32, "dim": 32, "model_dim": 32, "emb_dim": 32,
    "intermediate_size": 64, "ffn_dim": 64, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "d_ff": 64, "n_inner": 64,
    "hidden_dim": 64, "mlp_dim": 64, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32,
    "projection_dim": 32, "text_embed_dim": 32, "vision_embed_dim": 32, "d_kv": 8, "head_dim": 8, "attention_head_size": 8,
    "kv_channels": 8, "embedding_size": 32, "word_embed_proj_dim": 32, "out_hidden_size": 32, "codebook_dim": 32,
    # rotary and latent attention (GPT-J's rotary_dim, DeepSeek's multi-head latent attention: head_dim 8)
    "rotary_dim": 4, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 8, "kv_lora_rank": 16, "q_lora_rank": 16,
    # state-space layers (Mamba-2 heads divide expand * hidden_size)
    "mamba_n_heads": 4, "mamba_d_head": 16, "mamba_d_state": 16, "state_size": 16, "time_step_rank": 8,
    # depth
    "num_hidden_layers": 2, "num_layers": 2, "n_layer": 2, "n_layers": 2, "encoder_layers": 2, "decoder_layers": 2,
    "num_decoder_layers": 2, "num_encoder_layers": 2, "depth": 2,
    # heads
    "num_attention_heads": 4, "num_heads": 4, "n_head": 4, "n_heads": 4, "encoder_attention_heads": 4,
    "decoder_attention_heads": 4, "num_key_value_heads": 2, "num_kv_heads": 2, "decoder_num_attention_heads": 4,
    # experts
    "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_num_experts": 4,
    # vocabularies and positions
    "vocab_size": VOCAB, "max_position_embeddings": 128, "n_positions": 128, "n_ctx": 128, "max_source_positions": 32,
    "max_target_positions": 64, "type_vocab_size": 2,
    # images
    "image_size": 32, "patch_size": 8, "window_size": 4, "num_mel_bins": 16,
}

#: Per-stage lists (one entry per stage of a CNN / hierarchical vision model): how to shrink each entry.
LIST_SHRINK: dict[str, Any] = {
    "depths": lambda v: 1, "hidden_sizes": lambda v: max(4, v // 16), "num_heads": lambda v: max(1, v // 8),
    "embed_dims": lambda v: max(8, v // 16), "conv_dim": lambda v: 32, "num_attention_heads": lambda v: max(1, v // 8),
    "encoder_hidden_sizes": lambda v: max(4, v // 16), "block_sizes": lambda v: 1, "num_layers": lambda v: 1,
    "layers": lambda v: 1, "mlp_ratios": lambda v: v, "layer_depths": lambda v: 1,
}

#: Per-type fixes where the generic shrink gives a build that cannot run (keyword arguments of the config).
OVERRIDES: dict[str, dict[str, Any]] = {
    "funnel": {"block_sizes": [1, 1], "num_decoder_layers": 1},
    "gpt_neo": {"attention_types": [[["global", "local"], 1]]},
    "reformer": {"axial_pos_shape": [2, 4], "axial_pos_embds_dim": [16, 16], "attn_layers": ["local", "lsh"]},
    "xlnet": {"d_head": 8},
    "longformer": {"attention_window": 4},
    "led": {"attention_window": 4},
    "bigbird_pegasus": {"attention_type": "original_full"},
    "big_bird": {"attention_type": "original_full"},
}

#: The input names this script makes (``main_input_name`` of the model); others are unsupported.
MADE_INPUTS = ("input_ids", "pixel_values", "input_values", "input_features")


class Unsupported(Exception):
    """No tiny build of this type (the reason is the message)."""


# ----------------------------------------------------------------------------- which types
def model_types() -> dict[str, str]:
    """model type -> the model class to build: the base model of ``MODEL_MAPPING_NAMES``, else the
    first task mapping (in transformers' order) that lists the type."""
    from transformers.models.auto import modeling_auto

    chosen: dict[str, str] = {}
    tasks = sorted(n for n in dir(modeling_auto) if n.startswith("MODEL_FOR_") and n.endswith("_MAPPING_NAMES"))
    for mapping in ["MODEL_MAPPING_NAMES", *tasks]:
        for model_type, names in getattr(modeling_auto, mapping).items():
            chosen.setdefault(model_type, names if isinstance(names, str) else names[0])
    return dict(sorted(chosen.items()))


# ----------------------------------------------------------------------------- tiny builds
def shrink_kwargs(config: Any) -> dict[str, Any]:
    """The config keyword arguments that make ``config`` (a default instance) tiny."""
    from transformers import PreTrainedConfig

    kwargs: dict[str, Any] = {}
    for name, value in vars(config).items():
        if name.startswith("_"):
            continue
        if isinstance(value, PreTrainedConfig):
            kwargs[name] = tiny_config(type(value), value)
        elif name in SHRINK and isinstance(value, int) and not isinstance(value, bool):
            kwargs[name] = min(value, SHRINK[name]) if name not in ("image_size",) else SHRINK[name]
        elif name in LIST_SHRINK and isinstance(value, (list, tuple)) and value and all(type(v) is int for v in value):
            kwargs[name] = type(value)(LIST_SHRINK[name](v) for v in value)
        elif name == "image_size" and isinstance(value, (list, tuple)) and len(value) == 2:
            kwargs[name] = [SHRINK["image_size"]] * 2
    kwargs["use_cache"] = False
    if isinstance(kwargs.get("num_attention_heads"), int) and isinstance(kwargs.get("num_key_value_heads"), int):
        kwargs["num_key_value_heads"] = min(kwargs["num_key_value_heads"], kwargs["num_attention_heads"])
    if "kv_lora_rank" in kwargs and "num_attention_heads" in kwargs:  # latent attention expands keys to every head
        kwargs["num_key_value_heads"] = kwargs["num_attention_heads"]
    for name in ("rope_parameters", "rope_scaling"):
        rope = getattr(config, name, None)
        if not isinstance(rope, dict):
            continue
        if isinstance(rope.get("mrope_section"), (list, tuple)):
            kwargs[name] = rope | {"mrope_section": mrope_section(len(rope["mrope_section"]))}
        elif "mrope_section" in getattr(config, "ignore_keys_at_rope_validation", ()):  # the model's default split: 3 parts
            kwargs[name] = rope | {"mrope_section": mrope_section(3)}
    return kwargs


def mrope_section(parts: int) -> list[int]:
    """A multimodal rotary split (Qwen2-VL's temporal / height / width sections) of the tiny head:
    the sections sum to head_dim // 2 (4), each at least 1."""
    half = SHRINK["head_dim"] // 2
    return [1] * (parts - 1) + [half - parts + 1] if parts <= half else [1] * parts


def special_ids(config: Any) -> dict[str, int]:
    """The config's special token ids and indices (attribute name -> id), nested configs excluded."""
    return {name: value for name, value in vars(config).items()
            if type(value) is int and (name.endswith(("_token_id", "_token_index")) or name.endswith("_id") and "token" in name)}


def tiny_config(config_class: Any, default: Any = None, model_type: str = "") -> Any:
    """``config_class`` with the sizes shrunk (``shrink_kwargs``, ``OVERRIDES``) and its special
    token ids moved into the small vocabulary (an embedding's padding_idx must be in range)."""
    default = config_class() if default is None else default
    kwargs = shrink_kwargs(default) | OVERRIDES.get(model_type, {})
    try:
        return config_class(**with_special_ids(default, kwargs))
    except Exception:  # some configs refuse grouped key/value heads: the retry keeps one per query head
        if not isinstance(kwargs.get("num_key_value_heads"), int):
            raise
    return config_class(**with_special_ids(default, kwargs | {"num_key_value_heads": kwargs.get("num_attention_heads", 4)}))


def with_special_ids(default: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with the config's special token ids moved into the small vocabulary."""
    kwargs = dict(kwargs)
    vocab = kwargs.get("vocab_size", getattr(default, "vocab_size", None))
    if isinstance(vocab, int):
        free = vocab - 1
        for name, value in special_ids(default).items():
            if value >= vocab:
                kwargs[name] = free
                free -= 1
    return kwargs


def model_class(name: str) -> Any:
    import transformers

    try:
        return getattr(transformers, name)
    except (AttributeError, ImportError, RuntimeError) as exc:  # a class whose extra dependency is missing
        raise Unsupported(f"no class {name}: {first_line(exc)}") from exc


def build(torch: Any, model_type: str, class_name: str, seed: int) -> Any:
    """The tiny model of ``model_type`` in eval mode, random weights from ``seed``."""
    from transformers import CONFIG_MAPPING

    if model_type not in CONFIG_MAPPING:
        raise Unsupported("no config class")
    cls = model_class(class_name)
    try:
        config = tiny_config(CONFIG_MAPPING[model_type], model_type=model_type)
    except Exception as exc:  # the config refuses the shrunk sizes: no tiny build
        raise Unsupported(f"tiny config: {first_line(exc)}") from exc
    params = 0
    # a class that cannot build on the meta device is counted for real below
    with contextlib.suppress(Exception), torch.device("meta"):
        params = sum(p.numel() for p in cls(config).parameters())
    if params > MAX_PARAMS:
        raise Unsupported(f"tiny build has {params / 1e6:.0f}M parameters (a size the shrink misses)")
    torch.manual_seed(seed)
    try:
        model = cls(config)
    except Exception as exc:  # the model refuses the tiny config
        raise Unsupported(f"build: {first_line(exc)}") from exc
    unconstant(torch, model, seed)
    return model.eval()


def unconstant(torch: Any, model: Any, seed: int) -> None:
    """Seeded noise (std 0.02) on every float parameter whose elements are all equal. Some models
    initialize a tensor to a constant (afmoe's router gate to zeros): every token's router scores
    then tie exactly, and which experts win is the order PyTorch's topk leaves equal values in,
    which it does not specify (neurenix's topk takes the lower index, as ONNX's TopK). Random
    weights have no exact ties."""
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point() and p.numel() > 1 and bool((p == p.reshape(-1)[0]).all()):
                p.add_(0.02 * torch.randn(p.shape, generator=generator, dtype=p.dtype))


def find(config: Any, name: str) -> Any:
    """``config.name``, else the first nested config's (``text_config``, ``vision_config`` ...)."""
    from transformers import PreTrainedConfig

    if getattr(config, name, None) is not None:
        return getattr(config, name)
    for value in vars(config).values():
        if isinstance(value, PreTrainedConfig):
            found = find(value, name)
            if found is not None:
                return found
    return None


def token_ids(torch: Any, config: Any, shape: tuple[int, ...]) -> Any:
    vocab = find(config, "vocab_size")
    vocab = min(int(vocab), VOCAB) if isinstance(vocab, int) and vocab > 0 else VOCAB
    avoid = set(special_ids(config).values())
    allowed = torch.tensor([i for i in range(vocab) if i not in avoid] or [0])
    return allowed[torch.randint(0, len(allowed), shape)]


def make_inputs(torch: Any, model: Any) -> dict[str, Any]:
    """Seeded example inputs for ``model``'s main input (and decoder ids where forward takes them)."""
    config = model.config
    params = inspect.signature(model.forward).parameters
    main = getattr(model, "main_input_name", "input_ids")
    if main not in params:  # a vision tower inheriting input_ids: forward's first input this script makes
        main = next((name for name in params if name in MADE_INPUTS), main)
    inputs: dict[str, Any] = {}
    if main == "input_ids":
        inputs["input_ids"] = token_ids(torch, config, (BATCH, SEQ))
    elif main == "pixel_values":
        inputs["pixel_values"] = images(torch, config)
    elif main == "input_values":
        inputs["input_values"] = torch.randn(BATCH, AUDIO_SAMPLES)
    elif main == "input_features":
        inputs["input_features"] = features(torch, config)
    else:
        raise Unsupported(f"main input {main!r} (this script makes {', '.join(MADE_INPUTS)})")
    if main == "input_ids" and "pixel_values" in params and dual_encoder(config):  # CLIP, SigLIP: both towers run
        inputs["pixel_values"] = images(torch, config)
    if "decoder_input_ids" in params and main != "input_ids" or "decoder_input_ids" in params and config.is_encoder_decoder:
        inputs["decoder_input_ids"] = token_ids(torch, config, (BATCH, DECODER_SEQ))
    return inputs


def images(torch: Any, config: Any) -> Any:
    size = find(config, "image_size") or 32
    size = tuple(size) if isinstance(size, (list, tuple)) else (int(size), int(size))
    channels = find(config, "num_channels") or 3
    return torch.randn(BATCH, int(channels), *size[-2:])


def dual_encoder(config: Any) -> bool:
    """A text tower beside a vision tower whose forward needs both inputs (CLIP, SigLIP), not a
    vision-language model placing image features at image tokens of the text."""
    towers = getattr(config, "text_config", None) is not None and getattr(config, "vision_config", None) is not None
    return towers and not any("image_token" in name for name in vars(config))


def features(torch: Any, config: Any) -> Any:
    """Filterbank features: (batch, mel bins, frames) for Whisper-like encoders (twice the source
    positions: two stride-2 convolutions), else (batch, frames, features per frame)."""
    mel = find(config, "num_mel_bins")
    if isinstance(mel, int):
        frames = 2 * int(find(config, "max_source_positions") or 32)
        return torch.randn(BATCH, mel, frames)
    per_frame = find(config, "input_feat_per_channel") or find(config, "feature_size") or find(config, "input_dim")
    if not isinstance(per_frame, int):
        raise Unsupported("input_features: the config names no feature size")
    channels = find(config, "input_channels") or 1
    return torch.randn(BATCH, 64, per_frame * int(channels))


# ----------------------------------------------------------------------------- one type
def tensor_leaves(torch: Any, out: Any) -> list[Any]:
    from torch.utils._pytree import tree_flatten

    return [leaf for leaf in tree_flatten(out)[0] if isinstance(leaf, torch.Tensor)]


def eager(torch: Any, model: Any, inputs: dict[str, Any]) -> tuple[int, np.ndarray]:
    """(index among the model's tensor outputs, value) of its first floating output, eager."""
    with torch.no_grad():
        leaves = tensor_leaves(torch, model(**inputs))
        again = tensor_leaves(torch, model(**inputs))
    for index, leaf in enumerate(leaves):
        if leaf.dtype.is_floating_point and leaf.dtype != torch.bfloat16:
            if not torch.equal(leaf, again[index]):
                raise Unsupported("random outputs (two eager runs differ)")
            return index, leaf.detach().numpy().copy()
    raise Unsupported("no float32 tensor output")


def mismatch(want: np.ndarray, have: np.ndarray, rtol: float = RTOL, atol: float = ATOL) -> str:
    """'' when ``have`` matches ``want`` within (rtol, atol), else what differs."""
    if have.shape != want.shape:
        return f"shape {have.shape}, torch {want.shape}"
    if (have.dtype.kind == "f") != (want.dtype.kind == "f"):
        return f"dtype {have.dtype}, torch {want.dtype}"
    if want.dtype.kind != "f":
        return "" if np.array_equal(want, have) else f"{int((want != have).sum())}/{want.size} elements differ"
    w, h = want.astype(np.float64), have.astype(np.float64)
    close = np.isclose(h, w, rtol=rtol, atol=atol, equal_nan=True)
    if close.all():
        return ""
    finite = np.isfinite(w) & np.isfinite(h)
    err = float(np.max(np.abs(np.where(finite, w - h, 0.0)))) if finite.any() else float("nan")
    return f"max abs error {err:.3g} ({int((~close).sum())}/{w.size} off)"


def torch_export_error(torch: Any, model: Any, inputs: dict[str, Any]) -> str:
    """'' when torch.export (and its decompositions) captures the model alone, else the error."""
    try:
        torch.export.export(model, (), dict(inputs)).run_decompositions({})
    except Exception as exc:  # noqa: BLE001 - any failure of torch.export is torch's
        return first_line(exc)
    return ""


@dataclasses.dataclass
class Prepared:
    """A type built, run eagerly and imported once: what every device's run compares against."""

    model: Any
    inputs: dict[str, Any]
    index: int
    want: np.ndarray
    imported: Any
    #: exported_differs' answer, computed on the first wrong result and kept for the other devices.
    unfaithful: str | None = None


def prepare(torch: Any, nx: Any, errors: Any, model_type: str, class_name: str, seed: int,
            static: bool = True) -> Prepared | tuple[str, str]:
    """The tiny model of ``model_type`` built, its eager output and its import; or (outcome, error)
    where that already decides the type on every device (unsupported, export failed, import refused, crash)."""
    try:
        model = build(torch, model_type, class_name, seed)
        torch.manual_seed(seed)
        inputs = make_inputs(torch, model)
        index, want = eager(torch, model, inputs)
    except Unsupported as exc:
        return "unsupported", str(exc)
    except Exception as exc:  # noqa: BLE001 - eager PyTorch refuses the tiny build: not ours to judge
        return "unsupported", f"eager torch raised {first_line(exc)}"
    try:
        imported = nx.nn.from_torch(model, dict(inputs), static=static)
    except Exception as exc:  # noqa: BLE001 - sorted below
        export = torch_export_error(torch, model, inputs)
        if export:
            return "export failed", export
        return ("import refused" if isinstance(exc, errors.NeurenixError) else "crash"), first_line(exc)
    return Prepared(model, inputs, index, want, imported)


def said_precision(summary: str) -> str:
    """The precision a backend's ``Compiled.summary`` says it compiled in when none was asked for
    (``Compiled.precision`` is then None): tpu:0 says bf16, the others fp32; "" if it names none."""
    found = re.search(r"\b(fp32|tf32|fp16|bf16|int8)\b", summary)
    return found.group(1) if found else ""


def tolerance(precision: str) -> tuple[float, float]:
    """(rtol, atol) for a compiled model's precision: ``TOLERANCES``, float32's for anything else."""
    return TOLERANCES.get(precision, TOLERANCES["fp32"])


def run_device(torch: Any, nx: Any, errors: Any, prepared: Prepared, device: str, precision: str = "") -> dict[str, Any]:
    """One device's record fields for a prepared type: outcome, error, the precision it ran in, and
    where its nodes ran (``on_device``: no node placed on cpu:0; ``placement``: the compiled model's
    ``placement.line()``)."""
    fields: dict[str, Any] = {"precision": precision, "on_device": None, "placement": ""}
    try:
        # nx.compile is what GraphModule.to(device)'s first call does; compiling here keeps the
        # Compiled, whose .placement says which nodes ran where, and takes a precision by name
        # (tpu:0 multiplies in bfloat16 unless told fp32).
        compiled = nx.compile(prepared.imported, device=device, precision=precision or None, progress=False)
        outs = host_arrays(compiled(*[t.numpy() for t in prepared.inputs.values()]))
        placement = compiled.placement
        fields.update(precision=precision or said_precision(compiled.summary), on_device=not placement.off_device and not placement.execution,
                      placement=placement.line())
        if prepared.index >= len(outs):
            return fields | {"outcome": "wrong", "error": f"{len(outs)} outputs, the first float one of torch is its output {prepared.index}"}
        got = outs[prepared.index]
    except errors.NeurenixError as exc:
        return fields | {"outcome": "run refused", "error": first_line(exc)}
    except Exception as exc:  # noqa: BLE001 - anything untyped is a bug
        return fields | {"outcome": "crash", "error": first_line(exc)}
    diff = mismatch(prepared.want, got, *tolerance(fields["precision"]))
    if not diff:
        return fields | {"outcome": "pass", "error": ""}
    if prepared.unfaithful is None:
        prepared.unfaithful = exported_differs(torch, prepared.model, prepared.inputs, prepared.index, prepared.want)
    if prepared.unfaithful:
        return fields | {"outcome": "export failed", "error": prepared.unfaithful}
    return fields | {"outcome": "wrong", "error": diff}


def run_type(torch: Any, nx: Any, errors: Any, model_type: str, class_name: str, device: str, seed: int,
             static: bool = True, precision: str = "") -> tuple[str, str]:
    """(outcome, error) of one model type on one device."""
    prepared = prepare(torch, nx, errors, model_type, class_name, seed, static)
    if not isinstance(prepared, Prepared):
        return prepared
    record = run_device(torch, nx, errors, prepared, device, precision)
    return record["outcome"], record["error"]


def exported_differs(torch: Any, model: Any, inputs: dict[str, Any], index: int, want: np.ndarray) -> str:
    """'' when torch.export's own program computes eager's first output, else how it differs: a
    model torch.export captures unfaithfully (ColPali) is torch's miss, not neurenix's."""
    try:
        program = torch.export.export(model, (), dict(inputs)).module()
        with torch.no_grad():
            leaves = tensor_leaves(torch, program(**inputs))
    except Exception as exc:  # noqa: BLE001 - any failure of torch.export is torch's
        return first_line(exc)
    diff = mismatch(want, leaves[index].detach().numpy()) if index < len(leaves) else f"{len(leaves)} outputs"
    return f"torch.export's program differs from eager: {diff}" if diff else ""


# ----------------------------------------------------------------------------- the report
def quiet() -> None:
    warnings.simplefilter("ignore")
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tiny configs only: nothing is downloaded
    for name in ("torch", "torch._dynamo", "torch._export", "torch.export", "torch.fx", "transformers", "neurenix_core", "jax"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    logging.disable(logging.ERROR)


def device_of(record: dict[str, Any], default: str = "cpu:0") -> str:
    """A record's device (records written before the sweep took several devices have none)."""
    return str(record.get("device") or default)


def summary(records: list[dict[str, Any]]) -> str:
    """One block per device: the outcome counts, then imported and pass over the types whose export
    succeeded, and of the passes how many ran wholly on the device (no node placed on cpu:0)."""
    devices = list(dict.fromkeys(device_of(r) for r in records)) or ["cpu:0"]
    return "\n\n".join(device_summary(device, [r for r in records if device_of(r) == device]) for device in devices)


def device_summary(device: str, records: list[dict[str, Any]]) -> str:
    counts = Counter(r["outcome"] for r in records)
    total = len(records) or 1
    lines = [f"{device}:", f"{'outcome':<20}{'types':>6}{'%':>8}"]
    for outcome in OUTCOMES:
        lines.append(f"{outcome:<20}{counts[outcome]:>6}{100 * counts[outcome] / total:>7.1f}%")
    lines.append(f"{'total':<20}{len(records):>6}")
    exported = [r for r in records if r["outcome"] not in ("export failed", "unsupported")]
    imported = sum(r["outcome"] in ("pass", "wrong", "run refused") for r in records)
    if exported:
        whole = sum(r["outcome"] == "pass" and r.get("on_device") is True for r in records)
        lines.append(f"imported: {imported}/{len(exported)} types whose export succeeded "
                     f"({100 * imported / len(exported):.1f}%); pass {counts['pass']}/{len(exported)} "
                     f"({100 * counts['pass'] / len(exported):.1f}%), of which wholly on {device}: {whole}")
    return "\n".join(lines)


def diff(old_path: str, records: list[dict[str, Any]]) -> str:
    """The (type, device) pairs of both runs whose outcome changed (pairs in only one run are counted,
    not listed). An old file without per-record devices is read as its meta's device."""
    data = json.loads(Path(old_path).read_text())
    default = str(data.get("meta", {}).get("device") or "cpu:0").split(",")[0]
    old = {(r["name"], device_of(r, default)): r for r in data["types"]}
    new = {(r["name"], device_of(r)): r for r in records}
    lines = []
    for key in sorted(old.keys() & new.keys()):
        before, after = old[key]["outcome"], new[key]["outcome"]
        if before != after:
            lines.append(f"  {key[0]:<32} {key[1]:<10} {before:>15} -> {after:<15} {new[key]['error']}".rstrip())
    head = (f"{len(lines)} of {len(old.keys() & new.keys())} (type, device) pairs changed since {old_path} "
            f"({len(old.keys() - new.keys())} only there, {len(new.keys() - old.keys())} only here)")
    return "\n".join([head, *lines])


def precisions(text: str, devices: list[str]) -> dict[str, str]:
    """``--precision``: one value for every device ("fp32"), or per device ("tpu:0=fp32,cuda:0=tf32");
    a device not named compiles in its backend's default ("")."""
    if not text:
        return {d: "" for d in devices}
    if "=" not in text:
        return {d: text for d in devices}
    named = dict(part.split("=", 1) for part in text.split(",") if part.strip())
    named = {k.strip(): v.strip() for k, v in named.items()}
    unknown = sorted(set(named) - set(devices))
    if unknown:
        raise ValueError(f"--precision names {', '.join(unknown)}, not in --device {','.join(devices)}")
    return {d: named.get(d, "") for d in devices}


def sweep_type(torch: Any, nx: Any, errors: Any, model_type: str, class_name: str, devices: dict[str, str],
               args: argparse.Namespace) -> list[dict[str, Any]]:
    """One type's records, one per device: built, run eagerly and imported once (under one
    ``--timeout``), then compiled, run and compared on each device in turn (each under its own)."""
    base = {"name": model_type, "model": class_name}
    sink = io.StringIO()
    quietly = contextlib.ExitStack()
    quietly.enter_context(contextlib.redirect_stdout(sink))
    quietly.enter_context(contextlib.redirect_stderr(sink))
    quietly.enter_context(warnings.catch_warnings())
    warnings.simplefilter("ignore")
    with quietly:
        np.random.seed(args.seed)
        try:
            with alarm(args.timeout):
                prepared = prepare(torch, nx, errors, model_type, class_name, args.seed, static=not args.dynamic)
        except Timeout as exc:
            prepared = ("timeout", f"build, eager run and import {exc}")
        if not isinstance(prepared, Prepared):
            outcome, error = prepared
            return [base | {"device": d, "outcome": outcome, "error": error, "precision": p, "on_device": None, "placement": ""}
                    for d, p in devices.items()]
        records = []
        for device, precision in devices.items():
            try:
                with alarm(args.timeout):
                    fields = run_device(torch, nx, errors, prepared, device, precision)
            except Timeout as exc:
                fields = {"outcome": "timeout", "error": f"compile and run {exc}", "precision": precision, "on_device": None, "placement": ""}
            records.append(base | {"device": device} | fields)
    return records


def write_json(path: str, meta: dict[str, Any], records: list[dict[str, Any]], complete: bool) -> None:
    """The records, sorted by (type, device) so two runs diff cleanly; written after every type
    (``complete`` false until the last) so a run cut short still leaves the types it covered."""
    ordered = sorted(records, key=lambda r: (r["name"], r["device"]))
    tmp = Path(f"{path}.tmp")
    tmp.write_text(json.dumps({"meta": meta | {"complete": complete, "types_done": len({r['name'] for r in records})},
                               "types": ordered}, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--types", default="", help="comma-separated model types (exact names, e.g. bert,gpt2)")
    parser.add_argument("--limit", type=int, default=0, help="sweep at most N types (after --types)")
    parser.add_argument("--device", default="cpu:0", help="where the imported model runs, comma-separated for several "
                        "(default cpu:0; npu:0,tpu:0,cuda:0,edgetpu:0 with NEURENIX_EMULATE=npu,tpu,cuda,edgetpu)")
    parser.add_argument("--precision", default="", help="nx.compile(precision=...): one value for every device or per device, "
                        "tpu:0=fp32 (tpu:0's default is bf16); default: each backend's default")
    parser.add_argument("--dynamic", action="store_true", help="import with from_torch's default dynamic axes, not static=True")
    parser.add_argument("--timeout", type=int, default=60, help="seconds for a type's build and import, and again for each device's run (0: none; default 60)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", metavar="PATH", help="write the per-(type, device) records here (rewritten after every type)")
    parser.add_argument("--diff", metavar="OLD.json", help="print the (type, device) pairs whose outcome changed since this file")
    parser.add_argument("-v", "--verbose", action="store_true", help="print each type's outcome to stderr")
    args = parser.parse_args(argv)
    if args.diff and not Path(args.diff).is_file():
        parser.error(f"--diff {args.diff}: no such file")
    device_list = [d.strip() for d in args.device.split(",") if d.strip()]
    try:
        devices = precisions(args.precision, device_list)
    except ValueError as exc:
        parser.error(str(exc))

    quiet()
    started = time.perf_counter()
    import torch
    import transformers

    import neurenix_core as nx
    from neurenix_core import errors

    types = model_types()
    wanted = [s.strip() for s in args.types.split(",") if s.strip()]
    if wanted:
        unknown = [w for w in wanted if w not in types]
        if unknown:
            parser.error(f"--types: not in transformers' auto mappings: {', '.join(unknown)}")
        types = {t: types[t] for t in wanted}
    chosen = list(types.items())[: args.limit or None]
    version = getattr(nx, "__version__", "?")
    where = ", ".join(f"{d}{f' {p}' if p else ''}" for d, p in devices.items())
    print(f"transformers sweep: transformers {transformers.__version__}, torch {torch.__version__}, neurenix {version}, "
          f"numpy {np.__version__}, python {platform.python_version()}")
    print(f"cpu: {cpu_model()} ({os.cpu_count()} cpus), torch threads {torch.get_num_threads()}")
    print(f"{len(chosen)} model types on {where}, {'dynamic' if args.dynamic else 'static'} import, timeout {args.timeout} s, "
          f"seed {args.seed}, tolerances {TOLERANCES}", flush=True)
    meta = {"transformers": transformers.__version__, "torch": torch.__version__, "neurenix": version, "cpu": cpu_model(),
            "device": args.device, "precision": args.precision, "dynamic": args.dynamic, "seed": args.seed,
            "types_filter": args.types, "limit": args.limit, "timeout": args.timeout}

    records: list[dict[str, Any]] = []
    swept = time.perf_counter()
    for index, (model_type, class_name) in enumerate(chosen, 1):
        t0 = time.perf_counter()
        done = sweep_type(torch, nx, errors, model_type, class_name, devices, args)
        records += done
        if args.verbose:
            for r in done:
                print(f"  {model_type:<32} {r['device']:<10} {r['outcome']:<15} {r['error']}", file=sys.stderr)
            print(f"  {model_type:<32} {time.perf_counter() - t0:5.1f}s", file=sys.stderr, flush=True)
        if args.json:
            write_json(args.json, meta, records, complete=index == len(chosen))
        if index % 25 == 0 or index == len(chosen):
            counts = Counter(r["outcome"] for r in records)
            print(f"[{index}/{len(chosen)}] {time.perf_counter() - swept:.0f}s pass {counts['pass']} "
                  f"wrong {counts['wrong']} crash {counts['crash']} (all devices)", file=sys.stderr, flush=True)

    records.sort(key=lambda r: (r["name"], r["device"]))
    print()
    print(summary(records))
    failing = [r for r in records if r["outcome"] not in ("pass", "export failed", "unsupported")]
    if failing:
        print("not passing (export succeeded):")
        for r in failing:
            print(f"  {r['name']:<32} {r['device']:<10} {r['outcome']:<15} {r['error']}")
    print(f"wall time {time.perf_counter() - started:.0f} s (sweep {time.perf_counter() - swept:.0f} s)")
    if args.json:
        print(f"wrote {args.json}")
    if args.diff:
        print(diff(args.diff, records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
