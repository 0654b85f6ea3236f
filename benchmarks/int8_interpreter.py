"""cpu:0's integer reference (what ``nx.compile(model, device="cpu", quantize="int8",
calibration=...)`` runs with neurenix-core alone) against the fp32 interpreter on the same
models, pinned to 1 and to 2 threads (issue #44: int8 no worse than 3x fp32).

    .venv/bin/python benchmarks/int8_interpreter.py [--quick] [--threads 1 2] [--batches 1] [--models resnet18 ...] [--json out.json]

Models, plain torch.nn with seeded random weights (batch-norm statistics perturbed, so folding
is exercised), imported with ``nx.nn.from_torch`` at 224x224:

* ``resnet18``: ResNet-18 (torchvision's layout): 3x3 and 1x1 convolutions, residual adds;
* ``mobilenetv2``: MobileNetV2 (torchvision's block table, ReLU6): depthwise 3x3 convolutions;
* ``mobilenetv3s``: MobileNetV3-Small (squeeze-excite, hardswish), the block table of
  ``benchmarks/interpreter.py``;
* ``efficientnet``: EfficientNet-B0's block table (MBConv: SiLU, squeeze-excite with sigmoid).

Contenders, each ``nx.compile(..., device="cpu", runtime="numpy")`` (the interpreter, whatever
host runtime is installed): ``fp32`` with ``threads=N`` (its threads read back from the summary),
``int8`` with ``quantize="int8"`` and 4 calibration batches (the integer reference of
``graph/reference/run.py``, whose float64 GEMMs run on the BLAS pool the child is pinned to:
N threads). The table's "neurenix" column is int8, "native" is fp32: the ratio is int8 / fp32.
The int8 output's largest error relative to the largest |fp32 value| is printed beside it
(quantization error, not a check). Each thread count runs in its own interpreter (BLAS pools
are sized at import); no timing is asserted anywhere.

Before and after a change to the integer kernels: run the same script against another tree of
``neurenix_core`` (PYTHONPATH comes first; the children inherit it), e.g. the kernels before
issue #44's rewrite:

    mkdir /tmp/nx-before && git archive 900dacb neurenix_core | tar -x -C /tmp/nx-before
    PYTHONPATH=/tmp/nx-before .venv/bin/python benchmarks/int8_interpreter.py --quick
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any, Final

os.environ.setdefault("NEURENIX_DISABLE_PLUGIN_AUTOLOAD", "1")  # cpu:0 alone, as with neurenix-core only

import numpy as np

from neurenix_core import benchkit

MODELS: Final = ("resnet18", "mobilenetv2", "mobilenetv3s", "efficientnet")
IMAGE: Final = 224
CALIBRATION_BATCHES: Final = 4
ROUNDS: Final = 9
_MODELS_VAR: Final = "NEURENIX_BENCH_INT8_MODELS"
_BATCHES_VAR: Final = "NEURENIX_BENCH_INT8_BATCHES"


# ------------------------------------------------------------------ models
def _conv_bn(nn: Any, cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, act: Any = None) -> Any:
    mods = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*mods, act()) if act is not None else nn.Sequential(*mods)


def _resnet18(nn: Any, torch: Any) -> Any:
    class Basic(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.c1, self.c2 = _conv_bn(nn, cin, cout, 3, stride, act=nn.ReLU), _conv_bn(nn, cout, cout, 3)
            self.down = None if stride == 1 and cin == cout else _conv_bn(nn, cin, cout, 1, stride)

        def forward(self, x: Any) -> Any:
            return torch.relu(self.c2(self.c1(x)) + (x if self.down is None else self.down(x)))

    layers: list[Any] = [_conv_bn(nn, 3, 64, 7, 2, act=nn.ReLU), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [Basic(cin, cout, stride), Basic(cout, cout, 1)]
        cin = cout
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000))


def _inverted(nn: Any, cin: int, k: int, exp: int, cout: int, stride: int, act: Any, se: Any = None) -> Any:
    class Block(nn.Module):  # expand 1x1, depthwise kxk, [squeeze-excite], project 1x1
        def __init__(self) -> None:
            super().__init__()
            mods: list[Any] = [] if exp == cin else [_conv_bn(nn, cin, exp, 1, act=act)]
            mods.append(_conv_bn(nn, exp, exp, k, stride, exp, act))
            mods += [se(exp)] if se is not None else []
            self.m = nn.Sequential(*mods, _conv_bn(nn, exp, cout, 1))
            self.residual = stride == 1 and cin == cout

        def forward(self, x: Any) -> Any:
            y = self.m(x)
            return x + y if self.residual else y

    return Block()


def _squeeze_excite(nn: Any, torch: Any, inner: Any, gate: Any, divisor: int) -> Any:
    class SE(nn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            self.f1, self.f2 = nn.Conv2d(c, max(8, c // divisor), 1), nn.Conv2d(max(8, c // divisor), c, 1)
            self.inner, self.gate = inner(), gate()

        def forward(self, x: Any) -> Any:
            return x * self.gate(self.f2(self.inner(self.f1(nn.functional.adaptive_avg_pool2d(x, 1)))))

    return SE


def _mobilenetv2(nn: Any, torch: Any) -> Any:
    cfg = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))
    layers: list[Any] = [_conv_bn(nn, 3, 32, 3, 2, act=nn.ReLU6)]
    cin = 32
    for t, c, n, s in cfg:
        for i in range(n):
            layers.append(_inverted(nn, cin, 3, cin * t, c, s if i == 0 else 1, nn.ReLU6))
            cin = c
    return nn.Sequential(*layers, _conv_bn(nn, cin, 1280, 1, act=nn.ReLU6), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(1280, 1000))


def _mobilenetv3s(nn: Any, torch: Any) -> Any:
    se = _squeeze_excite(nn, torch, nn.ReLU, nn.Hardsigmoid, 4)
    cfg = ((16, 3, 16, 16, 1, 0, 2), (16, 3, 72, 24, 0, 0, 2), (24, 3, 88, 24, 0, 0, 1), (24, 5, 96, 40, 1, 1, 2),
           (40, 5, 240, 40, 1, 1, 1), (40, 5, 240, 40, 1, 1, 1), (40, 5, 120, 48, 1, 1, 1), (48, 5, 144, 48, 1, 1, 1),
           (48, 5, 288, 96, 1, 1, 2), (96, 5, 576, 96, 1, 1, 1), (96, 5, 576, 96, 1, 1, 1))
    blocks = [_inverted(nn, cin, k, exp, cout, s, nn.Hardswish if hs else nn.ReLU, se if has_se else None)
              for cin, k, exp, cout, has_se, hs, s in cfg]
    return nn.Sequential(_conv_bn(nn, 3, 16, 3, 2, act=nn.Hardswish), *blocks, _conv_bn(nn, 96, 576, 1, act=nn.Hardswish),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(576, 1024), nn.Hardswish(), nn.Linear(1024, 1000))


def _efficientnet(nn: Any, torch: Any) -> Any:
    se = _squeeze_excite(nn, torch, nn.SiLU, nn.Sigmoid, 24)  # EfficientNet squeezes to cin / 4 = exp / 24
    cfg = ((1, 3, 16, 1, 1), (6, 3, 24, 2, 2), (6, 5, 40, 2, 2), (6, 3, 80, 3, 2), (6, 5, 112, 3, 1), (6, 5, 192, 4, 2), (6, 3, 320, 1, 1))
    layers: list[Any] = [_conv_bn(nn, 3, 32, 3, 2, act=nn.SiLU)]
    cin = 32
    for t, k, c, n, s in cfg:
        for i in range(n):
            layers.append(_inverted(nn, cin, k, cin * t, c, s if i == 0 else 1, nn.SiLU, se))
            cin = c
    return nn.Sequential(*layers, _conv_bn(nn, cin, 1280, 1, act=nn.SiLU), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(1280, 1000))


def model(name: str) -> Any:
    """The torch module ``name`` with seeded random weights, in eval mode."""
    import torch

    torch.manual_seed(0)
    builders = {"resnet18": _resnet18, "mobilenetv2": _mobilenetv2, "mobilenetv3s": _mobilenetv3s, "efficientnet": _efficientnet}
    module = builders[name](torch.nn, torch)
    with torch.no_grad():  # batch-norm statistics away from (0, 1): folding them is exercised
        for m in module.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    return module.eval()


# ------------------------------------------------------------------ timing
def _model_row(name: str, batch: int, threads: int, rounds: int) -> dict[str, Any]:
    import torch

    import neurenix_core as nx

    rng = np.random.default_rng(batch)
    x = rng.standard_normal((batch, 3, IMAGE, IMAGE)).astype(np.float32)
    graph = nx.nn.from_torch(model(name), (torch.from_numpy(x),), static=True)
    calibration = [rng.standard_normal(x.shape).astype(np.float32) for _ in range(CALIBRATION_BATCHES)]
    fp32 = nx.compile(graph, device="cpu", runtime="numpy", threads=threads)
    int8 = nx.compile(graph, device="cpu", runtime="numpy", quantize="int8", calibration=calibration, progress=False)
    xt = nx.asarray(x)
    want, got = fp32(xt).numpy(), int8(xt).numpy()
    t = benchkit.interleaved({"int8": lambda: int8(xt), "fp32": lambda: fp32(xt)}, rounds=rounds)
    read = re.search(r"(\d+) threads?\b", fp32.summary)  # the interpreter's threads= as its summary reads it back
    pool = {v: os.environ.get(v) for v in benchkit.THREAD_VARS}  # the integer reference's BLAS pool, pinned by run_child
    blas = int(pool["OPENBLAS_NUM_THREADS"]) if pool["OPENBLAS_NUM_THREADS"] else None
    r = benchkit.row("int8_interpreter", name, "int8 / fp32", batch, threads, t["int8"], t["fp32"], {"threads": blas},
                     {"threads": int(read.group(1)) if read else None})
    r["int8_err"] = float(np.max(np.abs(got - want)) / max(1e-12, float(np.max(np.abs(want)))))
    return r


def measure(threads: int, quick: bool, models: list[str], batches: list[int]) -> list[dict[str, Any]]:
    import torch

    torch.set_num_threads(threads)
    rounds = 3 if quick else ROUNDS
    return [_model_row(m, b, threads, rounds) for m in models for b in batches]


def main(argv: list[str] | None = None) -> int:
    p = benchkit.parser(__doc__, batches=(1,), models=MODELS)
    p.add_argument("--child", type=int, help="(internal) measure at this many threads and print JSON rows")
    args = p.parse_args(argv)
    if args.child:
        models = os.environ.get(_MODELS_VAR, " ".join(MODELS)).split()
        batches = [int(b) for b in os.environ.get(_BATCHES_VAR, "1").split()]
        print(json.dumps(measure(args.child, args.quick, models, batches)))
        return 0
    rows: list[dict[str, Any]] = []
    for threads in args.threads:
        # run_child passes --child and --quick only: the model and batch lists travel in the environment
        env = {_MODELS_VAR: " ".join(args.models), _BATCHES_VAR: " ".join(map(str, args.batches))}
        rows += benchkit.run_child(__file__, threads, args.quick, env=env, timeout=3600)
    benchkit.report("int8_interpreter", rows, args, [("int8_err", "int8 error vs fp32", ".4f")],
                    device="neurenix = cpu:0 int8 (the integer reference, runtime='numpy'); native = cpu:0 fp32 (the interpreter)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
