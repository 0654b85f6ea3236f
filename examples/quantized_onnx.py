"""A pre-quantized ONNX model: quantize a small torch MLP with onnxruntime's quantize_static (QDQ
format), import it with nx.nn.from_onnx, which reads the file's own scales into an int8 plan, and
run it int8 through nx.compile, compared with onnxruntime running the same file.

    python examples/quantized_onnx.py [--device cpu|npu|edgetpu] [--per-channel]

Needs torch, onnx and onnxruntime (the npu and edgetpu devices: their plugins, or
NEURENIX_EMULATE=npu,edgetpu).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

import neurenix_core as nx
from neurenix_core.graph.quantization import plan_summary


class Batches(CalibrationDataReader):  # type: ignore[misc]
    """onnxruntime's calibration reader over a NumPy array, one input at a time."""

    def __init__(self, data: np.ndarray) -> None:
        self._it = iter([{"x": data[i:i + 1]} for i in range(len(data))])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._it, None)


def dataset(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Noisy inputs around one fixed template per class (6 classes, 32 features)."""
    templates = np.random.default_rng(123).standard_normal((6, 32))
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 6, n)
    return (0.6 * templates[labels] + rng.standard_normal((n, 32))).astype(np.float32), labels


def export_quantized(folder: Path, per_channel: bool) -> Path:
    """Train a small torch MLP for a moment, export it, quantize it to QDQ int8 with onnxruntime."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 6))
    x, y = (torch.from_numpy(a) for a in dataset(1024, seed=7))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(60):
        batch = slice((step * 64) % 1024, (step * 64) % 1024 + 64)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
        opt.step()
    fp32 = folder / "mlp.onnx"
    torch.onnx.export(model.eval(), (x[:1],), str(fp32), input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "n"}, "y": {0: "n"}}, opset_version=17, dynamo=False)
    int8 = folder / "mlp_int8.onnx"
    quantize_static(str(fp32), str(int8), Batches(dataset(64, seed=0)[0]), quant_format=QuantFormat.QDQ,
                    per_channel=per_channel, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return int8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--per-channel", action="store_true", help="per-channel weight scales (default: per tensor)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = export_quantized(Path(tmp), args.per_channel)
        model = nx.nn.from_onnx(path)  # the float graph + the file's int8 plan
        plan = model.quantization_plan
        print(f"imported plan: {plan_summary(plan)}; input x: scale {plan.activations['x'].scale[0]:.6g}, "
              f"zero point {int(plan.activations['x'].zero_point[0])} (int8)")
        compiled = nx.compile(model, device=args.device, outputs="host")  # no calibration: the file's scales
        x, _ = dataset(300, seed=1)
        got = np.asarray(compiled(x))
        want = np.asarray(ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0])
    step = float(plan.activations[model.output_names[0]].scale[0])
    print(f"compiled on {compiled.device}: precision {compiled.precision}")
    print(f"top-1 agreement with onnxruntime: {np.mean(got.argmax(1) == want.argmax(1)):.3f}")
    print(f"max |difference| {np.abs(got - want).max() / step:.2f} output quantization steps")


if __name__ == "__main__":
    main()
