"""Hugging Face architectures built from tiny configs (random weights, nothing downloaded).

Each entry builds ``(model, inputs(batch, seq))``: the model in eval mode and a function giving
its keyword inputs at a batch size and sequence length (images ignore ``seq``). Biases stay as
Hugging Face initialises them (zero). Used by the dynamic-shape and generation tests.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

Inputs = Callable[[int, int], dict[str, Any]]

_TEXT = {"vocab_size": 128, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
             "max_position_embeddings": 128}


def _ids(batch: int, seq: int, seed: int = 0, *, pad_last: bool = True) -> dict[str, Any]:
    """Token ids with an attention mask that pads the tail of the first sequence (when batch > 1)."""
    rng = np.random.default_rng(seed + 31 * batch + seq)
    ids = torch.from_numpy(rng.integers(3, 128, (batch, seq)))
    mask = torch.ones(batch, seq, dtype=torch.int64)
    if pad_last and batch > 1 and seq > 2:
        mask[0, seq - seq // 3:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def _pixels(batch: int, channels: int, size: int) -> dict[str, Any]:
    g = torch.Generator().manual_seed(7 * batch + size)
    return {"pixel_values": torch.randn(batch, channels, size, size, generator=g)}


def bert() -> tuple[Any, Inputs]:
    from transformers import BertConfig, BertModel
    return BertModel(BertConfig(**_TEXT)), _ids


def distilbert() -> tuple[Any, Inputs]:
    from transformers import DistilBertConfig, DistilBertModel
    cfg = DistilBertConfig(vocab_size=128, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=128)
    return DistilBertModel(cfg), _ids


def albert() -> tuple[Any, Inputs]:
    from transformers import AlbertConfig, AlbertModel
    return AlbertModel(AlbertConfig(embedding_size=16, **_TEXT)), _ids


def roberta() -> tuple[Any, Inputs]:
    from transformers import RobertaConfig, RobertaModel
    return RobertaModel(RobertaConfig(**_TEXT)), _ids


def vit() -> tuple[Any, Inputs]:
    from transformers import ViTConfig, ViTModel
    cfg = ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
    return ViTModel(cfg), lambda b, s: _pixels(b, 3, 32)


def clip_text() -> tuple[Any, Inputs]:
    from transformers import CLIPTextConfig, CLIPTextModel
    cfg = CLIPTextConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                         max_position_embeddings=128)
    return CLIPTextModel(cfg), _ids


def clip_vision() -> tuple[Any, Inputs]:
    from transformers import CLIPVisionConfig, CLIPVisionModel
    cfg = CLIPVisionConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
    return CLIPVisionModel(cfg), lambda b, s: _pixels(b, 3, 32)


def whisper_encoder() -> tuple[Any, Inputs]:
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder
    cfg = WhisperConfig(vocab_size=128, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, num_mel_bins=8,
                        max_source_positions=32)

    def inputs(b: int, s: int) -> dict[str, Any]:
        g = torch.Generator().manual_seed(b)
        return {"input_features": torch.randn(b, 8, 64, generator=g)}  # Whisper's frames are fixed by the config
    return WhisperEncoder(cfg), inputs


def t5_encoder() -> tuple[Any, Inputs]:
    from transformers import T5Config, T5EncoderModel
    cfg = T5Config(vocab_size=128, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4)
    return T5EncoderModel(cfg), _ids


def convnext() -> tuple[Any, Inputs]:
    from transformers import ConvNextConfig, ConvNextModel
    cfg = ConvNextConfig(num_channels=3, num_stages=2, hidden_sizes=[8, 16], depths=[1, 1], image_size=32)
    return ConvNextModel(cfg), lambda b, s: _pixels(b, 3, 32)


def swin() -> tuple[Any, Inputs]:
    from transformers import SwinConfig, SwinModel
    cfg = SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[2, 2], num_heads=[2, 4], window_size=4)
    return SwinModel(cfg), lambda b, s: _pixels(b, 3, 32)


def gpt2() -> tuple[Any, Inputs]:
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(vocab_size=128, n_embd=32, n_layer=2, n_head=4, n_positions=128)
    return GPT2LMHeadModel(cfg), _ids


def llama() -> tuple[Any, Inputs]:
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(num_key_value_heads=2, **_TEXT)
    return LlamaForCausalLM(cfg), _ids


def qwen2() -> tuple[Any, Inputs]:
    from transformers import Qwen2Config, Qwen2ForCausalLM
    cfg = Qwen2Config(num_key_value_heads=2, **_TEXT)
    return Qwen2ForCausalLM(cfg), _ids


def mistral() -> tuple[Any, Inputs]:
    from transformers import MistralConfig, MistralForCausalLM
    cfg = MistralConfig(num_key_value_heads=2, sliding_window=None, **_TEXT)
    return MistralForCausalLM(cfg), _ids


ENCODERS: dict[str, Callable[[], tuple[Any, Inputs]]] = {
    "bert": bert, "distilbert": distilbert, "albert": albert, "roberta": roberta, "vit": vit, "clip_text": clip_text,
    "clip_vision": clip_vision, "whisper_encoder": whisper_encoder, "t5_encoder": t5_encoder, "convnext": convnext, "swin": swin,
}
DECODERS: dict[str, Callable[[], tuple[Any, Inputs]]] = {"gpt2": gpt2, "llama": llama, "qwen2": qwen2, "mistral": mistral}
ALL = ENCODERS | DECODERS


def build(name: str, seed: int = 0) -> tuple[Any, Inputs]:
    """The model ``name`` with seeded random weights, in eval mode, and its inputs function."""
    torch.manual_seed(seed)
    model, inputs = ALL[name]()
    return model.eval(), inputs


def build_varied(name: str) -> Any:
    """A causal LM of ``build`` with its matrices and embeddings redrawn at a scale where greedy
    decoding varies (the configs' initialisation makes nearly uniform logits, one token repeated)."""
    model, _ = build(name)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return model


def outputs(result: Any) -> list[np.ndarray]:
    """A transformers output (ModelOutput, tuple or tensor) as NumPy arrays in pytree order."""
    import torch.utils._pytree as pytree
    leaves = [x for x in pytree.tree_leaves(result) if isinstance(x, torch.Tensor)]
    return [x.detach().numpy() for x in leaves]
