"""cpu:0's NumPy opset interpreter (what nx.compile runs on cpu:0 with neurenix-core alone)
against PyTorch eager on the same models, pinned to 1 and to 2 threads, plus its per-node cost.

    .venv/bin/python benchmarks/interpreter.py [--quick] [--threads 1 2] [--models resnet18 ...] [--json out.json]

Models, plain torch.nn or transformers configs with random weights, imported with
``nx.nn.from_torch`` and compiled with ``nx.compile(model, device="cpu", runtime="numpy",
threads=N)`` (the interpreter, whatever host runtime is installed; its threads read back from
the summary): a ResNet-18 at 1x3x224x224 and 32x3x64x64, a MobileNetV3-small block stack, a ViT-tiny (transformers ViTModel, 192 wide, 12 layers) and a
BERT-tiny (transformers BertModel, 128 wide, 2 layers, 128 tokens). The ``nodes`` row times a
graph of 200 elementwise nodes on 4-element arrays: the interpreter's cost per node (planned,
and node by node as ``run_graph(..., return_values=True)`` still runs) against PyTorch eager's
per-op cost. Each thread count runs in its own interpreter (BLAS pools are sized at import);
no timing is asserted anywhere.
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any

os.environ.setdefault("NEURENIX_DISABLE_PLUGIN_AUTOLOAD", "1")  # cpu:0 alone, as with neurenix-core only

import numpy as np

from neurenix_core import benchkit

MODELS = ("resnet18", "resnet18-b32", "mobilenetv3s", "vit-tiny", "bert-tiny", "nodes")
NODES = 200
_MODELS_VAR = "NEURENIX_BENCH_INTERPRETER_MODELS"


def _resnet18(nn: Any, torch: Any) -> Any:
    class Basic(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
            self.c2, self.b2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
            self.down = None if stride == 1 and cin == cout else nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x: Any) -> Any:
            y = self.b2(self.c2(torch.relu(self.b1(self.c1(x)))))
            return torch.relu(y + (x if self.down is None else self.down(x)))

    layers: list[Any] = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [Basic(cin, cout, stride), Basic(cout, cout, 1)]
        cin = cout
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000))


def _mobilenetv3s(nn: Any, torch: Any) -> Any:
    class SE(nn.Module):
        def __init__(self, c: int, r: int) -> None:
            super().__init__()
            self.f1, self.f2 = nn.Conv2d(c, r, 1), nn.Conv2d(r, c, 1)

        def forward(self, x: Any) -> Any:
            w = nn.functional.adaptive_avg_pool2d(x, 1)
            return x * nn.functional.hardsigmoid(self.f2(torch.relu(self.f1(w))))

    class Block(nn.Module):  # inverted residual: expand 1x1, depthwise kxk, squeeze-excite, project 1x1
        def __init__(self, cin: int, k: int, exp: int, cout: int, se: int, hs: int, stride: int) -> None:
            super().__init__()
            act = nn.Hardswish if hs else nn.ReLU
            m: list[Any] = [] if exp == cin else [nn.Conv2d(cin, exp, 1, bias=False), nn.BatchNorm2d(exp), act()]
            m += [nn.Conv2d(exp, exp, k, stride, k // 2, groups=exp, bias=False), nn.BatchNorm2d(exp), act()]
            m += [SE(exp, max(8, exp // 4))] if se else []
            self.m = nn.Sequential(*m, nn.Conv2d(exp, cout, 1, bias=False), nn.BatchNorm2d(cout))
            self.residual = stride == 1 and cin == cout

        def forward(self, x: Any) -> Any:
            y = self.m(x)
            return x + y if self.residual else y

    cfg = [(16, 3, 16, 16, 1, 0, 2), (16, 3, 72, 24, 0, 0, 2), (24, 3, 88, 24, 0, 0, 1), (24, 5, 96, 40, 1, 1, 2), (40, 5, 240, 40, 1, 1, 1),
           (40, 5, 240, 40, 1, 1, 1), (40, 5, 120, 48, 1, 1, 1), (48, 5, 144, 48, 1, 1, 1), (48, 5, 288, 96, 1, 1, 2),
           (96, 5, 576, 96, 1, 1, 1), (96, 5, 576, 96, 1, 1, 1)]
    return nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.Hardswish(), *(Block(*c) for c in cfg),
                         nn.Conv2d(96, 576, 1, bias=False), nn.BatchNorm2d(576), nn.Hardswish(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(576, 1024), nn.Hardswish(), nn.Linear(1024, 1000))


def _transformer(nn: Any, name: str) -> Any:
    import transformers as tf

    if name == "vit-tiny":
        cfg = tf.ViTConfig(hidden_size=192, num_hidden_layers=12, num_attention_heads=3, intermediate_size=768, image_size=224,
                           patch_size=16, attn_implementation="eager")
        inner, key = tf.ViTModel(cfg, add_pooling_layer=False), "pixel_values"
    else:
        cfg = tf.BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512, attn_implementation="eager")
        inner, key = tf.BertModel(cfg, add_pooling_layer=False), "input_ids"

    class LastHidden(nn.Module):  # one tensor in, one out: what from_torch and the timing loop take
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x: Any) -> Any:
            return self.inner(**{key: x}).last_hidden_state

    return LastHidden()


def model(name: str) -> tuple[Any, np.ndarray]:
    """The PyTorch model (eval mode, seeded random weights) and its example input."""
    import torch

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    nn = torch.nn
    image = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
    if name.startswith("resnet18"):
        x = rng.standard_normal((32, 3, 64, 64)).astype(np.float32) if name == "resnet18-b32" else image
        return _resnet18(nn, torch).eval(), x
    if name == "mobilenetv3s":
        return _mobilenetv3s(nn, torch).eval(), image
    if name == "vit-tiny":
        return _transformer(nn, name).eval(), image
    return _transformer(nn, name).eval(), rng.integers(0, 30000, (1, 128)).astype(np.int64)


def _model_row(name: str, threads: int, rounds: int) -> dict[str, Any]:
    import torch

    import neurenix_core as nx

    tm, x = model(name)
    compiled = nx.compile(nx.nn.from_torch(tm, (torch.from_numpy(x),), static=True), device="cpu", runtime="numpy", threads=threads)
    xt, xtorch = nx.asarray(x), torch.from_numpy(x)

    def torch_run() -> Any:
        with torch.inference_mode():
            return tm(xtorch)

    np.testing.assert_allclose(compiled(xt).numpy(), torch_run().numpy(), rtol=1e-4, atol=1e-4)  # the same model
    t = benchkit.interleaved({"neurenix": lambda: compiled(xt), "torch": torch_run}, rounds=rounds)
    read = re.search(r"(\d+) threads?\b", compiled.summary)  # the interpreter's threads= as its summary reads it back
    config = {"threads": int(read.group(1)) if read else None}
    return benchkit.row("interpreter", name, "fp32", x.shape[0], threads, t["neurenix"], t["torch"], config,
                        {"threads": torch.get_num_threads()})


def _nodes_row(threads: int, rounds: int) -> dict[str, Any]:
    """Per-node cost: 200 add/mul/sub nodes on 4-element float32 arrays."""
    import torch

    from neurenix_core.graph.ir import Graph, Node, TensorSpec
    from neurenix_core.graph.reference.run import run_graph

    ops = ("add", "mul", "sub")
    nodes = tuple(Node(f"n{i}", ops[i % 3], (f"v{i}", "x"), f"v{i + 1}") for i in range(NODES))
    graph = Graph((TensorSpec("x", (4,)), TensorSpec("v0", (4,))), nodes, (f"v{NODES}",))
    x, v = np.full(4, 1.0001, np.float32), np.arange(4, dtype=np.float32)
    tx, tv = torch.from_numpy(x), torch.from_numpy(v)
    fns = (torch.add, torch.mul, torch.sub)

    def torch_run() -> Any:
        out = tv
        for i in range(NODES):
            out = fns[i % 3](out, tx)
        return out

    t = benchkit.interleaved({
        "planned": lambda: run_graph(graph, x, v, float_dtype=None),
        "node_by_node": lambda: run_graph(graph, x, v, float_dtype=None, return_values=True),
        "torch": torch_run,
    }, rounds=rounds)
    r = benchkit.row("interpreter", f"nodes ({NODES} add/mul/sub, per node)", "fp32", 1, threads, t["planned"] / NODES, t["torch"] / NODES,
                     {"threads": threads}, {"threads": torch.get_num_threads()})
    r["node_by_node_us"] = t["node_by_node"] / NODES * 1e6
    return r


def measure(threads: int, quick: bool, models: list[str]) -> list[dict[str, Any]]:
    import torch

    torch.set_num_threads(threads)
    rounds = 3 if quick else 15
    return [_nodes_row(threads, rounds) if m == "nodes" else _model_row(m, threads, rounds) for m in models]


def main(argv: list[str] | None = None) -> int:
    p = benchkit.parser(__doc__, models=MODELS)
    p.add_argument("--child", type=int, help="(internal) measure at this many threads and print JSON rows")
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child, args.quick, os.environ.get(_MODELS_VAR, " ".join(MODELS)).split())))
        return 0
    rows: list[dict[str, Any]] = []
    for threads in args.threads:
        # run_child passes --child and --quick only: the model list travels in the environment
        rows += benchkit.run_child(__file__, threads, args.quick, env={_MODELS_VAR: " ".join(args.models)}, timeout=1800)
    benchkit.report("interpreter", rows, args, [("node_by_node_us", "node by node µs", ".2f")],
                    device="cpu:0 = the NumPy opset interpreter (runtime='numpy'); native = PyTorch eager")
    return 0


if __name__ == "__main__":
    sys.exit(main())
