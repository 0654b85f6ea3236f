"""``nx.distributed``: data-parallel training and collectives across processes and hosts, on
existing engines only (torch.distributed, jax.distributed; Ray for batch inference).

    import neurenix_core as nx
    device = nx.distributed.init("cpu")          # reads torchrun's / SLURM's / a TPU pod's environment
    x, y = nx.distributed.shard(global_x), nx.distributed.shard(global_y)
    step = nx.compile_step(loss_fn, model.to(device), optimizer, data_parallel=True)

Importing this package imports no engine: ``init()`` does (torch for cpu/cuda/other devices, jax
for tpu). docs/distributed.md is the guide.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from neurenix_core.device import Device, as_device
from neurenix_core.distributed.checkpoint import load_checkpoint, save_checkpoint
from neurenix_core.distributed.engine import REDUCE_OPS, LocalEngine, current, install, uninstall
from neurenix_core.distributed.launch import LaunchEnv, read_launch_env
from neurenix_core.errors import DistributedError, ShapeError
from neurenix_core.kwargs import strict_kwargs
from neurenix_core.tensor.tensor import Tensor

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "LaunchEnv",
    "all_gather",
    "all_reduce",
    "average_gradients",
    "barrier",
    "broadcast",
    "broadcast_parameters",
    "device",
    "engine",
    "init",
    "is_initialized",
    "load_checkpoint",
    "local_rank",
    "rank",
    "read_launch_env",
    "save_checkpoint",
    "shard",
    "shutdown",
    "world_size",
]

DEFAULT_TIMEOUT_S = 180.0  # a dead rank is reported by the heartbeat in ~2 s; this bounds a rank that hangs


@strict_kwargs("nx.distributed.init")
def init(device: Any = None, *, timeout: float = DEFAULT_TIMEOUT_S) -> Device:
    """Join the job described by the launch environment and start the engine for ``device``.

    ``device`` ("cpu", "cuda", "tpu", "cuda:1", a Device; default: the default device) decides the
    engine: tpu uses jax.distributed, every other device torch.distributed (nccl on a real GPU,
    gloo otherwise). A bare "cuda" is cuda:LOCAL_RANK on a real multi-GPU host. Returns the device
    this rank trains on. Without a launcher, a world of one: the same script runs unchanged.
    ``timeout`` (seconds) bounds the rendezvous and every collective.
    """
    if not timeout > 0:
        raise DistributedError(f"nx.distributed.init: timeout must be a positive number of seconds, got {timeout!r}")
    launch = read_launch_env()
    dev = _resolve_device(device, launch)
    if launch.source == "single" and dev.type == "tpu" and not dev.emulated:
        # A real Cloud TPU sets no launcher variables: its pod metadata (read by JAX) says whether
        # this host is one of several. Never a silent world of one on a pod slice.
        launch = replace(launch, source="tpu-pod", rank=-1, world_size=-1, run_id="tpu-pod")
    if launch.source == "single":
        install(LocalEngine(launch, dev))
    elif dev.type == "tpu":
        from neurenix_core.distributed.jax_engine import JaxEngine

        install(JaxEngine(launch, dev, timeout))
    else:
        from neurenix_core.distributed.torch_engine import TorchEngine

        install(TorchEngine(launch, dev, timeout))
    return dev


def _resolve_device(device: Any, launch: LaunchEnv) -> Device:
    if device is None:
        from neurenix_core.plugins.state import default_device

        return default_device()
    dev = as_device(device)
    bare = isinstance(device, str) and ":" not in device
    if bare and dev.type == "cuda" and not dev.emulated:
        return Device(dev.type, launch.local_rank)  # one GPU per process, as torchrun --nproc-per-node = GPUs
    return dev


def shutdown() -> None:
    """Leave the job (destroys the process group / jax.distributed client); init() may be called again."""
    eng = uninstall()
    if eng is not None:
        eng.shutdown()


def is_initialized() -> bool:
    try:
        current("is_initialized")
    except DistributedError:
        return False
    return True


def engine() -> str:
    """The engine's name: "torch.distributed (gloo)", "torch.distributed (nccl)", "jax.distributed" or "local"."""
    return current("engine").name


def device() -> Device:
    """The device init() chose for this rank."""
    return current("device").device


def rank() -> int:
    return current("rank").rank


def world_size() -> int:
    return current("world_size").world_size


def local_rank() -> int:
    return current("local_rank").local_rank


def barrier() -> None:
    """Wait until every rank gets here (RankFailedError if one died)."""
    current("barrier").barrier()


@strict_kwargs("nx.distributed.all_reduce")
def all_reduce(x: Tensor, op: str = "sum") -> Tensor:
    """A new Tensor on ``x``'s device: ``op`` ("sum", "mean", "max", "min") of ``x`` over the ranks."""
    if op not in REDUCE_OPS:
        raise DistributedError(f"nx.distributed.all_reduce: op {op!r} is not one of {REDUCE_OPS}")
    return current("all_reduce").all_reduce(_tensor(x, "all_reduce"), op)


@strict_kwargs("nx.distributed.all_gather")
def all_gather(x: Tensor) -> Tensor:
    """A new Tensor of shape ``(world_size, *x.shape)``: every rank's ``x``, in rank order."""
    return current("all_gather").all_gather(_tensor(x, "all_gather"))


@strict_kwargs("nx.distributed.broadcast")
def broadcast(x: Tensor, src: int = 0) -> Tensor:
    """A new Tensor holding rank ``src``'s ``x`` on every rank."""
    eng = current("broadcast")
    if not 0 <= src < eng.world_size:
        raise DistributedError(f"nx.distributed.broadcast: src={src} is not a rank of this world of {eng.world_size}")
    return eng.broadcast(_tensor(x, "broadcast"), src)


@strict_kwargs("nx.distributed.broadcast_parameters")
def broadcast_parameters(model: Any, src: int = 0) -> None:
    """Give every rank rank ``src``'s parameters and buffers (in place): call once before training
    with the eager tape; ``compile_step(..., data_parallel=True)`` does it itself."""
    current("broadcast_parameters").broadcast_parameters(model, src)


@strict_kwargs("nx.distributed.average_gradients")
def average_gradients(model_or_params: Any) -> None:
    """The eager tape's data parallelism: after ``loss.backward()``, before ``optimizer.step()``,
    replace every parameter's ``.grad`` by its mean over the ranks (bucketed all-reduce)."""
    params = list(model_or_params.parameters()) if hasattr(model_or_params, "parameters") else list(model_or_params)
    current("average_gradients").average_gradients(params)


@strict_kwargs("nx.distributed.shard")
def shard(batch: Any, axis: int = 0) -> Any:
    """This rank's contiguous share of a global batch (a Tensor or NumPy array), along ``axis``.

    The global batch's length must divide by the world size: each rank then trains on an equal
    shard and the averaged gradient is exactly the global batch's mean gradient.
    """
    eng = current("shard")
    n = batch.shape[axis]
    if n % eng.world_size:
        raise ShapeError(
            f"nx.distributed.shard: the batch has {n} samples along axis {axis}, not a multiple of the world size "
            f"{eng.world_size}; drop the remainder or pad the global batch to {n + eng.world_size - n % eng.world_size}"
        )
    size = n // eng.world_size
    index = [slice(None)] * len(batch.shape)
    index[axis] = slice(eng.rank * size, (eng.rank + 1) * size)
    return batch[tuple(index)] if not isinstance(batch, np.ndarray) else np.ascontiguousarray(batch[tuple(index)])


def _tensor(x: Any, what: str) -> Tensor:
    if type(x) is not Tensor:
        raise DistributedError(f"nx.distributed.{what}: expected a neurenix Tensor, got {type(x).__name__}; wrap it with nx.asarray(...)")
    return x

