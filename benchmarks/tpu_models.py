"""neurenix-tpu on imported architectures: a torch model through ``nn.from_torch`` and
``nx.compile(device="tpu:0")`` against the same computation written by hand in ``jax.jit``.

    python benchmarks/tpu_models.py [--quick] [--threads 1 2] [--batches 1 32] [--models resnet_block mobilenetv3_block] [--json out.json]

The models are the ResNet basic block and the MobileNetV3 block of ``tests/support/model_zoo.py``
(seeded random weights, 32x32 inputs). The plain-JAX side is written directly with
``lax.conv_general_dilated`` (NHWC/HWIO, as JAX users write convolutions), inference batch norm,
hardswish/hardsigmoid and the squeeze-excite product, on the same weights, in the same precision
mode as neurenix: fp32 at ``Precision.HIGHEST``, or bf16 weights and activations with float32
accumulation and float32 batch norm. Both sides' configurations (platform, device, dot and
convolution precisions and result types in the lowered StableHLO, XLA thread flags) are read
back from the XLA programs; a row whose two sides differ is refused (``neurenix_core.benchkit``).

Each thread count runs in a fresh process pinned to that many CPUs with XLA's CPU thread pool
sized to match. Without a Cloud TPU it runs emulated (JAX's CPU platform), so the ratio measures
what neurenix's lowering and call path cost around XLA. Timing: the contenders take short turns
of consecutive calls, median per call of those that follow a call of the same contender
(``benchmarks/tpu.py``'s ``_best``). Ratio = time(neurenix) / time(plain JAX);
the goal is <= 1.05 in every row.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
MODELS = ("resnet_block", "mobilenetv3_block")
IMAGE = 32


# ------------------------------------------------------------------ the hand-written JAX models
def _weights(model: Any) -> dict[str, Any]:
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}


def _plain_jax(name: str, model: Any, precision: str) -> tuple[Callable[..., Any], Any]:
    """``name`` written directly in JAX with ``model``'s weights; returns (jitted fn, device params)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax

    dt = jnp.float32 if precision == "fp32" else jnp.bfloat16
    prec = lax.Precision.HIGHEST if precision == "fp32" else lax.Precision.DEFAULT
    f32 = jnp.float32
    w = _weights(model)
    params: dict[str, Any] = {}
    for k, v in w.items():
        if k.endswith("num_batches_tracked"):
            continue
        if v.ndim == 4:  # conv kernels: OIHW -> HWIO in the compute dtype
            params[k] = np.ascontiguousarray(v.transpose(2, 3, 1, 0)).astype(dt)
        elif v.ndim == 2:  # linear weights in the compute dtype
            params[k] = v.astype(dt)
        else:
            params[k] = v.astype(np.float32)

    def conv(x: Any, k: Any, stride: int = 1, pad: int = 0, groups: int = 1, bias: Any = None) -> Any:
        y = lax.conv_general_dilated(x, k, (stride, stride), ((pad, pad), (pad, pad)), dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                     feature_group_count=groups, precision=prec, preferred_element_type=f32)
        return (y if bias is None else y + bias).astype(dt)

    def bn(x: Any, p: Any, pre: str) -> Any:
        scale = lax.rsqrt(p[pre + ".running_var"] + 1e-5) * p[pre + ".weight"]
        return (x.astype(f32) * scale + (p[pre + ".bias"] - p[pre + ".running_mean"] * scale)).astype(dt)

    def linear(x: Any, p: Any, pre: str) -> Any:
        y = lax.dot_general(x, p[pre + ".weight"], (((1,), (1,)), ((), ())), precision=prec, preferred_element_type=f32)
        return (y + p[pre + ".bias"]).astype(dt)

    def hardswish(x: Any) -> Any:
        return x * jnp.clip(x / 6.0 + 0.5, 0, 1)

    def resnet(p: Any, x: Any) -> Any:
        h = x.astype(dt).transpose(0, 2, 3, 1)
        y = jnp.maximum(bn(conv(h, p["conv1.weight"], 2, 1), p, "bn1"), 0)
        y = bn(conv(y, p["conv2.weight"], 1, 1), p, "bn2")
        y = jnp.maximum(y + bn(conv(h, p["down.0.weight"], 2, 0), p, "down.1"), 0)
        return linear(y.astype(f32).mean(axis=(1, 2)).astype(dt), p, "fc").astype(x.dtype)

    def mobilenet(p: Any, x: Any) -> Any:
        h = x.astype(dt).transpose(0, 2, 3, 1)
        h = hardswish(bn(conv(h, p["stem.0.weight"], 2, 1), p, "stem.1"))
        y = hardswish(bn(conv(h, p["expand.0.weight"]), p, "expand.1"))
        c = y.shape[-1]
        y = hardswish(bn(conv(y, p["dw.0.weight"], 1, 1, groups=c), p, "dw.1"))
        s = y.astype(f32).mean(axis=(1, 2), keepdims=True).astype(dt)
        s = jnp.maximum(conv(s, p["se_reduce.weight"], bias=p["se_reduce.bias"]), 0)
        s = jnp.clip(conv(s, p["se_expand.weight"], bias=p["se_expand.bias"]) / 6.0 + 0.5, 0, 1)
        y = bn(conv(y * s, p["project.0.weight"]), p, "project.1") + h
        return linear(y.astype(f32).mean(axis=(1, 2)).astype(dt), p, "head").astype(x.dtype)

    fn = {"resnet_block": resnet, "mobilenetv3_block": mobilenet}[name]
    return jax.jit(fn), jax.device_put(params, jax.devices()[0])


# ------------------------------------------------------------------ child: one thread setting
def child(quick: bool, threads: int, models: list[str], batches: list[int]) -> list[dict[str, Any]]:
    sys.path[:0] = [str(REPO / "tests" / "support"), str(REPO / "benchmarks")]
    import model_zoo as zoo
    import numpy as np
    import torch
    from tpu import _best, _jax_config, _native  # the TPU benchmarks' shared timing and read-back

    import neurenix_core as nx
    from neurenix_core import benchkit, nn

    budget_s = 0.05 if quick else 2.0
    rows = []
    for name in models:
        model = zoo.build(name)
        for precision in ("fp32", "bf16"):
            for batch in batches:
                shape = (batch, 3, IMAGE, IMAGE)
                host = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
                imported = nn.from_torch(model, torch.from_numpy(host))
                compiled = nx.compile(imported, device="tpu:0", precision=precision, progress=False)
                plain, params = _plain_jax(name, model, precision)
                x = nx.asarray(host, device="tpu:0")
                xn = x.native
                compiled(x)  # compiles for this shape (and places it)
                native = compiled.native(shape)
                if native is None or compiled.placement.off_device:
                    raise RuntimeError(f"{name}: nx.compile did not run the whole model in one TPU program: {compiled.placement.line()}")
                t = _best({"neurenix": lambda c=compiled, x=x: c(x), "plugin": lambda f=native, xn=xn: f(xn),
                           "jax": lambda f=plain, w=params, xn=xn: f(w, xn)}, budget_s)
                got = np.asarray(_native(compiled(x)), np.float64)
                diff = float(np.abs(got - np.asarray(plain(params, xn), np.float64)).max())
                torch_err = float(zoo.max_rel_err(got, model(torch.from_numpy(host)).detach().numpy()))
                prog = native.program
                rows.append(benchkit.row(
                    "tpu-models", name, precision, batch, threads, t["neurenix"], t["jax"],
                    _jax_config(prog.jitted, prog.leaves, xn), _jax_config(plain, params, xn),
                    path="nn.from_torch -> nx.compile", plugin_us=t["plugin"] * 1e6, plugin_overhead=t["plugin"] / t["jax"],
                    max_abs_diff=diff, rel_err_vs_torch=torch_err, emulated=bool(nx.backend("tpu:0").emulated),
                ))
    return rows


def main(argv: list[str] | None = None) -> int:
    from neurenix_core import benchkit

    parser = benchkit.parser(__doc__.split("\n\n")[0], models=MODELS)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO / "benchmarks"))
    from tpu import pin_to, run_threads  # the TPU benchmarks' shared process-per-thread-setting runner

    if args.child is not None:
        pin_to(args.child)
        print(json.dumps(child(args.quick, args.child, args.models, args.batches)))
        return 0
    rows: list[dict[str, Any]] = []
    for threads in args.threads:
        rows += run_threads(threads, args.quick, args.models, args.batches, script=__file__)
    benchkit.report("tpu-models", rows, args, [("plugin_overhead", "plugin / JAX", ".3f"), ("max_abs_diff", "max abs diff", ".1e"),
                                               ("rel_err_vs_torch", "rel err vs torch", ".1e")],
                    path=rows[0]["path"] if rows else None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
