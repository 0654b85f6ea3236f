"""Tensor Core plugin (PyTorch): the Ampere guide's configurations through
``TensorCoresBackend.optimize_model`` against raw PyTorch doing the same by hand, in the same
run, batch 1 and 32, 1 and 2 threads; and a bf16 matmul through ``nx.matmul`` vs ``torch.matmul``.

neurenix is called the way a user calls it: the optimised model on a cuda Tensor (float32,
NCHW), returning a cuda Tensor; the model casts and reorders the input itself. The native side
is what a PyTorch user writes for the same configuration: the same torch module (zero-padded by
``align_model`` for the "TC optimized" rows, as neurenix pads it), ``.to(dtype)``,
``channels_last`` where asked, and per call ``x.to(dtype)`` (+ ``contiguous(channels_last)``).
Each side's configuration is read back from PyTorch (device, parameter dtype and count, weight
memory format, autocast, intra-op threads, the TF32/cuDNN switches) and a row whose two sides
differ is refused (``neurenix_core.benchkit``). Without a GPU it runs emulated on PyTorch's
CPU (NEURENIX_EMULATE=cuda); fp16 convolutions on the CPU are very slow, so ``--quick`` skips
the fp16 rows there. On a GPU every call ends with ``torch.cuda.synchronize()``.

    NEURENIX_EMULATE=cuda python benchmarks/tensor_cores.py --quick           # CPU emulation, seconds
    python benchmarks/tensor_cores.py [--threads 1 2] [--batches 1 32] [--models ...] [--json out.json]
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

os.environ.setdefault("NEURENIX_EMULATE", "cuda")

import neurenix_core as nx
from neurenix_core import benchkit

#: model name -> (precision, Tensor Core recipe: align + channels_last).
CONFIGS: dict[str, tuple[str, bool]] = {
    "baseline-fp32": ("fp32", False),
    "naive-fp16": ("fp16", False),
    "tc-fp16": ("fp16", True),
    "tc-bf16": ("bf16", True),
}
# A literal: ``neurenix bench`` reads it without importing this file.
MODELS = ("baseline-fp32", "naive-fp16", "tc-fp16", "tc-bf16", "matmul-bf16")


def _sync(device: Any) -> Callable[[], None]:
    import torch

    return torch.cuda.synchronize if device.type == "cuda" else (lambda: None)


def torch_config(module: Any, *, autocast: bool) -> dict[str, Any]:
    """One side's effective configuration, read back from the module and PyTorch."""
    import torch

    params = list(module.parameters())
    convs = [p for p in params if p.dim() == 4]
    return {
        "torch": torch.__version__, "device": str(params[0].device), "param_dtype": str(params[0].dtype),
        "parameters": sum(p.numel() for p in params),
        "weights_channels_last": all(p.is_contiguous(memory_format=torch.channels_last) for p in convs) if convs else False,
        "autocast_fp16": autocast, "intra_op_threads": torch.get_num_threads(),
        "matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32, "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "cudnn.benchmark": torch.backends.cudnn.benchmark,
    }


def native_model(precision: str, optimized: bool, device: Any, state: dict[str, Any]) -> tuple[Any, Any]:
    """The same configuration by hand in raw PyTorch (the guide's recipe)."""
    import torch
    from neurenix_cuda_tc.alignment import align_model
    from neurenix_cuda_tc.models import unoptimized_cnn

    model = unoptimized_cnn()
    model.load_state_dict(state)
    if optimized:  # the same zero-padded architecture neurenix runs (outputs unchanged)
        model, _ = align_model(model, precision=precision)
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision, torch.float32)
    model = model.to(device=device, dtype=dtype).eval()
    if optimized:
        model = model.to(memory_format=torch.channels_last)
    return model, dtype


def bench_config(tc: Any, name: str, batch: int, threads: int, size: int, rounds: int) -> dict[str, Any]:
    import numpy as np
    import torch
    from neurenix_cuda_tc.models import unoptimized_cnn

    precision, optimized = CONFIGS[name]
    torch.manual_seed(0)
    base = unoptimized_cnn().eval()
    state = base.state_dict()
    device = tc.backend._native_device(tc.device.index)
    sync = _sync(device)
    host = np.random.default_rng(0).standard_normal((batch, 3, size, size)).astype(np.float32)
    xt = nx.asarray(host, device=str(tc.device))
    ours = tc.optimize_model(base, precision=precision, align=optimized, channels_last=optimized)
    native, dtype = native_model(precision, optimized, device, state)
    x = xt.native
    layout = torch.channels_last if optimized else torch.contiguous_format

    def run_native() -> Any:
        return native(x.to(dtype).contiguous(memory_format=layout))

    def run_ours() -> Any:
        return ours(xt)

    with torch.inference_mode():
        tol = 1e-4 if precision == "fp32" else 3e-2
        np.testing.assert_allclose(ours(xt).numpy().astype(np.float32), run_native().float().cpu().numpy(), rtol=tol, atol=tol)
        t = benchkit.interleaved({"neurenix": lambda: (run_ours(), sync()), "native": lambda: (run_native(), sync())}, rounds=rounds)
        peak = _peak(device, run_ours)
    autocast = ours.precision == "mixed"
    row = benchkit.row("tensor_cores", name, precision, batch, threads, t["neurenix"], t["native"],
                       torch_config(ours.inner, autocast=autocast), torch_config(native, autocast=False),
                       fps=batch / t["neurenix"], peak_memory_mib=None if peak is None else peak / 2**20)
    tc.release()
    tc.initialize()
    return row


def _peak(device: Any, fn: Callable[[], Any]) -> int | None:
    import torch

    if device.type != "cuda":
        return None  # PyTorch's CPU allocator keeps no peak statistics
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return int(torch.cuda.max_memory_allocated())


def bench_matmul(tc: Any, n: int, threads: int, rounds: int) -> dict[str, Any]:
    """bf16 n^3 matmul through ``nx.matmul`` vs ``torch.matmul`` on the same tensors."""
    import numpy as np
    import torch

    host = np.random.default_rng(0).standard_normal((n, n), np.float32)
    a = nx.astype(nx.asarray(host, device=str(tc.device)), nx.bfloat16)
    an = a.native
    sync = _sync(an.device)
    t = benchkit.interleaved({"neurenix": lambda: (nx.matmul(a, a), sync()), "native": lambda: (torch.matmul(an, an), sync())}, rounds=rounds)
    config = {"torch": torch.__version__, "device": str(an.device), "dtype": str(an.dtype), "intra_op_threads": torch.get_num_threads(),
              "matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32}
    return benchkit.row("tensor_cores", f"matmul-bf16 {n}^3", "bf16", 1, threads, t["neurenix"], t["native"], config, config,
                        fps=None, peak_memory_mib=None, neurenix_tflops=2 * n**3 / t["neurenix"] / 1e12)


def main(argv: list[str] | None = None) -> int:
    import torch
    from neurenix_cuda_tc.api import TensorCoresBackend

    args = benchkit.parser(__doc__, models=MODELS).parse_args(argv)
    tc = TensorCoresBackend()
    tc.initialize()
    gpu = not tc.emulated
    size = 64 if gpu else (16 if args.quick else 32)
    rounds = 3 if args.quick else 40
    n = 8192 if gpu and not args.quick else (256 if args.quick else 1024)
    rows: list[dict[str, Any]] = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        for name in args.models:
            if name == "matmul-bf16":
                rows.append(bench_matmul(tc, n, threads, rounds))
                continue
            if not gpu and args.quick and CONFIGS[name][0] == "fp16":
                continue  # PyTorch's CPU fp16 convolutions take seconds
            rows += [bench_config(tc, name, batch, threads, size, rounds) for batch in args.batches]
    device = f"{tc.device} ({'emulated on the CPU through PyTorch' if tc.emulated else torch.cuda.get_device_name()}), {size}x{size} images"
    tc.release()
    benchkit.report("tensor_cores", rows, args, [("fps", "frames/s (neurenix)", ".0f"), ("peak_memory_mib", "peak MiB", ".1f")], device=device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
