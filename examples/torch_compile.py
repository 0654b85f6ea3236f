"""torch.compile(model, backend="neurenix"): PyTorch code, run by neurenix on any device.

Three everyday uses, each checked against PyTorch eager:
1. a CNN written in plain torch.nn, compiled for a device (default: the best one installed);
2. a transformers causal LM's ``generate`` with ``forward`` compiled (the same tokens as eager);
3. a training loop (on a device that trains: cpu, cuda, tpu), the loss equal to eager's.

    python examples/torch_compile.py                       # the best device installed
    NEURENIX_EMULATE=npu python examples/torch_compile.py --device npu:0
"""

from __future__ import annotations

import argparse
import copy

import torch

import neurenix_core as nx


class SmallCNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU(),
        )
        self.head = torch.nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean((2, 3)))


def inference(device: str) -> None:
    torch.manual_seed(0)
    model = SmallCNN().eval()
    backend = nx.torch_backend(device=device, precision="fp32")
    compiled = torch.compile(model, backend=backend)
    with torch.no_grad():
        for batch in (1, 8, 4):  # a second batch size makes the batch axis dynamic: one more graph, then no more
            x = torch.randn(batch, 3, 32, 32)
            err = (compiled(x) - model(x)).abs().max().item()
            print(f"CNN batch {batch} on {device}: max |compiled - eager| = {err:.1e}")
    print(f"graphs compiled: {len(backend.pieces)}")
    print(backend.pieces[-1].summary.splitlines()[0])


def generation(device: str) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, max_position_embeddings=128)
    model = LlamaForCausalLM(config).eval()  # random weights from a config: nothing is downloaded
    prompt = torch.randint(3, 256, (1, 12))
    with torch.no_grad():
        want = model.generate(prompt, max_new_tokens=10, do_sample=False)
    backend = nx.torch_backend(device=device, precision="fp32")
    model.forward = torch.compile(model.forward, backend=backend)
    with torch.no_grad():
        got = model.generate(prompt, max_new_tokens=10, do_sample=False, cache_implementation="static")
    same = torch.equal(got, want)
    print(f"generate on {device}: {got.shape[1] - prompt.shape[1]} new tokens, same as eager: {same}, "
          f"graphs compiled: {len(backend.pieces)} (prompt, decode step)")
    if not same:
        raise SystemExit("the compiled model's tokens differ from eager's")


def training(device: str) -> None:
    torch.manual_seed(0)
    eager = SmallCNN()
    model = copy.deepcopy(eager)
    compiled = torch.compile(model, backend=nx.torch_backend(device=device, precision="fp32"))
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(16, 3, 32, 32, generator=g), torch.randint(0, 10, (16,), generator=g)) for _ in range(3)]
    for step, net, params in ((compiled, "compiled", model.parameters()), (eager, "eager", eager.parameters())):
        opt = torch.optim.SGD(params, lr=0.05, momentum=0.9)
        losses = []
        for x, y in batches:
            loss = torch.nn.functional.cross_entropy(step(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(round(loss.item(), 5))
        print(f"training on {device if net == 'compiled' else 'PyTorch eager'}: losses {losses}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=str(nx.default_device()))
    device = parser.parse_args().device
    inference(device)
    generation(device)
    if nx.backend(device).trains:
        training(device)
    else:
        print(f"training: {device} runs inference only; a backward through its outputs raises NotDifferentiableError")


if __name__ == "__main__":
    main()
