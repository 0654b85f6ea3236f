"""A Llama causal LM imported with one 16-token sequence runs at other batches and lengths.

    python examples/dynamic_decoder.py [--device cpu:0]

Builds a tiny Llama from a config (random weights, nothing downloaded) and imports it with
``nn.from_torch(model, {"input_ids": ..., "attention_mask": ...})``: no ``use_cache`` is passed,
so the import exports it with ``config.use_cache = False`` (logits only) and restores the config.
The causal mask, the padding mask and the rotary embeddings stay symbolic: the model runs at
batch 3 / length 8 (the first sequence padded) and batch 1 / length 40, and the script prints
each logits shape and its largest error relative to PyTorch. Exits non-zero if an output differs
from PyTorch by more than 1e-4 (relative to its largest value) or the import fell back to static shapes.
"""

from __future__ import annotations

import argparse
import sys
import warnings

import numpy as np

TOLERANCE = 1e-4  # fp32 on any device vs torch eager, relative to the output's largest value


def _tiny_llama():  # type: ignore[no-untyped-def]
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         intermediate_size=64, max_position_embeddings=128)
    return LlamaForCausalLM(config).eval()


def _tokens(batch: int, length: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(batch * 100 + length)
    ids = rng.integers(3, 128, (batch, length)).astype(np.int64)
    mask = np.ones((batch, length), np.int64)
    if batch > 1:
        mask[0, length - length // 3:] = 0  # the first sequence is right-padded: the mask really matters
    return {"input_ids": ids, "attention_mask": mask}


def _run(model, compiled, batch: int, length: int) -> float:  # type: ignore[no-untyped-def]
    import torch

    x = _tokens(batch, length)
    with torch.no_grad():
        want = model(**{k: torch.from_numpy(v) for k, v in x.items()}).logits.numpy()
    got = compiled(x["input_ids"], x["attention_mask"]).numpy()
    err = float(np.abs(got - want).max() / np.abs(want).max())
    print(f"  batch {batch}, length {length}: logits shape {tuple(got.shape)}, max relative error vs torch {err:.1e}")
    return err


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu:0")
    args = parser.parse_args(argv)

    import neurenix_core as nx
    from neurenix_core import nn
    from neurenix_core.errors import NeurenixWarning

    model = _tiny_llama()
    with warnings.catch_warnings():
        warnings.simplefilter("error", NeurenixWarning)  # a static-shape fallback would be a warning: fail instead
        imported = nn.from_torch(model, _tokens(1, 16))
    for spec in imported.symbolic_graph().inputs:
        print(f"input {spec.name}: example shape {spec.shape}, dynamic axes {spec.dynamic}, shape {spec.display_shape}")
    print(f"outputs: {len(imported.symbolic_graph().outputs)} (logits); config.use_cache after the import: {model.config.use_cache}")
    compiled = nx.compile(imported, device=args.device, precision="fp32")
    worst = max(_run(model, compiled, 3, 8), _run(model, compiled, 1, 40))
    print(f"largest error {worst:.1e} (tolerance {TOLERANCE:.0e})")
    return 0 if worst <= TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main())
