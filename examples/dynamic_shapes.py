"""A BERT imported with a batch-1 example runs at batch 3 (and other lengths): dynamic shapes.

    python examples/dynamic_shapes.py [--device cpu:0]

Builds a tiny BERT from a config (random weights, nothing downloaded), imports it with one
sequence of 16 tokens, prints which input axes came out dynamic, then runs it at batch 3 /
length 8 and batch 2 / length 11 and prints each output's shape and its largest error relative
to PyTorch (torch.export's own ``Dim("batch")`` works with a batch-1 example too: see
docs/dynamic-shapes.md). Exits non-zero if an output differs from PyTorch by more than 1e-4
(relative to its largest value).
"""

from __future__ import annotations

import argparse
import sys
import warnings

import numpy as np

TOLERANCE = 1e-4  # fp32 on any device vs torch eager, relative to the output's largest value


def _tiny_bert():  # type: ignore[no-untyped-def]
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                        max_position_embeddings=128)
    return BertModel(config).eval()


def _tokens(batch: int, length: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(3, 128, (batch, length)).astype(np.int64)
    mask = np.ones((batch, length), np.int64)
    if batch > 1:
        mask[0, length // 2:] = 0  # the first sequence is padded: the mask really matters
    return {"input_ids": ids, "attention_mask": mask}


def _run(model, compiled, batch: int, length: int) -> float:  # type: ignore[no-untyped-def]
    import torch

    x = _tokens(batch, length, seed=batch * 100 + length)
    with torch.no_grad():
        want = model(**{k: torch.from_numpy(v) for k, v in x.items()})
    got = compiled(x["input_ids"], x["attention_mask"])
    worst = 0.0
    for name, g, w in zip(("last_hidden_state", "pooler_output"), got, (want.last_hidden_state, want.pooler_output)):
        g, w = g.numpy(), w.numpy()
        err = float(np.abs(g - w).max() / np.abs(w).max())
        worst = max(worst, err)
        print(f"  batch {batch}, length {length}: {name} shape {tuple(g.shape)}, max relative error vs torch {err:.1e}")
    return worst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu:0")
    args = parser.parse_args(argv)

    import torch

    import neurenix_core as nx
    from neurenix_core import nn

    model = _tiny_bert()
    example = {k: torch.from_numpy(v) for k, v in _tokens(1, 16, seed=0).items()}  # ONE sequence of 16 tokens
    with warnings.catch_warnings():
        warnings.simplefilter("error", nx.NeurenixWarning)  # an axis that came out fixed would be named here
        imported = nn.from_torch(model, example)
    for spec in imported.symbolic_graph().inputs:
        print(f"input {spec.name}: example shape {spec.shape}, dynamic axes {spec.dynamic}, shape {spec.display_shape}")

    precision = {} if args.device.startswith("cpu") else {"precision": "fp32"}
    compiled = nx.compile(imported, device=args.device, **precision)
    print(f"device: {args.device}")
    worst = max(_run(model, compiled, 3, 8), _run(model, compiled, 2, 11))
    print(f"worst relative error: {worst:.1e} (tolerance {TOLERANCE:g})")
    return 0 if worst <= TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main())
