"""The step model: a Hugging Face causal LM as one function of (tokens, mask, positions, past).

``export_step`` wraps the model so that its inputs are ``input_ids (B, n)``, a ready additive
attention mask ``(B, 1, n, S + n)``, ``position_ids (B, n)`` and the past keys and values of
every layer ``(B, H, S, D)`` (key then value, layer by layer), and its outputs the logits of the
last position ``(B, vocab)`` and the keys and values of the ``n`` new tokens ``(B, H, n, D)``,
which the cache stores in place (``cache.py``): the past is never returned. It is exported once
through ``nx.nn.from_torch`` with the batch, the new-token count ``n`` and the past length ``S``
dynamic; the graph's weights are views of the model's own tensors, not copies.

The mask is built by the caller (``cache.py``) and handed in as a 4-D tensor, which
``transformers`` uses as it is: the import then has no causal-mask construction to follow, and
the same graph serves a growing cache and a fixed-capacity one (unused slots masked out).
PyTorch and transformers are imported here only.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from neurenix_core.generation.errors import NotACausalLMError

__all__ = ["StepSpec", "clear", "export_step", "spec_of"]


@dataclass(frozen=True, slots=True)
class StepSpec:
    """What the cache needs to know of the model: layers, key/value heads, head size, vocabulary."""

    layers: int
    kv_heads: int
    head_dim: int
    vocab: int
    #: The length of a learned position-embedding table (GPT-2's wpe), past which the model has no
    #: position to look up; None for rotary models, which transformers lets run past their config.
    max_positions: int | None


def spec_of(model: Any) -> StepSpec:
    """The model's cache geometry, or NotACausalLMError naming what is missing."""
    import torch

    name = type(model).__name__
    if not isinstance(model, torch.nn.Module) or not hasattr(model, "config"):
        raise NotACausalLMError(f"nx.generate expects a transformers causal LM (GPT2LMHeadModel, LlamaForCausalLM ...), got {name}")
    # transformers' attributes: torch.nn.Module.__getattr__ types them Tensor | Module.
    cfg: Any = model.config
    can_generate = getattr(model, "can_generate", lambda: False)
    if getattr(cfg, "is_encoder_decoder", False) or not can_generate():
        raise NotACausalLMError(
            f"{name} is not a decoder-only causal LM (no language-model head or an encoder-decoder); "
            "load it with AutoModelForCausalLM, or run encoder-decoder models in transformers")
    text = cfg.get_text_config(decoder=True)
    heads = int(text.num_attention_heads)
    head_dim = int(getattr(text, "head_dim", None) or text.hidden_size // heads)
    kv_heads = int(getattr(text, "num_key_value_heads", None) or heads)
    limit = getattr(text, "max_position_embeddings", None)
    tokens = getattr(model, "get_input_embeddings")()  # noqa: B009 - a transformers method, untyped on torch.nn.Module
    tables = {m.num_embeddings for m in model.modules() if isinstance(m, torch.nn.Embedding) and m is not tokens}
    learned = limit is not None and int(limit) in tables
    return StepSpec(int(text.num_hidden_layers), kv_heads, head_dim, int(text.vocab_size), int(limit) if learned and limit is not None else None)


def _last_logits_only(model: Any) -> dict[str, Any]:
    """``logits_to_keep=1`` where the model's forward takes it: the head runs on the last
    position only (a 1024-token prefill of a 49,152-word vocabulary skips 58 GFLOP and 200 MB),
    as transformers' own generate asks."""
    import inspect

    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):  # a forward without a signature: the whole head, as before
        return {}
    return {"logits_to_keep": 1} if "logits_to_keep" in params else {}


def _wrapper(model: Any) -> Any:
    import torch
    from transformers import DynamicCache

    keep = _last_logits_only(model)

    class Step(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, mask: Any, position_ids: Any, *past: Any) -> tuple[Any, ...]:
            cache = DynamicCache(config=self.model.config)
            layers: Any = cache.layers  # full-attention layers here (keys, values, lazy_initialization)
            for i, layer in enumerate(layers):
                # Filled directly: DynamicCache(ddp_cache_data=...) concatenates onto an empty 1-D
                # tensor first, which torch allows and the opset's concat does not.
                layer.lazy_initialization(past[2 * i], past[2 * i + 1])
                layer.keys, layer.values = past[2 * i], past[2 * i + 1]
            out = self.model(input_ids=input_ids, attention_mask=mask, position_ids=position_ids, cache=cache, use_cache=True, **keep)
            new: list[Any] = []
            for layer, k_past in zip(out.cache.layers, past[::2], strict=True):
                s = k_past.shape[2]  # the present is the past with the n new slots appended: keep those
                new += [layer.keys[:, :, s:], layer.values[:, :, s:]]
            return (out.logits[:, -1, :], *new)

    return Step().eval()


def _examples(spec: StepSpec) -> tuple[Any, ...]:
    """Example inputs at batch 2, 3 new tokens, 5 past slots: no size 1 (torch.export would fix
    such an axis) and no two dynamic axes of equal size (it would tie them)."""
    import torch

    b, n, s = 2, 3, 5
    mask = np.zeros((b, 1, n, s + n), np.float32)
    for q in range(n):
        mask[:, 0, q, s + q + 1:] = np.finfo(np.float32).min
    past = [torch.zeros(b, spec.kv_heads, s, spec.head_dim) for _ in range(2 * spec.layers)]
    ids = torch.zeros(b, n, dtype=torch.int64)
    return (ids, torch.from_numpy(mask), torch.arange(s, s + n).expand(b, n).contiguous(), *past)


#: Exports kept per model: preparing one model for several devices exports once. A model whose
#: weights change after preparation is prepared again after nx.generation.clear().
_EXPORTS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def clear() -> None:
    """Forget every exported step model (after changing a prepared model's weights)."""
    _EXPORTS.clear()


def export_step(model: Any, spec: StepSpec) -> Any:
    """The step model imported into neurenix (a GraphModule) with dynamic batch, n and S."""
    from neurenix_core.generation.step_cache import load_or_export

    done = _EXPORTS.get(model)
    if done is None:  # from the step-model cache where another process exported this model already
        done = _EXPORTS[model] = load_or_export(model, spec, lambda: _export(model, spec))
    return done


def _export(model: Any, spec: StepSpec) -> Any:
    import torch

    from neurenix_core.graph.models.importing import from_torch_export

    auto = torch.export.Dim.AUTO
    shapes = {"input_ids": {0: auto, 1: auto}, "mask": {0: auto, 2: auto, 3: auto}, "position_ids": {0: auto, 1: auto},
              "past": tuple({0: auto, 2: auto} for _ in range(2 * spec.layers))}
    with torch.no_grad():
        return from_torch_export(_wrapper(model), _examples(spec), dynamic_shapes=shapes, static=False,
                                 share_weights=True)
