"""Text generation with a key/value cache: a tiny GPT-2 or Llama built from a config (random
weights, nothing downloaded), greedy, sampled and streamed, checked against transformers' own generate.

    python examples/generate.py [--device cpu:0] [--model gpt2|llama] [--tokens 24]

Prepared once (``nx.generation.CausalLM``: the step model exported and compiled), then used
for every call; on a device that compiles per input shape (npu, edgetpu, tpu, cuda) the cache has
a fixed capacity and the whole generation compiles two shapes, the prompt and the decode step.
On cpu:0 with OpenVINO's runtime (the npu plugin) a Llama's cache is kept in OpenVINO's state:
one compiled model for every prompt and step ("state cache", 1 compilation).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

import neurenix_core as nx


def tiny_model(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if name == "llama":  # grouped-query attention: 4 query heads over 2 key/value heads
        model: torch.nn.Module = LlamaForCausalLM(LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                                              num_attention_heads=4, num_key_value_heads=2, eos_token_id=0))
    else:
        model = GPT2LMHeadModel(GPT2Config(vocab_size=128, n_embd=32, n_layer=2, n_head=4, n_positions=128, eos_token_id=0))
    with torch.no_grad():  # weights at a scale where greedy decoding does not repeat one token
        for p in model.parameters():
            if p.ndim >= 2:
                p.normal_(0.0, 0.3)
    return model.eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default=None, help="device to run on (default: the default device)")
    parser.add_argument("--model", choices=["gpt2", "llama"], default="gpt2")
    parser.add_argument("--tokens", type=int, default=24, help="new tokens per prompt")
    args = parser.parse_args()

    model = tiny_model(args.model)
    prompt = np.array([[5, 17, 42, 9, 77, 31]])
    lm = nx.generation.CausalLM(model, args.device, precision="fp32")
    print(f"prepared: {lm}")

    greedy = lm.generate(prompt, max_new_tokens=args.tokens)
    with torch.no_grad():
        expected = model.generate(torch.from_numpy(prompt), attention_mask=torch.ones_like(torch.from_numpy(prompt)),
                                  do_sample=False, max_new_tokens=args.tokens).numpy()
    print("greedy:  ", greedy[0, prompt.shape[1]:].tolist())
    print("same as transformers' generate:", bool(np.array_equal(greedy, expected)))

    sampled = lm.generate(prompt, max_new_tokens=args.tokens, do_sample=True, temperature=0.8, top_k=20, top_p=0.9, seed=1)
    print("sampled: ", sampled[0, prompt.shape[1]:].tolist())

    print("streamed:", end=" ", flush=True)
    for token in lm.generate(prompt, max_new_tokens=args.tokens, stream=True):
        print(int(token[0]), end=" ", flush=True)
    print()

    # two prompts of different lengths, left-padded as transformers pads decoder prompts
    batch = np.array([[0, 0, 3, 4, 5], [6, 7, 8, 9, 10]])
    mask = np.array([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    out = nx.generate(lm, batch, attention_mask=mask, max_new_tokens=8)
    print("batch:   ", out[:, batch.shape[1]:].tolist())
    print(f"compilations: {lm.compilations} ({lm.cache} cache on {lm.device})")
    print(f"summary: {lm.summary}")


if __name__ == "__main__":
    main()
