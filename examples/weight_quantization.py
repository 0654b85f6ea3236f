"""Weight quantization of a language model: int8 per channel and int4 per group of 64 input
features, planned by the core and lowered by the device's plugin (on the npu, OpenVINO's
compressed weights), then checked against the float model it came from. The
``-int8-activations`` schemes also round each layer's input to int8 at run time (groups of 32),
where a device computes that (OpenVINO's CPU device, on cpu:0 and the emulated npu).

    python examples/weight_quantization.py [--device npu:0] [--tokens 16] [--schemes int4-weights ...]

A tiny Llama built from a config (random weights at a scale where greedy decoding varies;
nothing downloaded). On cpu:0 with the npu plugin installed the cache is kept in OpenVINO's state
and the plan becomes OpenVINO's compressed-weight FullyConnected layers in that one model (int8
and int4); with ``cache="fixed"`` it goes to a host runtime listing the scheme, chosen by
measuring: OpenVINO's, or ONNX Runtime's MatMulNBits (int4, the onnxruntime plugin). Where nothing lowers
a scheme the core runs the dequantized float model, which computes the same values at fp32's
memory and speed, and a FallbackWarning says so.
"""

from __future__ import annotations

import argparse
import re

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import neurenix_core as nx
from neurenix_core.errors import CompilationError

SCHEMES = ("int8-weights", "int4-weights", "int8-weights-int8-activations", "int4-weights-int8-activations")


def tiny_llama() -> LlamaForCausalLM:
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256))
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim >= 2:
                p.normal_(0.0, 0.1)
    return model.eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default=None, help="device to run on (default: the default device)")
    parser.add_argument("--tokens", type=int, default=16, help="new tokens per check")
    parser.add_argument("--schemes", nargs="+", default=list(SCHEMES), choices=SCHEMES, help="weight schemes to run")
    args = parser.parse_args()

    model = tiny_llama()
    prompt = np.array([[5, 17, 42, 9, 77, 31, 120, 8]])
    for scheme in args.schemes:
        try:
            lm = nx.generation.CausalLM(model, args.device, precision="fp32", quantize=scheme)
        except CompilationError as exc:  # a CPU whose OpenVINO device keeps float activations: said, not hidden
            print(f"{scheme}: not computed here: {exc}")
            continue
        print(f"{scheme} on {lm.device}: {lm.generate(prompt, max_new_tokens=args.tokens, eos_token_id=[])[0, prompt.shape[1]:].tolist()}")
        print(f"  check: {lm.check_quantization(prompt, max_new_tokens=args.tokens)}")
        print(f"  weights: {lm.compiled.summary.split('; weights ')[-1]}")
        runtimes = sorted(set(re.findall(r"runtime (\w+) [(]", lm.compiled.summary)))  # cpu:0's host runtimes, per shape
        print(f"  ran on: {', '.join(runtimes) or lm.device}")


if __name__ == "__main__":
    main()
