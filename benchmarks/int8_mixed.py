"""int8 ViT and BERT on cpu:0: neurenix's mixed precision against PyTorch's own PTQ (issue #44).

Top-1 agreement with the torch fp32 model over ``--inputs`` random inputs (the share of inputs
whose arg-max class is fp32's), and the integer reference's relative L2 error against float on
the two verification batches (what ``nx.compile``'s check measures).

    .venv/bin/python benchmarks/int8_mixed.py [--quick] [--models vit bert] [--inputs 500] [--targets 0.1 0.05]
        [--trigger 0.05] [--devices cpu npu edgetpu tpu cuda] [--json out.json]

Models, transformers classifiers from a config (random weights: nothing is downloaded):

* ``vit``: ViT-Tiny's width and depth (hidden 192, 12 blocks, 3 heads, MLP 768) on 32x32 images
  in 4x4 patches (65 tokens), 10 classes;
* ``bert``: BERT-tiny's configuration (hidden 128, 2 layers, 2 heads, intermediate 512) with a
  1,000-word vocabulary, 32 tokens (no padding, so no attention mask), 4 classes.

Random weights have none of the outlier channels trained transformers carry in their residual
stream (Bondarenko et al. 2021 for BERT, Sun et al. 2024 "Massive activations" for ViTs), which
are what breaks per-tensor int8 of a layer norm's input. Each model is measured as initialised
(``plain``) and with planted outliers (``outliers``): two hidden channels of +-``--vit-outlier``
added to the ViT's position embeddings (the residual stream carries them through every block),
and a bias of +-``--bert-outlier`` on two channels of BERT's first FFN output; every layer norm
then scales those two channels by 0.01, as a trained one does with its outlier channels.

Contenders, all calibrated on the same 8 batches of 16 inputs (``--quick``: 4):

* ``nx int8 all``: the calibrated plan with every value quantized (``mixed_precision=False,
  verify=False``: the plan ``nx.compile`` refuses where it is over 30%);
* ``nx int8 mixed``: ``nx.compile(model, "cpu", quantize="int8", calibration=...)`` as a user
  calls it (``mixed.MIXED_TARGET``), with how many layers it kept in float;
* ``nx mixed t=...``: ``mixed.mix`` with each of ``--targets`` and ``--trigger`` (how MIXED_TARGET
  and MIXED_TRIGGER were chosen: ``--trigger 0`` mixes a plan the verification passes too), with
  linear / conv2d outputs allowed in float (``qmath.FLOAT_OUTPUT_OPS``), and ``... int8-out``
  without them (every linear writes int8: the mixes before float outputs);
* ``--devices``: the default mix and the ``--targets`` mixes compiled for each device that takes
  int8 plans (``cpu``: cpu:0; ``npu``, ``edgetpu``, ``tpu``, ``cuda``: emulated), each verified
  against the integer reference by nx.compile; the rows name the device;
* ``pt2e xnnpack``: torchao PT2E with ``XNNPACKQuantizer`` (symmetric, per channel), run by torch;
* ``pt2e x86``: torchao PT2E with ``X86InductorQuantizer``'s default configuration, run by torch.

neurenix's plans run on cpu:0 with ``runtime="openvino"`` where the npu plugin offers it (checked
against the integer reference by nx.compile's verification, as every int8 compile is), else on the
core's choice; the summary's runtime is printed. No number is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# benchmarks/openvino.py would shadow the real OpenVINO package while this folder is on sys.path
# (it is sys.path[0] when the script runs).
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != _HERE]
# Every plugin that takes int8 plans, emulated here (the npu plugin's OpenVINO CPU also serves
# cpu:0 as its host runtime); the tpu's XLA on the host CPU.
os.environ.setdefault("NEURENIX_EMULATE", "cuda,tpu,npu,edgetpu")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

CALIBRATION_BATCHES, BATCH, EVAL_BATCH = 8, 16, 50
IMAGE, PATCH, SEQ, VOCAB = 32, 4, 32, 1000


@dataclass
class Case:
    name: str
    torch_model: Any
    example: tuple[Any, ...]
    calibration: list[Any]  # numpy batches: an array, or a tuple for BERT
    inputs: list[Any]


class _Logits:
    """A transformers classifier as a module of positional inputs returning its logits."""

    def __new__(cls, model: Any, names: Sequence[str]) -> Any:
        import torch

        class Logits(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, *xs: Any) -> Any:
                return self.model(**dict(zip(names, xs))).logits

        return Logits().eval()


def _scale_layer_norms(model: Any, channels: list[int]) -> None:
    import torch

    for m in model.modules():
        if isinstance(m, torch.nn.LayerNorm):
            m.weight[channels] = 0.01


def vit(outlier: float, n_cal: int, n_inputs: int) -> Case:
    import torch
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    config = ViTConfig(image_size=IMAGE, patch_size=PATCH, hidden_size=192, num_hidden_layers=12, num_attention_heads=3,
                       intermediate_size=768, num_labels=10)
    hf = ViTForImageClassification(config).eval()
    with torch.no_grad():
        if outlier:
            hf.vit.embeddings.position_embeddings[..., [5, 17]] += torch.tensor([outlier, -outlier])
            _scale_layer_norms(hf, [5, 17])
    rng = np.random.default_rng(0)
    cal = [rng.standard_normal((BATCH, 3, IMAGE, IMAGE)).astype(np.float32) for _ in range(n_cal)]
    xs = [rng.standard_normal((EVAL_BATCH, 3, IMAGE, IMAGE)).astype(np.float32) for _ in range(n_inputs // EVAL_BATCH)]
    return Case("vit", _Logits(hf, ["pixel_values"]), (torch.from_numpy(cal[0]),), cal, xs)


def bert(outlier: float, n_cal: int, n_inputs: int) -> Case:
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    config = BertConfig(vocab_size=VOCAB, hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512,
                        num_labels=4, max_position_embeddings=SEQ)
    hf = BertForSequenceClassification(config).eval()
    with torch.no_grad():
        if outlier:
            hf.bert.encoder.layer[0].output.dense.bias[[5, 17]] = torch.tensor([outlier, -outlier])
            _scale_layer_norms(hf, [5, 17])
    rng = np.random.default_rng(0)

    # Token ids only (full-length sequences, no padding): torchao's XNNPACKQuantizer quantizes the
    # integer arithmetic of transformers' attention-mask construction and its PT2E model then fails.
    cal = [rng.integers(3, VOCAB, (BATCH, SEQ)).astype(np.int64) for _ in range(n_cal)]
    xs = [rng.integers(3, VOCAB, (EVAL_BATCH, SEQ)).astype(np.int64) for _ in range(n_inputs // EVAL_BATCH)]
    return Case("bert", _Logits(hf, ["input_ids"]), (torch.from_numpy(cal[0]),), cal, xs)


def _args(x: Any) -> tuple[Any, ...]:
    return x if isinstance(x, tuple) else (x,)


def _torch_logits(module: Any, inputs: list[Any]) -> np.ndarray:
    import torch

    with torch.no_grad():
        return np.concatenate([module(*(torch.from_numpy(a) for a in _args(x))).numpy() for x in inputs])


def _pt2e(case: Case, quantizer: Any) -> Any:
    import torch
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    batch = torch.export.Dim("batch")
    shapes = tuple({0: batch} for _ in case.example)  # calibration and evaluation batches differ
    exported = torch.export.export(case.torch_model, case.example, dynamic_shapes=(shapes,)).module()
    prepared = prepare_pt2e(exported, quantizer)
    with torch.no_grad():
        for x in case.calibration:
            prepared(*(torch.from_numpy(a) for a in _args(x)))
    return convert_pt2e(prepared)


def _quantizers() -> dict[str, Any]:
    from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import (
        X86InductorQuantizer,
        get_default_x86_inductor_quantization_config,
    )
    from torchao.testing.pt2e._xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config

    return {"pt2e xnnpack": XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True)),
            "pt2e x86": X86InductorQuantizer().set_global(get_default_x86_inductor_quantization_config())}


def _nx_logits(compiled: Any, inputs: list[Any]) -> np.ndarray:
    return np.concatenate([np.asarray(compiled(*_args(x))) for x in inputs])


def _runtime_option() -> dict[str, str]:
    """runtime="openvino" where its plugin offers it (the int8 runtime that takes mixed plans, and
    the fastest here: measuring every runtime per compile would take longer than the models);
    else the core's choice."""
    from neurenix_core.graph.compile.options import host_runtime_names
    from neurenix_core.plugins.state import registry

    return {"runtime": "openvino"} if "openvino" in host_runtime_names(registry()) else {}


def _runtime(summary: str) -> str:
    """The cpu:0 runtime a summary names, with why ("runtime openvino (fastest, ...)")."""
    found = re.search(r"runtime (\w+) \(([^;)]*)", summary)
    return f"runtime {found.group(1)} ({found.group(2)[:60]})" if found else summary[:80]


def _agreement(logits: np.ndarray, want: np.ndarray) -> float:
    return float(np.mean(np.argmax(logits, -1) == np.argmax(want, -1)))


def _plans(graph: Any, plan: Any, case: Case, targets: Sequence[float], trigger: float) -> list[tuple[str, Any, float, str]]:
    """(contender, mixed plan, its error, note) for each target, with and without float outputs."""
    from neurenix_core.graph.quantization import mixed as M

    found = []
    for target in targets:
        for float_outputs in (True, False):
            m = M.mix(graph, plan, case.calibration, device="cpu:0", target=target, trigger=trigger,
                      float_outputs=float_outputs, progress=False)
            if m is None:
                continue
            linears = sum(1 for f in m.float_layers for v in f.values if v in _layer_outputs(graph))
            name = f"nx mixed t={target:g}" + ("" if float_outputs else " int8-out")
            found.append((name, m.plan, m.error, f"{m.kept} of {m.layers} layers float ({linears} linear outputs), {m.runs} runs"))
    return found


def _layer_outputs(graph: Any) -> frozenset[str]:
    return frozenset(n.output for n in graph.nodes if n.op in ("linear", "conv2d"))


def _record(device: str) -> Any:
    from neurenix_core.plugins.state import registry
    from neurenix_core.tensor.placement import default_backend

    return registry().plugin_for(default_backend(device)[1])


def _default_mix(graph: Any, plan: Any, case: Case, device: str, host: bool) -> list[tuple[str, Any, float, str]]:
    """The plan nx.compile compiles for ``device`` (``mixed.mix_for_device``: a device whose
    float layers run on the host mixes only plans the verification would refuse)."""
    import neurenix_core as nx
    from neurenix_core.graph.quantization import mixed as M

    try:
        m = M.mix_for_device(graph, plan, case.calibration, device=device, host=host, progress=False)
    except nx.CompilationError as exc:
        print(f"  {case.name} {device}: the default mix refused: {str(exc)[:200]}", flush=True)
        return []
    if m is None:
        return [("nx int8 mixed", plan, M.plan_error(graph, plan, case.calibration), "the default: every layer int8")]
    return [("nx int8 mixed", m.plan, m.error, f"the default mix: {m.kept} of {m.layers} layers float, {m.runs} runs")]


def _compile(model: Any, device: str, case: Case, **kw: Any) -> Any:
    import neurenix_core as nx

    run = _runtime_option() if device == "cpu" else {}
    with nx.fallback_policy("allow"):  # a device that refuses a float layer places it on cpu:0 (the rows say how much)
        return nx.compile(model, device=device, calibration=case.calibration, progress=False, outputs="host", **run, **kw)


def measure(case: Case, variant: str, targets: Sequence[float], trigger: float, devices: Sequence[str]) -> list[dict[str, Any]]:
    import neurenix_core as nx
    from neurenix_core.graph.quantization import mixed as M
    from neurenix_core.graph.quantization.verify import PLAN_TOLERANCE

    want = _torch_logits(case.torch_model, case.inputs)
    model = nx.nn.from_torch(case.torch_model, case.example)
    rows: list[dict[str, Any]] = []

    def row(name: str, device: str, logits: np.ndarray, error: float | None, note: str, seconds: float | None = None) -> None:
        rows.append({"model": case.name, "variant": variant, "device": device, "contender": name, "top1": _agreement(logits, want),
                     "error": error, "note": note, "seconds": seconds})
        err = "" if error is None else f"{error:7.1%}"
        print(f"  {case.name:5s} {variant:9s} {device:8s} {name:24s} top-1 {rows[-1]['top1']:.3f}  error {err:>7s}  {note}", flush=True)

    full = _compile(model, "cpu", case, quantize="int8", mixed_precision=False, verify=False)
    graph, plan = full.graph, full.plan
    error = M.plan_error(graph, plan, case.calibration)
    row("nx int8 all", "cpu", _nx_logits(full, case.inputs), error, "refused by nx.compile" if error > PLAN_TOLERANCE else "")
    start = time.perf_counter()
    try:
        mixed = _compile(model, "cpu", case, quantize="int8")
    except nx.CompilationError as exc:
        print(f"  {case.name} {variant}: nx int8 mixed refused: {exc}")
        mixed = None
    else:
        seconds = time.perf_counter() - start
        kept = f"{len(mixed.float_layers)} float groups" if mixed.float_layers else "every layer int8"
        row("nx int8 mixed", "cpu", _nx_logits(mixed, case.inputs), mixed.verification.plan_relative,
            f"{kept}; {_runtime(mixed.summary)}", seconds)
    plans = _plans(graph, plan, case, targets, trigger)
    defaults: dict[bool, list[tuple[str, Any, float, str]]] = {}
    if mixed is not None:  # cpu:0 computes float layers in place: its mix is every such device's (mixed.mix_for_device)
        note = f"the default mix: {len(mixed.float_layers)} float groups" if mixed.float_layers else "the default: every layer int8"
        defaults[False] = [("nx int8 mixed", mixed.plan, mixed.verification.plan_relative, note)]
    for device in devices:
        host = M.float_layers_on_host(_record(device))
        if host not in defaults:
            defaults[host] = _default_mix(graph, plan, case, device, host)
        for name, p, err, note in (defaults[host] if device != "cpu" else []) + plans:
            try:
                compiled = _compile(graph, device, case, quantize=p)
            except nx.NeurenixError as exc:
                print(f"  {case.name} {variant} {device} {name}: refused: {str(exc)[:300]}", flush=True)
                continue
            v = compiled.verification
            row(name, device, _nx_logits(compiled, case.inputs), err,
                f"{note}; device vs reference {v.device_relative:.2%} (bound {v.device_bound:.2%}); {_placement(compiled)}")
    for name, quantizer in _quantizers().items():
        row(name, "torch", _torch_logits(_pt2e(case, quantizer), case.inputs), None, "run by torch")
    return rows


def _placement(compiled: Any) -> str:
    """The share of the model's FLOPs on its device (the rest: float layers a device refused, on cpu:0)."""
    placement = getattr(compiled, "placement", None)
    flops = getattr(placement, "flops", None) or {}
    total = sum(flops.values())
    if not total or str(compiled.device) == "cpu:0":
        return "all on its device"
    return f"{flops.get(str(compiled.device), 0) / total:.0%} of FLOPs on {compiled.device}, {len(placement.off_device)} nodes on cpu:0"


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=["vit", "bert"], choices=["vit", "bert"])
    p.add_argument("--variants", nargs="+", default=["plain", "outliers"], choices=["plain", "outliers"])
    p.add_argument("--inputs", type=int, default=500)
    p.add_argument("--targets", nargs="*", type=float, default=None, help="default 0.1 0.05 (--quick: 0.05); none: the default mix only")
    p.add_argument("--trigger", type=float, default=None, help="mix plans over this error (default: mixed.MIXED_TRIGGER)")
    p.add_argument("--devices", nargs="+", default=["cpu"], choices=["cpu", "npu", "edgetpu", "tpu", "cuda"])
    p.add_argument("--vit-outlier", type=float, default=30.0)
    p.add_argument("--bert-outlier", type=float, default=100.0)
    p.add_argument("--quick", action="store_true", help="4 calibration batches, 100 inputs, target 0.05 only (unless --targets)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    n_cal, n_inputs, targets = (4, 100, [0.05]) if args.quick else (CALIBRATION_BATCHES, args.inputs, [0.1, 0.05])
    targets = targets if args.targets is None else args.targets
    if args.trigger is None:
        from neurenix_core.graph.quantization.mixed import MIXED_TRIGGER

        args.trigger = MIXED_TRIGGER
    builders = {"vit": (vit, args.vit_outlier), "bert": (bert, args.bert_outlier)}
    rows = []
    for name in args.models:
        build, outlier = builders[name]
        for variant in args.variants:
            case = build(outlier if variant == "outliers" else 0.0, n_cal, n_inputs)
            rows += measure(case, variant, targets, args.trigger, args.devices)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
