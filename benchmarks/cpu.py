"""cpu:0 against the CPU runtimes used directly: ``nx.compile(model, device="cpu")`` (the host
runtime neurenix measures fastest, issue #31) and ``runtime="numpy"`` (the interpreter alone),
against PyTorch eager, OpenVINO, ONNX Runtime and LiteRT each called through its own API, on the
same torch model, in the same rounds, batch 1 and 32, 1 and 2 threads.

    .venv/bin/python benchmarks/cpu.py                  # full run (every model; tens of minutes)
    .venv/bin/python benchmarks/cpu.py --quick          # smoke run: mobilenetv3_small, batch 1, 3 rounds
    .venv/bin/python benchmarks/cpu.py [--models resnet18 bert_tiny] [--threads 1 2] [--batches 1 32] [--json out.json]
    .venv/bin/python benchmarks/cpu.py --int8 [--quick] # the int8 rows (below), batch 1: about 30 minutes, --quick 1

Models (random weights, built here in plain torch.nn or from transformers configs):

* ``resnet18``: ResNet-18 (torchvision's layout, 1000 classes), 224x224;
* ``mobilenetv3_small``: MobileNetV3-Small (torchvision's block table: SE, hardswish), 224x224;
* ``vit_tiny``: ViT-Tiny (transformers ViTForImageClassification: patch 16, dim 192, 12 layers,
  3 heads, MLP 768), 224x224;
* ``bert_tiny``: BERT-tiny (transformers BertModel: 2 layers, hidden 128, 2 heads, intermediate
  512), token ids at sequence length 128, no attention mask (all tokens attended);
* ``mlp_small``: Linear(16, 64), ReLU, Linear(64, 16) on a batch x 16 input: calls of a few to
  tens of µs, where the goal is absolute (at most 1 µs added per call over the fastest native
  runtime's own Python call: the "added µs" column) rather than the ratio.

Contenders, each on the same input:

* ``cpu:0``: ``nx.compile(from_torch(model), device="cpu", threads=N)``: the runtime neurenix
  chose (measured at compile time into a fresh state folder, so no choice cached by an earlier
  run on a busier machine decides it) is named in the table;
* ``numpy``: the same with ``runtime="numpy"``, the interpreter;
* ``torch``: eager under ``torch.inference_mode`` with ``torch.set_num_threads(N)``, read back;
* ``openvino``: ``openvino.convert_model`` of the torch model compiled for "CPU" with
  INFERENCE_PRECISION_HINT=f32, PERFORMANCE_HINT=LATENCY (what neurenix's OpenVINO host runtime
  sets) and INFERENCE_NUM_THREADS=N, read back with ``get_property``; a reused infer request;
* ``onnxruntime``: ``torch.onnx.export`` (static shapes) in a CPUExecutionProvider session with
  intra_op_num_threads=N, inter_op_num_threads=1, read back from the session options;
* ``litert``: the model's graph written as an fp32 .tflite by neurenix's own TFLite writer (the
  edgetpu plugin's, through ``nx.compile(device="edgetpu:0", precision="fp32")`` with that
  device emulated: nothing else installed here writes a .tflite from a torch model), loaded in a
  bare ``ai_edge_litert`` Interpreter with ``num_threads=N`` and its default XNNPACK delegate.
  LiteRT has no thread read-back: its column states the count passed. A model the writer
  cannot express whole is reported without a LiteRT time, with the writer's reason.

Each thread count runs in its own child process (``benchkit.run_child``: the BLAS/OpenMP pools
pinned by environment, the process pinned to N CPUs). Within a child, the contenders take turns
in a seeded order shuffled every round (``benchkit.schedule``); a turn is enough consecutive
calls to fill a short budget, and the time reported is the median over rounds of each turn's
time per call (the issue asks for medians; ``benchkit.interleaved`` keeps the fastest round).
Every output is compared with torch eager before timing (largest error relative to the largest
|value|, fp32, 1e-4): the "agree" column. Ratios: cpu:0 / the fastest native runtime of the row
(goal <= 1.05) and numpy / torch eager (goal <= 2). ``benchkit.row`` compares the two sides'
thread counts as read back and refuses the cpu:0 ratio where they differ; where the runtime
cpu:0 chose reports no per-model count (the interpreter's BLAS pool, XLA's process-wide pool,
both sized by the child's environment), cpu:0's is the child's CPU affinity, and its
configuration says so (``threads_from``). Nothing is asserted on time: the numbers are for people.

``--int8`` (issue #44) times instead, at batch 1, ResNet-18, MobileNetV3-Small, EfficientNet-B0
(``efficientnet_b0``: MBConv with squeeze-and-excitation and SiLU, torchvision's block table) and
BERT-tiny with its pooled output (``int8_model``: batch-norm statistics re-estimated on random
images, so the logits depend on the input), each calibrated on the same 16 seeded batch-1 inputs:

* ``cpu:0 int8``: ``nx.compile(model, device="cpu", precision="int8", calibration=batches,
  threads=N)``, the core's static plan on the host runtime it measures fastest (named, with the
  int8 path its summary states and, on OpenVINO, the layers its execution graph runs in 8-bit);
* ``numpy int8``: the same with ``runtime="numpy"``, the core's integer reference (what
  ``neurenix-core`` alone runs); ``cpu:0 fp32`` and ``numpy fp32`` for the ratios;
* ``onnxruntime int8`` and ``openvino int8``, the peers used directly: ``torch.onnx.export``,
  ``quant_pre_process`` and ``quantize_static`` (QDQ, int8 weights per channel, uint8
  activations, the same calibration batches and range method) run in an ONNX Runtime CPU session
  and read by OpenVINO (``read_model``, compiled for "CPU" in f32 with INFERENCE_NUM_THREADS=N:
  its QDQ pairs become FakeQuantize and the quantized layers run in int8).

Ratios: cpu:0 int8 / cpu:0 fp32 (goal <= 0.8 on a CPU with VNNI), cpu:0 int8 / the fastest int8
peer (<= 1.05), numpy int8 / numpy fp32 (<= 3). Top-1 agreement with torch fp32 (argmax of the
logits, or of BERT's 128 pooled features) over 320 seeded inputs called one by one on the models
timed (32 with ``--quick``); the integer reference's, computed in the first child, is copied to
the other thread counts where its output there is the same bytes. The CPU line names the VNNI and
AMX flags of ``/proc/cpuinfo`` and OpenVINO's OPTIMIZATION_CAPABILITIES.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

# benchmarks/openvino.py and benchmarks/onnxruntime.py would shadow the real packages while this
# folder is on sys.path (it is sys.path[0] when the script runs).
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != _HERE]

import numpy as np

from neurenix_core import benchkit

MODELS = ("resnet18", "mobilenetv3_small", "vit_tiny", "bert_tiny", "mlp_small")
QUICK_MODEL: Final = "mobilenetv3_small"
NATIVE: Final = ("torch", "openvino", "onnxruntime", "litert")
CONTENDERS: Final = ("cpu:0", "numpy", *NATIVE)
#: Largest error relative to the largest |value| of torch eager's output, for every contender (fp32).
AGREEMENT: Final = 1e-4
ROUNDS: Final = 15
QUICK_ROUNDS: Final = 3
#: Seconds of consecutive calls per turn (at least one call): short turns spread load spikes of a
#: shared machine over every contender.
TURN_S: Final = 0.05
#: Seconds of idle before each turn. OpenBLAS's and ONNX Runtime's worker threads keep spinning for
#: about 20 ms after their last call (measured as process CPU time while the caller sleeps): at 2
#: threads on 2 cores that took a core from whichever contender came next. Each turn starts on a
#: quiet machine, as a process running one runtime would.
SETTLE_S: Final = 0.03
BERT_SEQ: Final = 128
MLP_FEATURES: Final = 16
#: Image models' input H = W at every batch: at batch 32 the slowest row (ResNet-18 on the
#: interpreter, about 3 s a call on one core) still fits 15 rounds in a few minutes.
IMAGE: Final = 224
#: --int8: the models (BERT-tiny with its pooled output), the contenders and the peers used directly.
INT8_MODELS: Final = ("resnet18", "mobilenetv3_small", "efficientnet_b0", "bert_tiny")
INT8_CONTENDERS: Final = ("cpu:0 int8", "numpy int8", "cpu:0 fp32", "numpy fp32", "onnxruntime int8", "openvino int8")
INT8_PEERS: Final = ("onnxruntime int8", "openvino int8")
INT8_ROUNDS: Final = 25
#: Images the int8 models' batch-norm statistics are re-estimated on (``int8_model``).
BN_SAMPLES: Final = 32
#: Batch-1 calibration inputs (seeds 1000...), the same for cpu:0's plan and ONNX Runtime's quantize_static.
CALIBRATION: Final = 16
#: Ranges from the calibration data: min/max (``nx.compile``'s default, ONNX Runtime's MinMax), or
#: 0.01% clipped at each end where min/max ranges fail the core's plan check. EfficientNet-B0 with
#: random weights does: its integer reference is 35.5% away from float over the calibration data,
#: more than int8 rounding explains (30%); with percentile ranges 22.8%.
CALIBRATION_METHOD: Final = {"efficientnet_b0": "percentile"}
#: Top-1 agreement inputs (seeds 2000...), each called at batch 1 on the very models timed.
AGREEMENT_SAMPLES: Final = 320
QUICK_AGREEMENT_SAMPLES: Final = 32
AGREEMENT_SEED: Final = 2000
INT8_FLAGS: Final = frozenset({"avx512_vnni", "avx_vnni", "avx_vnni_int8", "amx_int8", "amx_bf16", "amx_tile", "avx512_bf16"})
_CHILD_ENV: Final = "NEURENIX_BENCH_CPU_PLAN"  # run_child passes only --child/--quick: the rest goes by environment


# ------------------------------------------------------------------ models
def describe_input(model: str, batch: int) -> str:
    if model == "mlp_small":
        return f"{batch}x{MLP_FEATURES}"
    return f"ids {batch}x{BERT_SEQ}" if model == "bert_tiny" else f"{batch}x3x{IMAGE}x{IMAGE}"


def example_input(model: str, batch: int) -> np.ndarray:
    rng = np.random.default_rng(batch)
    if model == "bert_tiny":
        return rng.integers(3, 30522, (batch, BERT_SEQ)).astype(np.int64)
    if model == "mlp_small":
        return rng.standard_normal((batch, MLP_FEATURES)).astype(np.float32)
    return rng.standard_normal((batch, 3, IMAGE, IMAGE)).astype(np.float32)


def build(model: str, *, classify: bool = False) -> Any:
    """The torch module ``model`` with seeded random weights, in eval mode. ``classify``: BERT-tiny
    returns its pooled output (the pooler's tanh(dense(first token)), 128 values) instead of the
    last hidden state, the vector whose argmax the int8 rows compare (the image models' output
    already is 1000 class logits)."""
    import torch

    torch.manual_seed(0)
    builders: dict[str, Callable[[], Any]] = {"resnet18": _resnet18, "mobilenetv3_small": _mobilenetv3_small,
                                              "efficientnet_b0": _efficientnet_b0, "vit_tiny": _vit_tiny,
                                              "bert_tiny": _bert_tiny_pooled if classify else _bert_tiny, "mlp_small": _mlp_small}
    module = builders[model]()
    _perturb_batch_norm(module)
    return module.eval()


def _perturb_batch_norm(module: Any) -> None:
    """Batch-norm statistics away from (0, 1), so folding them is exercised and checked."""
    import torch

    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)


def int8_model(model: str) -> Any:
    """The int8 rows' torch module: ``build(model, classify=True)``, then each batch norm's running
    statistics re-estimated on ``BN_SAMPLES`` seeded normal images (seeds 3000...; one pass in
    train mode, cumulative averages; the perturbed scales and shifts kept). With random weights
    and the perturbed statistics, the image models' activations fade layer after layer until the
    logits are the classifier's bias whatever the input (MobileNetV3-Small's and EfficientNet's
    vary across inputs by 5e-7 of their spread): every input has the same top-1, and int8's
    rounding of near-equal logits decides agreement. Re-estimated, the logits vary with the input
    (9-20 distinct top-1 classes over 96 inputs)."""
    import torch

    module = build(model, classify=True)
    norms = [m for m in module.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    if not norms:
        return module
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # a cumulative average over the pass
    images = np.concatenate([np.random.default_rng(3000 + i).standard_normal((1, 3, IMAGE, IMAGE)).astype(np.float32)
                             for i in range(BN_SAMPLES)])
    module.train()
    with torch.no_grad():
        module(torch.from_numpy(images))
    return module.eval()


def _resnet18() -> Any:
    from torch import nn

    class Basic(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
            self.conv2, self.bn2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
            self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                         if stride != 1 or cin != cout else nn.Identity())
            self.relu = nn.ReLU()

        def forward(self, x: Any) -> Any:
            y = self.relu(self.bn1(self.conv1(x)))
            return self.relu(self.bn2(self.conv2(y)) + self.down(x))

    layers: list[nn.Module] = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [Basic(cin, cout, stride), Basic(cout, cout, 1)]
        cin = cout
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000))


#: MobileNetV3-Small's blocks (torchvision): kernel, expanded channels, out channels, SE, hardswish, stride.
_MNV3_SMALL: Final = (
    (3, 16, 16, True, False, 2), (3, 72, 24, False, False, 2), (3, 88, 24, False, False, 1),
    (5, 96, 40, True, True, 2), (5, 240, 40, True, True, 1), (5, 240, 40, True, True, 1),
    (5, 120, 48, True, True, 1), (5, 144, 48, True, True, 1), (5, 288, 96, True, True, 2),
    (5, 576, 96, True, True, 1), (5, 576, 96, True, True, 1),
)


def _mobilenetv3_small() -> Any:
    from torch import nn

    def conv_bn(cin: int, cout: int, k: int, stride: int, groups: int, act: type[nn.Module] | None) -> nn.Sequential:
        mods: list[nn.Module] = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
        return nn.Sequential(*mods, act()) if act is not None else nn.Sequential(*mods)

    class SqueezeExcite(nn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            squeeze = max(8, (c // 4 + 4) // 8 * 8)  # torchvision's _make_divisible(c // 4, 8)
            self.pool, self.fc1, self.fc2 = nn.AdaptiveAvgPool2d(1), nn.Conv2d(c, squeeze, 1), nn.Conv2d(squeeze, c, 1)
            self.relu, self.gate = nn.ReLU(), nn.Hardsigmoid()

        def forward(self, x: Any) -> Any:
            return x * self.gate(self.fc2(self.relu(self.fc1(self.pool(x)))))

    class InvertedResidual(nn.Module):
        def __init__(self, cin: int, k: int, exp: int, cout: int, se: bool, hs: bool, stride: int) -> None:
            super().__init__()
            act = nn.Hardswish if hs else nn.ReLU
            mods: list[nn.Module] = [] if exp == cin else [conv_bn(cin, exp, 1, 1, 1, act)]
            mods.append(conv_bn(exp, exp, k, stride, exp, act))
            if se:
                mods.append(SqueezeExcite(exp))
            mods.append(conv_bn(exp, cout, 1, 1, 1, None))
            self.block, self.residual = nn.Sequential(*mods), stride == 1 and cin == cout

        def forward(self, x: Any) -> Any:
            y = self.block(x)
            return x + y if self.residual else y

    layers: list[nn.Module] = [conv_bn(3, 16, 3, 2, 1, nn.Hardswish)]
    cin = 16
    for k, exp, cout, se, hs, stride in _MNV3_SMALL:
        layers.append(InvertedResidual(cin, k, exp, cout, se, hs, stride))
        cin = cout
    layers += [conv_bn(cin, 576, 1, 1, 1, nn.Hardswish), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
               nn.Linear(576, 1024), nn.Hardswish(), nn.Linear(1024, 1000)]
    return nn.Sequential(*layers)


#: EfficientNet-B0's stages (torchvision): expansion, kernel, stride, out channels, blocks.
_EFFICIENTNET_B0: Final = ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3), (6, 5, 1, 112, 3),
                           (6, 5, 2, 192, 4), (6, 3, 1, 320, 1))


def _efficientnet_b0() -> Any:
    """EfficientNet-B0 in plain torch.nn: MBConv blocks (1x1 expansion, depthwise k x k, squeeze
    and excitation on a quarter of the block's input channels with SiLU and a sigmoid gate, 1x1
    projection, residual where the shape allows), SiLU throughout, 1280-channel head, 1000 classes."""
    from torch import nn

    def conv_bn(cin: int, cout: int, k: int, stride: int, groups: int, act: bool) -> nn.Sequential:
        mods: list[nn.Module] = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
        return nn.Sequential(*mods, nn.SiLU()) if act else nn.Sequential(*mods)

    class SqueezeExcite(nn.Module):
        def __init__(self, c: int, squeeze: int) -> None:
            super().__init__()
            self.pool, self.fc1, self.fc2 = nn.AdaptiveAvgPool2d(1), nn.Conv2d(c, squeeze, 1), nn.Conv2d(squeeze, c, 1)
            self.act, self.gate = nn.SiLU(), nn.Sigmoid()

        def forward(self, x: Any) -> Any:
            return x * self.gate(self.fc2(self.act(self.fc1(self.pool(x)))))

    class MBConv(nn.Module):
        def __init__(self, cin: int, expand: int, k: int, stride: int, cout: int) -> None:
            super().__init__()
            exp = cin * expand
            mods: list[nn.Module] = [] if expand == 1 else [conv_bn(cin, exp, 1, 1, 1, True)]
            mods += [conv_bn(exp, exp, k, stride, exp, True), SqueezeExcite(exp, max(1, cin // 4)), conv_bn(exp, cout, 1, 1, 1, False)]
            self.block, self.residual = nn.Sequential(*mods), stride == 1 and cin == cout

        def forward(self, x: Any) -> Any:
            y = self.block(x)
            return x + y if self.residual else y

    layers: list[nn.Module] = [conv_bn(3, 32, 3, 2, 1, True)]
    cin = 32
    for expand, k, stride, cout, blocks in _EFFICIENTNET_B0:
        for i in range(blocks):
            layers.append(MBConv(cin, expand, k, stride if i == 0 else 1, cout))
            cin = cout
    layers += [conv_bn(cin, 1280, 1, 1, 1, True), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1280, 1000)]
    return nn.Sequential(*layers)


def _vit_tiny() -> Any:
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(image_size=IMAGE, patch_size=16, hidden_size=192, num_hidden_layers=12, num_attention_heads=3,
                       intermediate_size=768, num_labels=1000)
    return first_output(ViTForImageClassification(config), "pixel_values", "logits")


def _bert_tiny() -> Any:
    from transformers import BertConfig, BertModel

    config = BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512)
    return first_output(BertModel(config, add_pooling_layer=False), "input_ids", "last_hidden_state")


def _bert_tiny_pooled() -> Any:
    from transformers import BertConfig, BertModel

    config = BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512)
    return first_output(BertModel(config), "input_ids", "pooler_output")


def _mlp_small() -> Any:
    from torch import nn

    return nn.Sequential(nn.Linear(MLP_FEATURES, 64), nn.ReLU(), nn.Linear(64, MLP_FEATURES))


def first_output(model: Any, arg: str, output: str) -> Any:
    """``model`` as a module of one positional input returning one tensor: every exporter
    (torch.export, torch.onnx, openvino.convert_model) then sees the same signature."""
    import torch

    class Single(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return getattr(self.inner(**{arg: x}), output)

    return Single()


# ------------------------------------------------------------------ contenders
Runner = Callable[[], Any]  # a NumPy array, or a cpu:0 Tensor (np.asarray converts it for the check)


def neurenix_cpu(module: Any, x: np.ndarray, threads: int, runtime: str | None) -> tuple[Runner, dict[str, Any]]:
    """cpu:0 as a user compiles it (the default choice, or ``runtime=``), called on a cpu tensor."""
    import torch

    import neurenix_core as nx
    from neurenix_core.nn import from_torch

    imported = from_torch(module, torch.from_numpy(x), static=True)
    kw: dict[str, Any] = {} if runtime is None else {"runtime": runtime}
    compiled = nx.compile(imported, device="cpu", threads=threads, progress=False, **kw)
    xt = nx.asarray(x, device="cpu")
    compiled(xt)  # compiles (and, for the default choice, measures the runtimes) for this shape
    summary = compiled.summary
    chosen = re.search(r"runtime (\S+) \(", summary)
    threads_read, source = _summary_threads(summary)
    # The result as a user gets it: a cpu:0 Tensor owning a fresh buffer (one copy out of the runtime,
    # as the OpenVINO and LiteRT contenders make). ``.numpy()`` would add a second copy the native
    # contenders do not make; the agreement check converts it once, outside the timing.
    return (lambda: compiled(xt)), {"runtime": chosen.group(1) if chosen else "?", "threads": threads_read,
                                            "threads_from": source, "summary": summary}


def _summary_threads(summary: str) -> tuple[int, str]:
    """Threads as the host model read them back ("N thread(s)" in its summary line), else the
    CPUs the child may run on: the interpreter's BLAS pool and XLA's process-wide pool are sized
    by the child's environment (THREAD_VARS, XLA_FLAGS) and cannot outgrow its CPU affinity."""
    found = re.search(r"(\d+) thread", summary)
    if found:
        return int(found.group(1)), "runtime"
    return _affinity(), "process CPU affinity"


def _affinity() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def torch_eager(module: Any, x: np.ndarray, threads: int) -> tuple[Runner, dict[str, Any]]:
    import torch

    torch.set_num_threads(threads)
    xt = torch.from_numpy(x)

    def run() -> np.ndarray:
        with torch.inference_mode():
            return module(xt).numpy()

    return run, {"threads": torch.get_num_threads(), "version": torch.__version__}


def _reused_request(compiled: Any, x: np.ndarray) -> tuple[Any, Callable[[], np.ndarray]]:
    """What an OpenVINO user writes per call: one infer request reused, the input shared, the
    output copied (the request reuses its buffers)."""
    import openvino as ov

    request = compiled.create_infer_request()
    tensor = ov.Tensor(x, shared_memory=True)

    def run() -> np.ndarray:
        request.set_input_tensor(0, tensor)
        request.infer()
        return request.get_output_tensor(0).data.copy()

    return request, run


def openvino_direct(module: Any, x: np.ndarray, threads: int) -> tuple[Runner, dict[str, Any]]:
    """What an OpenVINO user writes: convert_model, compile_model for CPU in f32, a reused request."""
    import openvino as ov
    import torch

    ov_model = ov.convert_model(module, example_input=torch.from_numpy(x), input=[(list(x.shape), ov.Type(x.dtype))])
    compiled = ov.Core().compile_model(ov_model, "CPU", {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY",
                                                          "INFERENCE_NUM_THREADS": threads})
    _, run = _reused_request(compiled, x)

    hint = compiled.get_property("INFERENCE_PRECISION_HINT")
    return run, {"threads": int(compiled.get_property("INFERENCE_NUM_THREADS")), "version": str(ov.get_version()),
                 "precision": hint.get_type_name() if hasattr(hint, "get_type_name") else str(hint)}


def onnxruntime_direct(module: Any, x: np.ndarray, threads: int) -> tuple[Runner, dict[str, Any]]:
    """torch.onnx.export at this input's shape, one CPUExecutionProvider session."""
    import onnxruntime as ort
    import torch

    with tempfile.TemporaryDirectory(prefix="neurenix-bench-cpu-") as tmp:
        path = os.path.join(tmp, "model.onnx")
        # The exporter prints its progress to stdout, where the child's last line must be its rows.
        with contextlib.redirect_stdout(sys.stderr):
            torch.onnx.export(module, (torch.from_numpy(x),), path, input_names=["x"], output_names=["y"], dynamo=True)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
        session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    feed = {"x": x}
    read = session.get_session_options()
    return (lambda: session.run(["y"], feed)[0]), {"threads": read.intra_op_num_threads, "version": ort.__version__,
                                                   "providers": ",".join(session.get_providers())}


def litert_direct(module: Any, x: np.ndarray, threads: int) -> tuple[Runner | None, dict[str, Any]]:
    """neurenix's fp32 TFLite writer (edgetpu plugin, emulated device) -> bare LiteRT Interpreter
    with XNNPACK; (None, reason) where the writer cannot express the whole model."""
    import torch

    import neurenix_core as nx
    from neurenix_core.errors import NeurenixError
    from neurenix_core.nn import from_torch

    try:
        import ai_edge_litert
        from ai_edge_litert import interpreter as litert
        from neurenix_edgetpu.runtime import delegation
    except ImportError as exc:
        return None, {"skipped": f"not installed: {exc}"}
    try:
        compiled = nx.compile(from_torch(module, torch.from_numpy(x), static=True), device="edgetpu:0", precision="fp32", progress=False)
        compiled(nx.asarray(x, device="edgetpu:0"))
    except NeurenixError as exc:
        return None, {"skipped": f"the TFLite writer refused the model: {str(exc).splitlines()[0]}"}
    if compiled.placement.partitioned:
        return None, {"skipped": f"the TFLite writer takes only part of the model: {compiled.placement.line()}"}
    data = compiled.native(x.shape).tflite_bytes
    it = litert.Interpreter(model_content=data, num_threads=threads, experimental_op_resolver_type=litert.OpResolverType.BUILTIN)
    it.allocate_tensors()
    i, o = it.get_input_details()[0]["index"], it.get_output_details()[0]["index"]

    def run() -> np.ndarray:
        it.set_tensor(i, x)
        it.invoke()
        return it.get_tensor(o)

    ops = delegation(it)
    return run, {"threads": threads, "version": getattr(ai_edge_litert, "__version__", "?"),
                 "xnnpack_ops": f"{sum(1 for _, d in ops if d)}/{len(ops)}"}


# ------------------------------------------------------------------ int8 contenders (--int8)
Call = Callable[[np.ndarray], np.ndarray]  # one batch-1 input -> its output as a NumPy array


def int8_inputs(model: str, count: int, seed: int) -> list[np.ndarray]:
    """``count`` batch-1 inputs: seeded normal images, or uniform token ids (seeds ``seed``, ``seed + 1``, ...)."""
    out = []
    for i in range(count):
        rng = np.random.default_rng(seed + i)
        if model == "bert_tiny":
            out.append(rng.integers(3, 30522, (1, BERT_SEQ)).astype(np.int64))
        else:
            out.append(rng.standard_normal((1, 3, IMAGE, IMAGE)).astype(np.float32))
    return out


def neurenix_compiled(imported: Any, x: np.ndarray, threads: int, runtime: str | None,
                      calibration: Sequence[np.ndarray] | None, method: str = "minmax") -> tuple[Runner, Call, dict[str, Any]]:
    """cpu:0 as a user compiles it, fp32 (``calibration`` None) or static int8 with ``calibration``
    and ``method`` (the core's plan, verified against its integer reference), on the default
    choice or ``runtime``."""
    import neurenix_core as nx

    kw: dict[str, Any] = {} if runtime is None else {"runtime": runtime}
    if calibration is not None:
        kw.update(precision="int8", calibration=list(calibration), calibration_method=method)
    compiled = nx.compile(imported, device="cpu", threads=threads, progress=False, **kw)
    xt = nx.asarray(x, device="cpu")
    compiled(xt)  # compiles (and, for the default choice, measures the runtimes) for this shape
    summary = compiled.summary
    chosen = re.search(r"runtime (\S+) \(", summary)
    threads_read, source = _summary_threads(summary)
    cfg: dict[str, Any] = {"runtime": chosen.group(1) if chosen else "?", "threads": threads_read, "threads_from": source}
    if calibration is not None:
        cfg["int8_path"] = int8_path(summary)
        native = compiled.native(x.shape)
        ov_model = getattr(native, "compiled", None)  # neurenix's OpenVINO host model keeps its compiled model
        if ov_model is not None and hasattr(ov_model, "get_runtime_model"):
            cfg["kernels"] = openvino_kernels(ov_model)
    cfg["summary"] = summary

    def call(a: np.ndarray) -> np.ndarray:
        return np.asarray(compiled(nx.asarray(a, device="cpu")))

    return (lambda: compiled(xt)), call, cfg


def int8_path(summary: str) -> str:
    """The summary's account of the int8 computation: "int8 with the core's plan (...)" with its
    parentheses balanced (OpenVINO's and LiteRT's host runtimes), else the interpreter's "NumPy
    integer kernels ... (int8, TFLite arithmetic)"."""
    start = summary.find("int8 with ")
    if start < 0:
        found = re.search(r"NumPy integer kernels[^;]*", summary)
        return found.group(0).split(";")[0] if found else "?"
    depth, end = 0, len(summary)
    for i in range(summary.find("(", start), len(summary)):
        depth += {"(": 1, ")": -1}.get(summary[i], 0)
        if depth == 0:
            end = i + 1
            break
    return summary[start:end]


def openvino_kernels(compiled: Any) -> str:
    """What OpenVINO's CPU plugin runs, from its execution graph: the convolution / fully
    connected / matmul layers executed in 8-bit (runtimePrecision u8 or i8) of all of them, and
    the oneDNN primitives those run (their names carry the ISA: ``amx``, ``avx512_core_vnni``...)."""
    layers, int8, reference, prims = 0, 0, 0, set()
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        kind, precision, primitive = (info[k].astype(str) if k in info else "" for k in ("layerType", "runtimePrecision", "primitiveType"))
        reference += primitive.startswith("ref")
        if kind not in ("Convolution", "FullyConnected", "MatMul", "GroupConvolution", "Deconvolution"):
            continue
        layers += 1
        if precision.lower() in ("u8", "i8"):
            int8 += 1
            prims.add(primitive)
    return (f"{int8}/{layers} conv/FC/matmul layers in 8-bit ({' '.join(sorted(prims)) or 'none'}), "
            f"{reference} layers on reference (ref_any) kernels")


def qdq_onnx(module: Any, x: np.ndarray, calibration: Sequence[np.ndarray], folder: str, method: str = "minmax") -> tuple[str, str]:
    """The torch model as ONNX Runtime's static QDQ model: ``torch.onnx.export`` at this input's
    shape, ``quant_pre_process`` (shape inference, batch norm folded into the convolutions), then
    ``quantize_static``: QDQ format, int8 weights per channel, uint8 activations, ranges over the
    ``calibration`` batches: MinMax, or for ``method="percentile"`` Percentile with 0.01% cut at
    each end, as neurenix's percentile 99.99 (ONNX Runtime cuts (100 - p) / 2 per end: p = 99.98).
    (path, how it was made)."""
    import onnxruntime
    import torch
    from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._batches = iter([{"x": b} for b in calibration])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._batches, None)

    fp32, pre, qdq = (os.path.join(folder, f"{n}.onnx") for n in ("fp32", "pre", "qdq"))
    with contextlib.redirect_stdout(sys.stderr):  # the exporter's progress: the child's last stdout line must be its rows
        torch.onnx.export(module, (torch.from_numpy(x),), fp32, input_names=["x"], output_names=["y"], dynamo=True)
        quant_pre_process(fp32, pre)
        ranges = ({"calibrate_method": CalibrationMethod.Percentile, "extra_options": {"CalibPercentile": 99.98}}
                  if method == "percentile" else {"calibrate_method": CalibrationMethod.MinMax})
        quantize_static(pre, qdq, Reader(), quant_format=QuantFormat.QDQ, per_channel=True, weight_type=QuantType.QInt8,
                        activation_type=QuantType.QUInt8, **ranges)
    return qdq, (f"onnxruntime {onnxruntime.__version__} quantize_static: QDQ, int8 weights per channel, uint8 activations, "
                 f"{'Percentile 99.98' if method == 'percentile' else 'MinMax'} over {len(calibration)} batches")


def onnxruntime_qdq(path: str, x: np.ndarray, threads: int) -> tuple[Runner, Call, dict[str, Any]]:
    """The QDQ model in a CPUExecutionProvider session (ONNX Runtime fuses each QuantizeLinear ->
    op -> DequantizeLinear group into an integer kernel); the integer kernels it runs are counted
    in the optimized model it writes."""
    import onnx
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    inspect = ort.SessionOptions()
    inspect.intra_op_num_threads, inspect.optimized_model_filepath = 1, path + ".optimized.onnx"
    ort.InferenceSession(path, inspect, providers=["CPUExecutionProvider"])
    ops = [n.op_type for n in onnx.load(inspect.optimized_model_filepath).graph.node]
    integer = sum("QLinear" in op or "Integer" in op or op in ("QGemm", "QAttention") for op in ops)
    floating = sum(op in ("Conv", "Gemm", "MatMul", "FusedConv", "FusedGemm", "FusedMatMul") for op in ops)
    feed = {"x": x}
    read = session.get_session_options()
    cfg = {"threads": read.intra_op_num_threads, "version": ort.__version__,
           "kernels": f"{integer} integer conv/matmul/elementwise ops, {floating} float conv/gemm/matmul left"}
    return (lambda: session.run(["y"], feed)[0]), (lambda a: session.run(["y"], {"x": a})[0]), cfg


def openvino_qdq(path: str, x: np.ndarray, threads: int) -> tuple[Runner, Call, dict[str, Any]]:
    """The same QDQ model read by OpenVINO (its QDQ pairs become FakeQuantize, which the CPU
    plugin runs in int8), compiled for "CPU" as neurenix's OpenVINO host runtime compiles:
    INFERENCE_PRECISION_HINT=f32 (only the quantized layers are integer), PERFORMANCE_HINT=LATENCY,
    INFERENCE_NUM_THREADS=N; a reused request."""
    import openvino as ov

    core = ov.Core()
    compiled = core.compile_model(core.read_model(path), "CPU", {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY",
                                                                  "INFERENCE_NUM_THREADS": threads})
    request, run = _reused_request(compiled, x)

    def call(a: np.ndarray) -> np.ndarray:
        request.set_input_tensor(0, ov.Tensor(np.ascontiguousarray(a)))
        request.infer()
        return request.get_output_tensor(0).data.copy()

    return run, call, {"threads": int(compiled.get_property("INFERENCE_NUM_THREADS")), "version": str(ov.get_version()),
                       "kernels": openvino_kernels(compiled)}


def top1(calls: Mapping[str, Call], inputs: Sequence[np.ndarray]) -> dict[str, list[int]]:
    """Each call's argmax over its output (the classes; BERT-tiny's pooled features) per input."""
    return {name: [int(np.argmax(np.asarray(call(a)).reshape(-1))) for a in inputs] for name, call in calls.items()}


def agreement_of(got: Sequence[int], want: Sequence[int]) -> float:
    """The fraction of inputs where ``got``'s top-1 equals ``want``'s."""
    return sum(g == w for g, w in zip(got, want)) / len(want)


def cpu_int8_features() -> dict[str, Any]:
    """The CPU's integer-dot-product features: /proc/cpuinfo's flags, OpenVINO's CPU
    OPTIMIZATION_CAPABILITIES and torch's CPU capability (each as the runtime reports it)."""
    flags: set[str] = set()
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    out: dict[str, Any] = {"cpu": benchkit.cpu_model(), "flags": sorted(flags & INT8_FLAGS),
                           "vnni": bool(flags & {"avx512_vnni", "avx_vnni"}), "amx": "amx_int8" in flags}
    try:
        import openvino as ov

        out["openvino"] = list(ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
    except Exception as exc:  # noqa: BLE001 - reported, not fatal: the flags above still name the CPU
        out["openvino"] = f"unavailable: {exc}"
    return out


def measure_int8(model: str, threads: int, rounds: int, samples: int, reference_agreement: bool) -> dict[str, Any]:
    """One int8 row at batch 1: cpu:0 and the interpreter in int8 and fp32, ONNX Runtime's and
    OpenVINO's int8 on ONNX Runtime's QDQ model, timed in the same rounds; top-1 agreement with
    torch fp32 over ``samples`` inputs (the interpreter's int8 only where ``reference_agreement``)."""
    import torch

    from neurenix_core.nn import from_torch

    module = int8_model(model)
    x = example_input(model, 1)
    calibration = int8_inputs(model, CALIBRATION, seed=1000)
    method = CALIBRATION_METHOD.get(model, "minmax")
    imported = from_torch(module, torch.from_numpy(x), static=True)
    setups: dict[str, tuple[Runner, Call, dict[str, Any]] | None] = {
        "cpu:0 int8": neurenix_compiled(imported, x, threads, None, calibration, method),
        "numpy int8": neurenix_compiled(imported, x, threads, "numpy", calibration, method),
        "cpu:0 fp32": neurenix_compiled(imported, x, threads, None, None),
        "numpy fp32": neurenix_compiled(imported, x, threads, "numpy", None),
    }
    skipped: dict[str, str] = {}
    made = ""
    with tempfile.TemporaryDirectory(prefix="neurenix-bench-cpu-int8-") as tmp:
        try:
            path, made = qdq_onnx(module, x, calibration, tmp, method)
        except Exception as exc:  # noqa: BLE001 - a peer that cannot take the model is a row's reason, not a crash
            for name in INT8_PEERS:
                skipped[name] = f"export or quantize_static failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        else:
            for name, setup in (("onnxruntime int8", onnxruntime_qdq), ("openvino int8", openvino_qdq)):
                try:
                    setups[name] = setup(path, x, threads)
                except Exception as exc:  # noqa: BLE001 - as above
                    skipped[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    live = {name: s for name, s in setups.items() if s is not None}

    def reference(a: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return np.asarray(module(torch.from_numpy(a)).numpy())

    expected = reference(x)
    errors = {name: max_rel_err(np.asarray(run()), expected) for name, (run, _, _) in live.items()}
    times = interleaved_median({name: run for name, (run, _, _) in live.items()}, rounds)
    peers: dict[str, float] = {name: times[name] for name in INT8_PEERS if name in times}
    agreed = [name for name in live if name.endswith("int8") and (reference_agreement or name != "numpy int8")]
    picks = top1({"torch fp32": reference, **{name: live[name][1] for name in agreed}}, int8_inputs(model, samples, seed=AGREEMENT_SEED))
    want = picks.pop("torch fp32")
    configs = {name: cfg for name, (_, _, cfg) in live.items()}
    cpu0 = configs["cpu:0 int8"]
    fastest: str | None = min(peers, key=lambda k: peers[k]) if peers else None
    peer_cfg = {"threads": configs[fastest]["threads"], "precision": "int8"} if fastest else {"threads": "-", "precision": "int8"}
    return benchkit.row(
        "cpu", model, "int8", 1, threads, times["cpu:0 int8"], times[fastest] if fastest else float("nan"),
        {"threads": cpu0["threads"], "precision": "int8"}, peer_cfg,
        input=describe_input(model, 1), runtime=cpu0["runtime"], int8_path=cpu0["int8_path"],
        fp32_runtime=configs["cpu:0 fp32"]["runtime"], fastest_peer=fastest, calibration_method=method,
        times_us={name: (times[name] * 1e6 if name in times else None) for name in INT8_CONTENDERS},
        int8_vs_fp32=times["cpu:0 int8"] / times["cpu:0 fp32"], numpy_int8_vs_fp32=times["numpy int8"] / times["numpy fp32"],
        agreement={name: agreement_of(got, want) for name, got in picks.items()}, agreement_samples=samples,
        agreement_classes=len(set(want)), top1=picks,
        fp32_agree=all(errors[n] <= AGREEMENT for n in ("cpu:0 fp32", "numpy fp32")),
        errors={k: f"{v:.1e}" for k, v in errors.items()}, skipped=skipped, qdq=made, configs=configs,
        numpy_int8_digest=hashlib.sha1(np.asarray(live["numpy int8"][0]()).tobytes()).hexdigest()[:16],
    )


# ------------------------------------------------------------------ timing
def interleaved_median(fns: Mapping[str, Runner], rounds: int, seed: int = 0, settle_s: float = SETTLE_S) -> dict[str, float]:
    """Seconds per call of each fn: the median over ``rounds`` shuffled rounds of a turn's time per
    call, each turn after ``settle_s`` of idle."""
    per_turn: dict[str, int] = {}
    for name, fn in fns.items():
        fn()  # warm-up: first-call allocations, lazy initialisation, thread pool start
        t0 = time.perf_counter()
        fn()
        per_turn[name] = max(1, int(TURN_S / max(time.perf_counter() - t0, 1e-7)))
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for order in benchkit.schedule(list(fns), rounds, seed):
        for name in order:
            fn, n = fns[name], per_turn[name]
            time.sleep(settle_s)
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            samples[name].append((time.perf_counter() - t0) / n)
    return {name: statistics.median(s) for name, s in samples.items()}


def max_rel_err(got: np.ndarray, want: np.ndarray) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        return float("inf")
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))


# ------------------------------------------------------------------ one child: one thread count
def measure(model: str, batch: int, threads: int, rounds: int) -> dict[str, Any]:
    """One row: every contender on ``model`` at ``batch``, the median times and the agreement."""
    module = build(model)
    x = example_input(model, batch)
    setups: dict[str, tuple[Runner | None, dict[str, Any]]] = {
        "cpu:0": neurenix_cpu(module, x, threads, None),
        "numpy": neurenix_cpu(module, x, threads, "numpy"),
        "torch": torch_eager(module, x, threads),
        "openvino": openvino_direct(module, x, threads),
        "onnxruntime": onnxruntime_direct(module, x, threads),
        "litert": litert_direct(module, x, threads),
    }
    runs = {name: run for name, (run, _) in setups.items() if run is not None}
    want = runs["torch"]()
    errors = {name: max_rel_err(run(), want) for name, run in runs.items()}
    times = interleaved_median(runs, rounds)
    natives = {name: times[name] for name in NATIVE if name in times}
    fastest = min(natives, key=lambda k: natives[k])
    configs = {name: cfg for name, (_, cfg) in setups.items()}
    cpu0 = configs["cpu:0"]
    return benchkit.row(
        "cpu", model, "fp32", batch, threads, times["cpu:0"], times[fastest],
        {"threads": cpu0["threads"], "precision": "fp32"}, {"threads": configs[fastest]["threads"], "precision": "fp32"},
        input=describe_input(model, batch), runtime=cpu0["runtime"], fastest_native=fastest,
        **{f"{name}_us": (times[name] * 1e6 if name in times else None) for name in CONTENDERS if name != "cpu:0"},
        numpy_vs_torch=times["numpy"] / times["torch"],
        agree=all(e <= AGREEMENT for e in errors.values()), max_rel_err=max(errors.values()),
        errors={k: f"{v:.1e}" for k, v in errors.items()}, configs=configs,
    )


def child(threads: int, plan: Mapping[str, Any]) -> list[dict[str, Any]]:
    if hasattr(os, "sched_setaffinity"):  # the child runs on N CPUs: no runtime gets more than it was told
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:threads])
    if plan.get("int8"):
        return [measure_int8(model, threads, plan["rounds"], plan["samples"], threads == plan["reference_threads"])
                for model in plan["models"]]
    return [measure(model, batch, threads, plan["rounds"]) for model in plan["models"] for batch in plan["batches"]]


def run_threads(threads: int, quick: bool, plan: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One pinned child per thread count (pools are sized at library load)."""
    with tempfile.TemporaryDirectory(prefix="neurenix-bench-cpu-state-") as state:
        # XLA:CPU (neurenix's xla host runtime) sizes its process-wide pool from XLA_FLAGS at start.
        xla = f"--xla_cpu_multi_thread_eigen={'true' if threads > 1 else 'false'} intra_op_parallelism_threads={threads}"
        env = {_CHILD_ENV: json.dumps(plan), "NEURENIX_STATE_DIR": state, "NEURENIX_EMULATE": "edgetpu",
               "XLA_FLAGS": xla, "JAX_PLATFORMS": "cpu"}
        return benchkit.run_child(os.path.abspath(__file__), threads, quick, env=env, timeout=3 * 3600)


# ------------------------------------------------------------------ report
def table(rows: Sequence[Mapping[str, Any]]) -> str:
    head = ["model", "input", "thr", "cpu:0 runtime", *(f"{c} µs" for c in CONTENDERS), "cpu:0 / fastest native", "added µs",
            "numpy / torch", "agree (max rel err)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        us = [_us(r["neurenix_us"]), *("-" if r[f"{c}_us"] is None else _us(r[f"{c}_us"]) for c in CONTENDERS[1:])]
        ratio = f"{r['ratio']:.2f} ({r['fastest_native']})" if r["ratio"] is not None else f"REFUSED: {r['refused']}"
        added = f"{r['neurenix_us'] - r['native_us']:+.1f}"  # the absolute goal below 50 µs
        lines.append("| " + " | ".join([r["model"], r["input"], str(r["threads"]), r["runtime"], *us, ratio, added,
                                        f"{r['numpy_vs_torch']:.2f}", f"{r['agree']} ({r['max_rel_err']:.1e})"]) + " |")
    return "\n".join(lines)


def _us(t: float) -> str:
    return f"{t:.1f}" if t < 100 else f"{t:.0f}"  # small calls: the 1 µs goal needs the decimal


def versions() -> dict[str, str]:
    from importlib import metadata

    out = {}
    for dist in ("neurenix-core", "numpy", "torch", "openvino", "onnxruntime", "ai-edge-litert", "transformers"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def report(rows: Sequence[Mapping[str, Any]], args: argparse.Namespace) -> None:
    m = benchkit.machine()
    print(f"cpu: CPU {m['cpu']} ({m['cpus']} CPUs available, 1-min load {m['load_1min']})" + (" -- quick run, rough numbers" if args.quick else ""))
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions().items()))
    print(table(rows))
    print("threads read back (LiteRT: as passed, it has no read-back) and each runtime's configuration:")
    for r in rows:
        cfg = ", ".join(f"{k}: {_short(v)}" for k, v in r["configs"].items())
        print(f"- {r['model']} b{r['batch']} t{r['threads']}: {cfg}")
    print("cpu:0 summaries:")
    for r in rows:
        print(f"- {r['model']} b{r['batch']} t{r['threads']}: {r['configs']['cpu:0']['summary']}")
    if args.json:
        benchkit.write_json(args.json, "cpu", rows, quick=bool(args.quick), versions=versions())


def int8_table(rows: Sequence[Mapping[str, Any]]) -> str:
    head = ["model", "input", "thr", "cpu:0 int8 runtime", *(f"{c} µs" for c in INT8_CONTENDERS), "cpu:0 int8 / fp32",
            "cpu:0 int8 / fastest int8 peer", "numpy int8 / fp32", "top-1 agreement (cpu:0 / numpy / ort / ov int8)",
            "cpu:0 int8 top-1 = numpy int8's"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        us = ["-" if r["times_us"][c] is None else _us(r["times_us"][c]) for c in INT8_CONTENDERS]
        if r["fastest_peer"] is None:
            peer = "no peer"
        elif r["ratio"] is None:
            peer = f"REFUSED: {r['refused']}"
        else:
            peer = f"{r['ratio']:.2f} ({r['fastest_peer'].split()[0]})"
        agree = " / ".join("-" if r["agreement"].get(c) is None else f"{r['agreement'][c]:.3f}"
                           for c in ("cpu:0 int8", "numpy int8", *INT8_PEERS))
        same = r.get("same_top1_as_reference", {}).get("cpu:0 int8")
        lines.append("| " + " | ".join([r["model"], r["input"], str(r["threads"]), r["runtime"], *us, f"{r['int8_vs_fp32']:.2f}",
                                        peer, f"{r['numpy_int8_vs_fp32']:.2f}", agree, "-" if same is None else f"{same:.3f}"]) + " |")
    return "\n".join(lines)


def int8_goals(rows: Sequence[Mapping[str, Any]], vnni: bool) -> list[str]:
    """The issue's goals, row by row: met or not, by how much (the numbers are for people: nothing fails)."""
    def tally(what: str, goal: float, pick: Callable[[Mapping[str, Any]], float | None]) -> str:
        got = [(f"{r['model']} t{r['threads']}", pick(r)) for r in rows]
        met = [f"{tag} {v:.2f}" for tag, v in got if v is not None and v <= goal]
        missed = [f"{tag} {v:.2f}" for tag, v in got if v is not None and v > goal]
        none = [tag for tag, v in got if v is None]  # a ratio refused (configurations differ) or without a peer
        return (f"- {what} <= {goal}: met on {len(met)}/{len(got)} rows" + (f"; not met: {', '.join(missed)}" if missed else "")
                + (f"; no ratio: {', '.join(none)}" if none else ""))

    out = [tally("cpu:0 int8 / cpu:0 fp32" + ("" if vnni else " (this CPU has no VNNI: the goal is for one that has)"), 0.8,
                 lambda r: r["int8_vs_fp32"]),
           tally("cpu:0 int8 / fastest int8 peer", 1.05, lambda r: r["ratio"]),
           tally("numpy int8 / numpy fp32 (neurenix-core alone)", 3.0, lambda r: r["numpy_int8_vs_fp32"])]
    drift = [(f"{r['model']} t{r['threads']}", r["agreement"]["cpu:0 int8"] - r["agreement"]["numpy int8"])
             for r in rows if r["agreement"].get("numpy int8") is not None]
    off = [f"{tag} {d:+.3f}" for tag, d in drift if abs(d) > 0.01 + 1e-9]
    out.append(f"- top-1 agreement of cpu:0 int8 within 0.01 of the integer reference's (runtime='numpy'): "
               f"{len(drift) - len(off)}/{len(drift)} rows" + (f"; not: {', '.join(off)}" if off else ""))
    return out


def report_int8(rows: Sequence[Mapping[str, Any]], args: argparse.Namespace) -> None:
    m, cpu = benchkit.machine(), cpu_int8_features()
    ov = cpu["openvino"]
    print(f"cpu: CPU {m['cpu']} ({m['cpus']} CPUs available, 1-min load {m['load_1min']}); int8 features: /proc/cpuinfo "
          f"{' '.join(cpu['flags']) or 'none'} (VNNI {'yes' if cpu['vnni'] else 'no'}, AMX {'yes' if cpu['amx'] else 'no'}); "
          f"OpenVINO CPU OPTIMIZATION_CAPABILITIES {' '.join(ov) if isinstance(ov, list) else ov}"
          + (" -- quick run, rough numbers" if args.quick else ""))
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions().items()))
    print(int8_table(rows))
    samples = {r["agreement_samples"] for r in rows}
    print(f"top-1 agreement with torch fp32 over {'/'.join(map(str, sorted(samples)))} seeded batch-1 inputs (image models: argmax "
          "of the 1000 logits; bert_tiny: argmax of the 128 pooled features); distinct torch classes hit: "
          + ", ".join(f"{r['model']} {r['agreement_classes']}" for r in rows if r["threads"] == rows[0]["threads"]))
    print("same top-1 as the integer reference (runtime='numpy'), each int8 runtime: "
          + "; ".join(f"{r['model']} t{r['threads']} " + ", ".join(f"{k} {v:.3f}" for k, v in r.get("same_top1_as_reference", {}).items())
                      for r in rows))
    print("goals:")
    print("\n".join(int8_goals(rows, cpu["vnni"])))
    print("each contender's configuration and kernels (threads read back; OpenVINO layers from its execution graph):")
    for r in rows:
        cfg = ", ".join(f"{k}: {_short(v)}" for k, v in r["configs"].items())
        print(f"- {r['model']} t{r['threads']}: {cfg}" + "".join(f"; {k}: NOT RUN: {v}" for k, v in r["skipped"].items()))
    print("output vs torch fp32 at the timed input (largest error / largest |value|; fp32 contenders must be <= "
          f"{AGREEMENT:g}): " + "; ".join(f"{r['model']} t{r['threads']} {r['errors']}" for r in rows))
    print("cpu:0 int8 summaries:")
    for r in rows:
        print(f"- {r['model']} t{r['threads']}: {r['configs']['cpu:0 int8']['summary']}")
    for made in dict.fromkeys(r["qdq"] for r in rows if r["qdq"]):
        print(f"peers' model ({', '.join(dict.fromkeys(r['model'] for r in rows if r['qdq'] == made))}): {made}")
    if args.json:
        benchkit.write_json(args.json, "cpu", rows, quick=bool(args.quick), versions=versions(), int8=True, cpu_features=cpu)


def _short(cfg: Mapping[str, Any]) -> str:
    return "{" + ", ".join(f"{k}={v}" for k, v in cfg.items() if k != "summary") + "}"


def main(argv: list[str] | None = None) -> int:
    p = benchkit.parser(__doc__, models=(*MODELS, "efficientnet_b0"))
    p.add_argument("--child", type=int, help=argparse.SUPPRESS)
    p.add_argument("--int8", action="store_true", help="the int8 rows instead: cpu:0 int8 against fp32 and the int8 peers (batch 1)")
    # None: the defaults depend on --quick (one model at batch 1) and --int8 unless given explicitly.
    p.set_defaults(models=None, batches=None)
    args = p.parse_args(argv)
    if args.child is not None:
        print(json.dumps(child(args.child, json.loads(os.environ[_CHILD_ENV]))))
        return 0
    if args.int8:
        return main_int8(args, p)
    plan = {"models": args.models or ([QUICK_MODEL] if args.quick else list(MODELS)),
            "batches": args.batches or ([1] if args.quick else [1, 32]),
            "rounds": QUICK_ROUNDS if args.quick else ROUNDS}
    rows: list[dict[str, Any]] = []
    for threads in args.threads:
        rows += run_threads(threads, args.quick, plan)
    report(rows, args)
    return 0


def main_int8(args: argparse.Namespace, p: argparse.ArgumentParser) -> int:
    if args.batches not in (None, [1]):
        p.error("--int8 runs batch 1 only")
    unknown = [m for m in args.models or () if m not in INT8_MODELS]
    if unknown:
        p.error(f"--int8 models are {', '.join(INT8_MODELS)}; not {', '.join(unknown)}")
    plan = {"int8": True, "models": args.models or ([QUICK_MODEL] if args.quick else list(INT8_MODELS)),
            "rounds": QUICK_ROUNDS if args.quick else INT8_ROUNDS,
            "samples": QUICK_AGREEMENT_SAMPLES if args.quick else AGREEMENT_SAMPLES,
            # The interpreter's integer kernels give the same integers at any thread count: their
            # agreement (the slowest to compute) is computed in the first child and copied.
            "reference_threads": args.threads[0]}  # (checked: the same output bytes at the timed input, else not copied)
    rows: list[dict[str, Any]] = []
    for threads in args.threads:
        rows += run_threads(threads, args.quick, plan)
    first = {r["model"]: r for r in rows if r["threads"] == plan["reference_threads"]}
    for r in rows:
        ref = first[r["model"]]
        if "numpy int8" not in r["agreement"] and r["numpy_int8_digest"] == ref["numpy_int8_digest"]:
            r["agreement"]["numpy int8"] = ref["agreement"]["numpy int8"]
            r["top1"]["numpy int8"] = ref["top1"]["numpy int8"]
            r["agreement_from"] = {"numpy int8": f"the {plan['reference_threads']}-thread child (integer kernels: the same integers)"}
        if "numpy int8" in r["top1"]:  # how often each int8 runtime's rounding changes the reference's top-1
            r["same_top1_as_reference"] = {name: agreement_of(got, r["top1"]["numpy int8"]) for name, got in r["top1"].items()
                                           if name != "numpy int8"}
    report_int8(rows, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
