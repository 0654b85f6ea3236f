"""A PyTorch PT2E pre-quantized model: quantize a small torch MLP with torchao's prepare_pt2e /
convert_pt2e and the XNNPACK quantizer, import it with nx.nn.from_torch, which reads the model's
own scales into an int8 plan, and run it int8 through nx.compile, compared with PyTorch running
the same PT2E model.

    python examples/quantized_pt2e.py [--device cpu|npu|edgetpu] [--per-channel]

Needs torch, torchao, onnx and onnxscript (the npu and edgetpu devices: their plugins, or
NEURENIX_EMULATE=npu,edgetpu).
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
from torchao.testing.pt2e._xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config

import neurenix_core as nx
from neurenix_core.graph.quantization import plan_summary


def dataset(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Noisy inputs around one fixed template per class (6 classes, 32 features)."""
    templates = np.random.default_rng(123).standard_normal((6, 32))
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 6, n)
    return (0.6 * templates[labels] + rng.standard_normal((n, 32))).astype(np.float32), labels


def trained_mlp() -> torch.nn.Module:
    """A small torch MLP trained for a moment, so its predictions have margins."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 6))
    x, y = (torch.from_numpy(a) for a in dataset(1024, seed=7))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(60):
        batch = slice((step * 64) % 1024, (step * 64) % 1024 + 64)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
        opt.step()
    return model.eval()


def quantize_pt2e(model: torch.nn.Module, per_channel: bool) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """The PT2E flow: export (batch dynamic), prepare with XNNPACKQuantizer, calibrate, convert."""
    calib = torch.from_numpy(dataset(64, seed=0)[0])
    example = (calib[:2],)
    exported = torch.export.export(model, example, dynamic_shapes=({0: torch.export.Dim("n")},)).module()
    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=per_channel))
    prepared = prepare_pt2e(exported, quantizer)
    prepared(calib)  # observers record the ranges
    return convert_pt2e(prepared), example


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--per-channel", action="store_true", help="per-channel weight scales (default: per tensor)")
    args = parser.parse_args()
    pt2e, example = quantize_pt2e(trained_mlp(), args.per_channel)
    model = nx.nn.from_torch(pt2e, example)  # the float graph + the PT2E model's int8 plan
    plan = model.quantization_plan
    inp = plan.activations[model.input_names[0]]
    print(f"imported plan: {plan_summary(plan)}; input: scale {inp.scale[0]:.6g}, zero point {int(inp.zero_point[0])} (int8)")
    compiled = nx.compile(model, device=args.device, outputs="host")  # no calibration: the model's scales
    x, _ = dataset(300, seed=1)
    got = np.asarray(compiled(x))
    with torch.no_grad():
        want = pt2e(torch.from_numpy(x)).numpy()
    step = float(plan.activations[model.output_names[0]].scale[0])
    print(f"compiled on {compiled.device}: precision {compiled.precision}")
    print(f"top-1 agreement with the PT2E model in PyTorch: {np.mean(got.argmax(1) == want.argmax(1)):.3f}")
    print(f"max |difference| {np.abs(got - want).max() / step:.2f} output quantization steps")


if __name__ == "__main__":
    main()
