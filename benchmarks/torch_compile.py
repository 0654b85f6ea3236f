"""torch.compile backends side by side: eager, inductor, openvino, neurenix on cpu:0 and npu:0.

    .venv/bin/python benchmarks/torch_compile.py            # ResNet-18-like, BERT-tiny, a 135M causal LM
    .venv/bin/python benchmarks/torch_compile.py --quick    # small models: checks the benchmark runs
    .venv/bin/python benchmarks/torch_compile.py --json out.json

Each thread count runs in a fresh interpreter with every pool pinned (OMP/OPENBLAS/MKL_NUM_THREADS,
``torch.set_num_threads``, the compile option ``threads`` for neurenix). The npu is OpenVINO's CPU
plugin under ``NEURENIX_EMULATE=npu``, so ``backend="openvino"`` (OpenVINO's own torch.compile
backend, device CPU, f32 precision hint) runs on the same hardware as ``npu:0``: they are compared
with each other; ``cpu:0`` is compared with the fastest of eager, inductor and openvino.

Per model, batch and backend: ``compile s`` is the first call after ``torch._dynamo.reset()``
(dynamo's capture plus the backend's compile, every on-disk cache empty: a fresh neurenix state
folder and inductor cache folder per run, inductor's FX graph cache off), ``ms`` the steady-state latency, the fastest of interleaved rounds
(``benchkit.interleaved``) under ``torch.no_grad()``. Every backend's output is checked against
eager (max abs difference in the table). Models are built in plain ``torch.nn`` or from
transformers configs (random weights): ``resnet18`` (BasicBlocks 2-2-2-2, 3x128x128 inputs),
``bert-tiny`` (hidden 128, 2 layers, 2 heads, 128 tokens), ``lm-135m`` (a Llama shaped like
SmolLM-135M, a forward over 64 tokens; batch 1 only: at batch 32 one call takes tens of seconds here).
Nothing is asserted; docs/torch-compile.md holds the last run.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import sys
import tempfile
import time
from typing import Any

if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    sys.path.pop(0)  # benchmarks/openvino.py would shadow the openvino package (what ``python -P`` does)

from neurenix_core.benchkit import cpu_model, machine, parser, run_child

MODELS = ("resnet18", "bert-tiny", "lm-135m")
BACKENDS = ("eager", "inductor", "openvino", "nx cpu:0", "nx npu:0")


def _resnet18(quick: bool) -> Any:
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
            self.c2, self.b2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
            self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                         if stride != 1 or cin != cout else nn.Identity())

        def forward(self, x: Any) -> Any:
            return torch.relu(self.b2(self.c2(torch.relu(self.b1(self.c1(x))))) + self.down(x))

    widths = (16, 32, 64, 128) if quick else (64, 128, 256, 512)
    layers: list[nn.Module] = [nn.Conv2d(3, widths[0], 7, 2, 3, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = widths[0]
    for i, w in enumerate(widths):
        layers += [Block(cin, w, 1 if i == 0 else 2), Block(w, w, 1)]
        cin = w
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 1000)]
    model = nn.Sequential(*layers).eval()
    size = 64 if quick else 128
    return model, lambda batch: (torch.randn(batch, 3, size, size),), {}


def _bert_tiny(quick: bool) -> Any:
    import torch
    from transformers import BertConfig, BertModel

    model = BertModel(BertConfig(vocab_size=30522, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                                 intermediate_size=512)).eval()
    seq = 32 if quick else 128

    def inputs(batch: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
        ids = torch.randint(0, 30522, (batch, seq))
        return (), {"input_ids": ids, "attention_mask": torch.ones_like(ids)}

    return model, lambda batch: inputs(batch)[0], inputs


def _lm(quick: bool) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    shape = ({"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "vocab_size": 512} if quick else
             {"hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
              "vocab_size": 49152, "tie_word_embeddings": True})
    model = LlamaForCausalLM(LlamaConfig(max_position_embeddings=2048, use_cache=False, **shape)).eval()

    def inputs(batch: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (), {"input_ids": torch.randint(0, shape["vocab_size"], (batch, 64))}

    return model, lambda batch: inputs(batch)[0], inputs


def _model(name: str, quick: bool) -> tuple[Any, Any]:
    """(model, inputs(batch) -> (args, kwargs))."""
    if name == "resnet18":
        model, args, _ = _resnet18(quick)
        return model, lambda b: (args(b), {})
    model, _, inputs = _bert_tiny(quick) if name == "bert-tiny" else _lm(quick)
    return model, inputs


def _first(out: Any) -> Any:
    import torch

    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)):
        return out[0]
    return out[0] if hasattr(out, "__getitem__") and not isinstance(out, dict) else next(iter(out.values()))


def _compiled(name: str, model: Any, threads: int) -> Any:
    import torch

    import neurenix_core as nx

    if name == "eager":
        return model
    if name == "inductor":
        return torch.compile(model, backend="inductor", dynamic=False)
    if name == "openvino":
        import openvino.torch  # noqa: F401  (registers the backend)

        return torch.compile(model, backend="openvino", options={"device": "CPU", "config": {"INFERENCE_PRECISION_HINT": "f32",
                                                                                           "INFERENCE_NUM_THREADS": str(threads)}})
    device = name.split()[1]
    backend = nx.torch_backend(device=device, precision="fp32", threads=threads)
    compiled = torch.compile(model, backend=backend, dynamic=False)
    compiled.neurenix_backend = backend  # read back after the first call: which runtime each graph runs on
    return compiled


def _runtimes(fn: Any) -> str | None:
    """The runtimes neurenix's graphs run on ("openvino", "onnxruntime x2" ...), read from the summary."""
    backend = getattr(fn, "neurenix_backend", None)
    if backend is None:
        return None
    found = [line.split("; runtime ", 1)[1].split(" ", 1)[0] for line in backend.summary.splitlines() if "; runtime " in line]
    return ", ".join(sorted(set(found))) or "the device's own"


def _bench_model(name: str, threads: int, batches: list[int], quick: bool) -> list[dict[str, Any]]:
    import torch

    from neurenix_core.benchkit import interleaved

    model, inputs = _model(name, quick)
    rows = []
    for batch in ([1] if name == "lm-135m" and not quick else batches):
        args, kwargs = inputs(batch)
        torch._dynamo.reset()  # every backend compiles this batch size afresh, static (dynamic=False)
        with torch.no_grad():
            want = _first(model(*args, **kwargs))
            calls, compile_s, err, failed, runtime = {}, {}, {}, {}, {}
            for backend in BACKENDS:
                fn = _compiled(backend, copy.deepcopy(model), threads)
                t0 = time.perf_counter()
                try:
                    got = _first(fn(*args, **kwargs))
                except Exception as exc:  # noqa: BLE001 - a backend that fails on this model is a row saying so
                    failed[backend] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:160]
                    continue
                compile_s[backend] = time.perf_counter() - t0
                err[backend] = float((got - want).abs().max())
                runtime[backend] = _runtimes(fn)
                calls[backend] = functools.partial(fn, *args, **kwargs)
            best = interleaved(calls, rounds=3 if quick else 7, warmup=1, budget_s=0.2)
        for backend in BACKENDS:
            rows.append({"model": name, "batch": batch, "threads": threads, "backend": backend, "ms": best[backend] * 1e3 if backend in best else None,
                         "compile_s": compile_s.get(backend), "max_abs_err": err.get(backend), "failed": failed.get(backend),
                         "runtime": runtime.get(backend)})
    return rows


def child(threads: int, quick: bool, models: list[str], batches: list[int]) -> None:
    import torch

    torch.set_num_threads(threads)
    rows = []
    for name in models:
        rows += _bench_model(name, threads, batches, quick)
    print(json.dumps(rows))


def _cell(value: float | None, fmt: str) -> str:
    return "failed" if value is None else format(value, fmt)


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None else f"{a / b:.2f}"


def _table(rows: list[dict[str, Any]]) -> str:
    head = ["model", "batch", "threads", *(f"{b} ms" for b in BACKENDS), "cpu:0 / fastest other", "npu:0 / openvino",
            *(f"{b} compile s" for b in BACKENDS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    keys = sorted({(r["model"], r["batch"], r["threads"]) for r in rows}, key=lambda k: (MODELS.index(k[0]), k[1], k[2]))
    for key in keys:
        by = {r["backend"]: r for r in rows if (r["model"], r["batch"], r["threads"]) == key}
        others = [by[b]["ms"] for b in ("eager", "inductor", "openvino") if by[b]["ms"] is not None]
        cells = [key[0], str(key[1]), str(key[2]), *(_cell(by[b]["ms"], ".2f") for b in BACKENDS),
                 _ratio(by["nx cpu:0"]["ms"], min(others) if others else None), _ratio(by["nx npu:0"]["ms"], by["openvino"]["ms"]),
                 *(_cell(by[b]["compile_s"], ".1f") for b in BACKENDS)]
        lines.append("| " + " | ".join(cells) + " |")
    errors = [r["max_abs_err"] for r in rows if r["max_abs_err"] is not None]
    failures = sorted({f"- {r['backend']} on {r['model']}: {r['failed']}" for r in rows if r["failed"]})
    chosen = sorted({f"- nx cpu:0 on {r['model']}, batch {r['batch']}, {r['threads']} thread(s): runtime {r['runtime']}"
                     for r in rows if r["backend"] == "nx cpu:0" and r.get("runtime")})
    return "\n".join([*lines, "", f"largest |output - eager| over every row: {max(errors):.2e}", *chosen, *failures])


def main() -> None:
    p = parser(__doc__, models=MODELS)
    p.add_argument("--child", type=int, help=argparse_hidden())
    args = p.parse_args()
    if args.child is not None:
        child(args.child, args.quick, args.models, args.batches)
        return
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as state:
        # every compile cold: neurenix's state folder and inductor's on-disk caches fresh per run
        env = {"NEURENIX_EMULATE": "npu", "JAX_PLATFORMS": "cpu", "NEURENIX_STATE_DIR": state,
               "TORCHINDUCTOR_CACHE_DIR": os.path.join(state, "inductor"), "TORCHINDUCTOR_FX_GRAPH_CACHE": "0",
               "TORCHINDUCTOR_AUTOGRAD_CACHE": "0"}
        extra = ["--models", *args.models, "--batches", *map(str, args.batches)]
        for threads in args.threads:
            rows += run_child(__file__, threads, args.quick, env=env, timeout=7200, extra=extra)
    m = machine()
    print(f"torch.compile backends: CPU {cpu_model()} ({m['cpus']} CPUs available, 1-min load {m['load_1min']})"
          + (" -- quick run, rough numbers" if args.quick else ""))
    print(_table(rows))
    if args.json:
        from neurenix_core.benchkit import write_json

        write_json(args.json, "torch_compile", rows, quick=bool(args.quick))


def argparse_hidden() -> str:
    import argparse

    return argparse.SUPPRESS


if __name__ == "__main__":
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    sys.exit(main())
