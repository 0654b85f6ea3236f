"""Token agreement of the peer runtimes (benchmarks/generate_peers.py) with transformers.

    .venv-peers/bin/python -P benchmarks/check_peers.py [--cache DIR] [--threads N]

A tiny Llama (hidden 64, 2 layers, 4 heads / 2 key-value heads, vocabulary 512) with its weights
redrawn from N(0, 0.3²), so greedy decoding wanders over the vocabulary instead of repeating one
token, is saved, exported for every (peer, weights) and decoded greedily for 32 new tokens after
a 16-token prompt. fp32 exports must give exactly transformers' ``generate(do_sample=False)``
tokens (the exit status is 1 otherwise); int8 / int4 agreement is printed, not required.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
from pathlib import Path
from types import ModuleType

import numpy as np

PROMPT, NEW = 16, 32


def _peers() -> ModuleType:
    """benchmarks/generate_peers.py by path (benchmarks/ is not a package; -P keeps it off sys.path)."""
    path = Path(__file__).resolve().parent / "generate_peers.py"
    spec = importlib.util.spec_from_file_location("neurenix_generate_peers", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=Path, help="where the model and exports go (default: a temporary folder)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    peers = _peers()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         intermediate_size=128, vocab_size=512, max_position_embeddings=256, tie_word_embeddings=False)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" not in name:
                param.normal_(0.0, 0.3)
    ids = np.random.default_rng(0).integers(3, config.vocab_size - 1, (1, PROMPT))
    with torch.no_grad():
        out = model.generate(torch.from_numpy(ids), attention_mask=torch.ones(ids.shape, dtype=torch.int64), do_sample=False,
                             max_new_tokens=NEW, min_new_tokens=NEW, pad_token_id=0)
    reference = out[0, PROMPT:].tolist()
    print(f"transformers: {reference}")
    with tempfile.TemporaryDirectory(prefix="check-peers-") as tmp:
        root = args.cache or Path(tmp)
        model_dir = peers.save_local(model, root / "models" / "tiny-llama")
        failed = []
        for peer in peers.PEERS:
            for weights in peers.WEIGHTS[peer]:
                exported = peers.export(peer, weights, model_dir, root)
                run = peers.prepare(peer, weights, exported, args.threads)
                _, stamps, tokens, _ = run(ids, NEW)
                same = sum(a == b for a, b in zip(tokens, reference, strict=True))
                first = next((i for i, (a, b) in enumerate(zip(tokens, reference, strict=True)) if a != b), None)
                print(f"{peer:18} {weights}: {same}/{NEW} tokens agree" + ("" if first is None else f", first differs at {first}")
                      + f" ({len(stamps)} stamps)")
                if weights == "fp32" and same != NEW:
                    failed.append(f"{peer} {weights}")
                    print(f"  got {tokens}")
    if failed:
        print(f"FAILED: fp32 tokens differ from transformers for {', '.join(failed)}")
        return 1
    print("fp32 peers match transformers exactly")
    return 0


if __name__ == "__main__":
    sys.exit(main())
