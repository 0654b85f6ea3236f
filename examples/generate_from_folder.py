"""Generation from a saved model folder: the first process prepares it, the next ones start in about a
second without PyTorch.

    python examples/generate_from_folder.py [--folder DIR] [--quantize int8-weights|int4-weights]

A tiny Llama is built from a config (random weights, nothing downloaded) and saved with
``save_pretrained`` (as a model downloaded from a hub is). ``nx.generation.CausalLM.from_pretrained``
prepares it on cpu:0 with the cache in OpenVINO's state and keeps the compiled step model in the
compile cache; a second Python process then loads that model by the folder's contents: no
transformers model is built and torch is never imported. Both generate transformers' greedy tokens.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

PROMPT = [[5, 17, 42, 9, 77, 31]]
NEW = 16

#: What the second process runs: numpy and neurenix only (argv: folder, quantize, prompt, new tokens).
LOAD = """
import json, sys, time
import numpy as np
import neurenix_core as nx
start = time.perf_counter()
lm = nx.generation.CausalLM.from_pretrained(sys.argv[1], "cpu:0", quantize=sys.argv[2] or None)
prepared = time.perf_counter() - start
prompt = np.array(json.loads(sys.argv[3]))
tokens = lm.generate(prompt, max_new_tokens=int(sys.argv[4]), eos_token_id=[])[0, prompt.shape[1]:].tolist()
print(f"second process: prepared in {prepared:.2f} s, torch imported: {'torch' in sys.modules}")
print("summary:", lm.summary.split("; ")[-1])
print("tokens:", tokens)
"""


def save_tiny_llama(folder: Path) -> list[int]:
    """Save a tiny Llama into ``folder``; transformers' greedy tokens for PROMPT."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, eos_token_id=0))
    with torch.no_grad():  # weights at a scale where greedy decoding does not repeat one token
        for p in model.parameters():
            if p.ndim >= 2:
                p.normal_(0.0, 0.3)
    model.eval().save_pretrained(folder)
    ids = torch.tensor(PROMPT)
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=NEW, min_new_tokens=NEW, pad_token_id=0)
    return out[0, ids.shape[1]:].tolist()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--folder", help="where to save the model (default: a temporary folder)")
    parser.add_argument("--quantize", choices=["int8-weights", "int4-weights"], help="weight-only quantization")
    args = parser.parse_args()
    import neurenix_core as nx

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.folder or tmp) / "tiny-llama"
        want = save_tiny_llama(folder)
        start = time.perf_counter()
        lm = nx.generation.CausalLM.from_pretrained(folder, "cpu:0", quantize=args.quantize)
        print(f"first process: prepared in {time.perf_counter() - start:.2f} s (cache={lm.cache!r}: the step exported, compiled and stored)")
        got = lm.generate(np.array(PROMPT), max_new_tokens=NEW, eos_token_id=[])[0, len(PROMPT[0]):].tolist()
        print("tokens:", got)
        if args.quantize is None:
            print("same as transformers' generate:", got == want)
        else:
            print(lm.check_quantization(max_new_tokens=NEW))
        second = subprocess.run([sys.executable, "-c", LOAD, str(folder), args.quantize or "", json.dumps(PROMPT), str(NEW)],
                                capture_output=True, text=True, check=True)
        print(second.stdout, end="")
        print("second process gave the first one's tokens:", f"tokens: {got}" in second.stdout)


if __name__ == "__main__":
    main()
