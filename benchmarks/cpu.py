"""cpu:0 against the CPU runtimes used directly: ``nx.compile(model, device="cpu")`` (the host
runtime neurenix measures fastest, issue #31) and ``runtime="numpy"`` (the interpreter alone),
against PyTorch eager, OpenVINO, ONNX Runtime and LiteRT each called through its own API, on the
same torch model, in the same rounds, batch 1 and 32, 1 and 2 threads.

    .venv/bin/python benchmarks/cpu.py                  # full run (every model; tens of minutes)
    .venv/bin/python benchmarks/cpu.py --quick          # smoke run: mobilenetv3_small, batch 1, 3 rounds
    .venv/bin/python benchmarks/cpu.py [--models resnet18 bert_tiny] [--threads 1 2] [--batches 1 32] [--json out.json]

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
"""

from __future__ import annotations

import argparse
import contextlib
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


def build(model: str) -> Any:
    """The torch module ``model`` with seeded random weights, in eval mode."""
    import torch

    torch.manual_seed(0)
    builders: dict[str, Callable[[], Any]] = {"resnet18": _resnet18, "mobilenetv3_small": _mobilenetv3_small,
                                              "vit_tiny": _vit_tiny, "bert_tiny": _bert_tiny, "mlp_small": _mlp_small}
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


def _vit_tiny() -> Any:
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(image_size=IMAGE, patch_size=16, hidden_size=192, num_hidden_layers=12, num_attention_heads=3,
                       intermediate_size=768, num_labels=1000)
    return first_output(ViTForImageClassification(config), "pixel_values", "logits")


def _bert_tiny() -> Any:
    from transformers import BertConfig, BertModel

    config = BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512)
    return first_output(BertModel(config, add_pooling_layer=False), "input_ids", "last_hidden_state")


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


def openvino_direct(module: Any, x: np.ndarray, threads: int) -> tuple[Runner, dict[str, Any]]:
    """What an OpenVINO user writes: convert_model, compile_model for CPU in f32, a reused request."""
    import openvino as ov
    import torch

    ov_model = ov.convert_model(module, example_input=torch.from_numpy(x), input=[(list(x.shape), ov.Type(x.dtype))])
    compiled = ov.Core().compile_model(ov_model, "CPU", {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY",
                                                          "INFERENCE_NUM_THREADS": threads})
    request = compiled.create_infer_request()
    tensor = ov.Tensor(x, shared_memory=True)

    def run() -> np.ndarray:
        request.set_input_tensor(0, tensor)
        request.infer()
        return request.get_output_tensor(0).data.copy()

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


def _short(cfg: Mapping[str, Any]) -> str:
    return "{" + ", ".join(f"{k}={v}" for k, v in cfg.items() if k != "summary") + "}"


def main(argv: list[str] | None = None) -> int:
    p = benchkit.parser(__doc__, models=MODELS)
    p.add_argument("--child", type=int, help=argparse.SUPPRESS)
    # None: the defaults depend on --quick (one model at batch 1) unless given explicitly.
    p.set_defaults(models=None, batches=None)
    args = p.parse_args(argv)
    if args.child is not None:
        print(json.dumps(child(args.child, json.loads(os.environ[_CHILD_ENV]))))
        return 0
    plan = {"models": args.models or ([QUICK_MODEL] if args.quick else list(MODELS)),
            "batches": args.batches or ([1] if args.quick else [1, 32]),
            "rounds": QUICK_ROUNDS if args.quick else ROUNDS}
    rows: list[dict[str, Any]] = []
    for threads in args.threads:
        rows += run_threads(threads, args.quick, plan)
    report(rows, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
