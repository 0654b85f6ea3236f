"""The persistent compile cache: the first compile-and-call of a model in a new process, with the
cache off, cold (empty: the process compiles and stores) and warm (a second process finds the
entry), per device, on a small CNN and BERT-tiny (by default), ResNet-18 and ViT-Tiny.

    .venv/bin/python benchmarks/compile_cache.py [--quick] [--devices cpu npu tpu edgetpu cuda] [--models cnn bert-tiny resnet18 vit-tiny]
                                                 [--repeats 3] [--json out.json]

Models: a small CNN (3 conv + BN + ReLU blocks, 3x64x64, 10 classes) and BERT-tiny (transformers
BertModel from its config: 2 layers, 128 wide, 2 heads, 128 tokens, no pooler); on request ResNet-18
and ViT-Tiny at batch 1, 224x224 (benchmarks/cpu.py's builders). Each is imported once with
``nx.nn.from_torch`` (seeded weights) and saved as ``.nxm`` model files: every measured process
loads the same file (no torch), so its graph fingerprint is the same. Plugins other than cpu are
emulated (NEURENIX_EMULATE): OpenVINO's CPU device (npu), JAX's CPU platform (tpu), LiteRT
without delegate (edgetpu), PyTorch CPU (cuda).

One unmeasured process per device and model runs first (cache off): it writes the ``.pyc`` files of
what that path imports, as installing a package does (the measured processes run without
PYTHONDONTWRITEBYTECODE), and brings the files into the OS cache, for every column alike.
Each measured process loads the model, starts the device's backend and runs one op on it
(importing and starting the framework is not compiling, and the cache cannot help it) and times
``nx.compile(model, device=...)`` plus the first call, which is where the compile happens. "off"
runs with NEURENIX_COMPILE_CACHE=0, "cold" with an empty state folder, "warm" in the next process
on the folder "cold" left. Each cell is the median of ``--repeats`` processes (a fresh folder per
cold run). No timing is asserted anywhere; the machine's load is printed with the table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# benchmarks/openvino.py would shadow the real OpenVINO package while this folder is on sys.path
# (it is sys.path[0] when the script runs, in the measured processes too).
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != _HERE]

DEVICES = {"cpu": "cpu:0", "npu": "npu:0", "tpu": "tpu:0", "edgetpu": "edgetpu:0", "cuda": "cuda:0"}
MODELS = ("cnn", "bert-tiny", "resnet18", "vit-tiny")
DEFAULT_MODELS = ("cnn", "bert-tiny")
EMULATION = {"NEURENIX_EMULATE": "cuda,tpu,npu,edgetpu", "JAX_PLATFORMS": "cpu"}


# ------------------------------------------------------------------ models (parent process only)
def _cnn(torch: Any) -> tuple[Any, Any]:
    nn = torch.nn
    blocks: list[Any] = []
    cin = 3
    for cout in (16, 32, 64):
        blocks += [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(), nn.MaxPool2d(2)]
        cin = cout
    model = nn.Sequential(*blocks, nn.Flatten(), nn.Linear(64 * 8 * 8, 10)).eval()
    return model, torch.randn(1, 3, 64, 64)


def _bert_tiny(torch: Any) -> tuple[Any, Any]:
    from transformers import BertConfig, BertModel

    bert = BertModel(BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512),
                     add_pooling_layer=False).eval()

    class Single(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = bert

        def forward(self, ids: Any) -> Any:
            return self.inner(input_ids=ids).last_hidden_state

    return Single().eval(), torch.zeros((1, 128), dtype=torch.int64)


def _from_cpu_benchmark(name: str) -> Any:
    """A model of benchmarks/cpu.py (ResNet-18, ViT-Tiny at 224x224, batch 1): the same builders."""

    def build(torch: Any) -> tuple[Any, Any]:
        from neurenix_core import benchkit

        cpu = benchkit.load_script(os.path.join(_HERE, "cpu.py"), "neurenix_cpu_benchmark")
        return cpu.build(name), torch.from_numpy(cpu.example_input(name, 1))

    return build


#: Larger models beside the small ones: how the cache scales where compiling costs more.
_BUILDERS: dict[str, Any] = {"cnn": _cnn, "bert-tiny": _bert_tiny, "resnet18": _from_cpu_benchmark("resnet18"),
                             "vit-tiny": _from_cpu_benchmark("vit_tiny")}


def write_models(folder: Path, models: list[str]) -> dict[str, tuple[Path, Path]]:
    """Each model imported once and saved (.nxm) with its example input (.npy)."""
    import numpy as np
    import torch

    import neurenix_core as nx

    out = {}
    for name in models:
        torch.manual_seed(0)
        module, example = _BUILDERS[name](torch)
        graph_module = nx.nn.from_torch(module, (example,))
        path, x = folder / f"{name}.nxm", folder / f"{name}.npy"
        nx.nn.save(graph_module, path)
        np.save(x, example.numpy(), allow_pickle=False)
        out[name] = (path, x)
    return out


# ------------------------------------------------------------------ one measured process
def child(model_path: str, input_path: str, device: str) -> None:
    import numpy as np

    import neurenix_core as nx

    model = nx.nn.load(model_path)
    x = np.load(input_path, allow_pickle=False)
    a = nx.ones((2, 2), device=device)
    (a @ a).numpy()  # the backend starts and runs an op here: importing and starting a framework is not compiling
    t0 = time.perf_counter()
    compiled = nx.compile(model, device=device, outputs="host")
    y = compiled(x)
    seconds = time.perf_counter() - t0
    print(json.dumps({"seconds": seconds, "summary": compiled.summary, "checksum": float(np.abs(np.asarray(y, np.float64)).sum())}))


def _measure(model: tuple[Path, Path], device: str, state: Path, **env: str) -> dict[str, Any]:
    # PYTHONDONTWRITEBYTECODE left out: with it, every process compiles each module changed since
    # its .pyc was written again, which an installed package (compiled at install) never does.
    full = {k: v for k, v in os.environ.items() if not k.startswith(("NEURENIX_", "JAX_", "XLA_")) and k != "PYTHONDONTWRITEBYTECODE"}
    full.update(EMULATION, NEURENIX_STATE_DIR=str(state), **env)
    proc = subprocess.run([sys.executable, __file__, "--child", str(model[0]), str(model[1]), device], capture_output=True, text=True,
                          env=full, timeout=600, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{device}: the measured process failed:\n{proc.stdout}\n{proc.stderr}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def measure(model: tuple[Path, Path], device: str, repeats: int, scratch: Path) -> dict[str, Any]:
    off, cold, warm, summaries = [], [], [], []
    identical, close = True, True
    # One process first, not measured, the same for every column: it writes the .pyc files of
    # what the device's path imports and brings the files into the OS cache.
    _measure(model, device, scratch / "prime", NEURENIX_COMPILE_CACHE="0")
    for r in range(repeats):
        state = scratch / f"{device.replace(':', '')}-{model[0].stem}-{r}"
        a = _measure(model, device, scratch / "off", NEURENIX_COMPILE_CACHE="0")
        b = _measure(model, device, state)
        c = _measure(model, device, state)
        off.append(a["seconds"])
        cold.append(b["seconds"])
        warm.append(c["seconds"])
        # warm must give exactly what cold gave (the same compiled form); the run with the cache
        # off may differ by rounding on cpu:0, whose runtime is chosen by measurement each time.
        identical = identical and b["checksum"] == c["checksum"]
        close = close and abs(a["checksum"] - b["checksum"]) <= 1e-5 * max(abs(b["checksum"]), 1.0)
        summaries = [b["summary"], c["summary"]]
    med = {k: statistics.median(v) for k, v in (("off", off), ("cold", cold), ("warm", warm))}
    return {**med, "speedup": med["cold"] / med["warm"], "same_result": identical and close, "warm_identical": identical,
            "entry": _entry_times(*summaries), "summaries": summaries}


def _entry_times(cold: str, warm: str) -> str:
    """What the plugin's cache entry cost to build (cold) and to load (warm), from the summaries:
    the compile step itself, without the process's fixed costs; "-" where nothing is cached."""
    built = re.findall(r"compiled in (\d+) ms and stored", cold)
    loaded = re.findall(r"loaded in (\d+) ms", warm)
    if not built or not loaded:
        return "-"
    return f"{sum(map(int, built))} -> {sum(map(int, loaded))} ms"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="one repeat: checks everything runs, numbers are rough")
    parser.add_argument("--devices", nargs="+", default=list(DEVICES), choices=list(DEVICES))
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS), choices=list(MODELS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="write the rows here too")
    args = parser.parse_args(argv)
    if args.child:
        child(*args.child)
        return 0
    from neurenix_core import benchkit

    repeats = 1 if args.quick else args.repeats
    rows = []
    with tempfile.TemporaryDirectory(prefix="neurenix-cc-bench-") as tmp:
        models = write_models(Path(tmp), args.models)
        for name in args.models:
            for dev in args.devices:
                row = {"model": name, "device": DEVICES[dev], **measure(models[name], DEVICES[dev], repeats, Path(tmp))}
                rows.append(row)
                print(f"{name:10} {DEVICES[dev]:10} off {row['off']:.3f} s  cold {row['cold']:.3f} s  warm {row['warm']:.3f} s  "
                      f"cold/warm {row['speedup']:.1f}x  same result: {row['same_result']}", flush=True)
    machine = benchkit.machine()
    print(f"\n{machine}\n")
    print("| model | device | cache off | cold (compile + store) | warm (second process) | cold / warm | entry: build -> load |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['model']} | {r['device']} | {r['off']:.3f} s | {r['cold']:.3f} s | {r['warm']:.3f} s | {r['speedup']:.1f}x "
              f"| {r['entry']} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine, "repeats": repeats, "rows": rows}, indent=2))
    return 0 if all(r["same_result"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
