"""torch.distributed for cpu, cuda and every non-TPU device: gloo on the CPU (and on emulated
cuda, which is PyTorch on the CPU), nccl on a real GPU.

Collectives take neurenix Tensors: a Tensor whose native array is a torch tensor the process group
can use (CPU tensors under gloo, GPU tensors under nccl) is handed over as is, anything else
(NumPy on cpu:0, an npu's host copy) through a zero-copy ``torch.from_numpy`` of its host data.
Every engine failure is translated into RankFailedError naming the dead rank (rendezvous.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import numpy as np

from neurenix_core.device import Device
from neurenix_core.distributed.engine import Engine
from neurenix_core.distributed.launch import LaunchEnv
from neurenix_core.distributed.rendezvous import Rendezvous
from neurenix_core.errors import DistributedError
from neurenix_core.tensor.tensor import Tensor, adopt

__all__ = ["BUCKET_BYTES", "TorchEngine"]

BUCKET_BYTES = 25 * 2**20  # DDP's default bucket: few enough all-reduces, each large enough to saturate the link


class TorchEngine(Engine):
    def __init__(self, launch: LaunchEnv, device: Device, timeout_s: float) -> None:
        super().__init__(launch, device)
        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist
        self.backend = "nccl" if device.type == "cuda" and not device.emulated else "gloo"
        self.name = f"torch.distributed ({self.backend})"
        self.rendezvous = Rendezvous(launch, timeout_s)
        self.rendezvous.join()
        self.rendezvous.start_heartbeat()  # before the process group: a rank dying in its setup is named too
        if self.backend == "nccl":
            torch.cuda.set_device(device.index)
        try:
            dist.init_process_group(self.backend, store=dist.PrefixStore("pg/", self.rendezvous.store), rank=self.rank,
                                    world_size=self.world_size, timeout=timedelta(seconds=timeout_s))
        except Exception as exc:  # torch raises RuntimeError or DistBackendError; both are reported
            error = self.rendezvous.diagnose("init", exc)
            self.rendezvous.close()
            raise error from exc

    # ------------------------------------------------------------------ conversions
    def _on_wire(self, x: Tensor) -> Any:
        """The torch tensor that carries ``x`` (its own native array when the group takes it)."""
        native = x._data
        if isinstance(native, self.torch.Tensor) and (native.is_cuda == (self.backend == "nccl")):
            return native.contiguous()
        host = np.ascontiguousarray(x.numpy())
        if self.backend == "nccl":
            return self.torch.from_numpy(host).to(f"cuda:{self.device.index}")
        return self.torch.from_numpy(host.copy() if not host.flags.writeable else host)

    def _back(self, wire: Any, like: Tensor) -> Tensor:
        if isinstance(like._data, self.torch.Tensor):
            return adopt(wire.to(like._data.device), like._p)
        from neurenix_core.tensor.creation import asarray

        return asarray(wire.cpu().numpy(), device=like.device)

    @contextmanager
    def _guard(self, what: str) -> Iterator[None]:
        try:
            yield
        except Exception as exc:  # every engine failure becomes the typed error naming the rank
            raise self.rendezvous.diagnose(what, exc) from exc

    # ------------------------------------------------------------------ collectives
    def barrier(self) -> None:
        with self._guard("barrier"):
            self.dist.barrier()

    def all_reduce(self, x: Tensor, op: str) -> Tensor:
        wire = self._on_wire(x).clone()
        torch_op = {"sum": "SUM", "mean": "SUM", "max": "MAX", "min": "MIN"}[op]
        with self._guard("all_reduce"):
            self.dist.all_reduce(wire, op=getattr(self.dist.ReduceOp, torch_op))
        if op == "mean":
            wire = wire / self.world_size if wire.is_floating_point() else wire // self.world_size
        return self._back(wire, x)

    def all_gather(self, x: Tensor) -> Tensor:
        wire = self._on_wire(x)
        out = [self.torch.empty_like(wire) for _ in range(self.world_size)]
        with self._guard("all_gather"):
            self.dist.all_gather(out, wire)
        return self._back(self.torch.stack(out), x)

    def broadcast(self, x: Tensor, src: int) -> Tensor:
        wire = self._on_wire(x).clone()
        with self._guard("broadcast"):
            self.dist.broadcast(wire, src=src)
        return self._back(wire, x)

    # ------------------------------------------------------------------ gradients
    def average_gradients(self, params: Sequence[Tensor]) -> None:
        """Average ``.grad`` over the ranks, DDP-style: gradients flattened into ~25 MiB buckets
        per dtype, every bucket's all-reduce started before the first is waited on."""
        owners = [p for p in params if p.grad is not None]
        flights = []
        with self._guard("average_gradients"):
            for bucket in _buckets(owners):
                flat = self.torch.cat([self._on_wire(_grad(p)).reshape(-1) for p in bucket])
                flights.append((bucket, flat, self.dist.all_reduce(flat, async_op=True)))
            for bucket, flat, work in flights:
                work.wait()
                flat.div_(self.world_size)
                self._scatter(bucket, flat)

    def _scatter(self, bucket: list[Tensor], flat: Any) -> None:
        start = 0
        for p in bucket:
            n = int(np.prod(p.shape))
            p.grad = self._back(flat[start:start + n].reshape(tuple(p.shape)), _grad(p))
            start += n

    def lower_step(self, lower: Callable[[Any], Any], optimizer: Any) -> Any:
        return lower(AveragingOptimizer(optimizer, self))

    def shutdown(self) -> None:
        try:
            if self.dist.is_initialized():
                self.dist.destroy_process_group()
        finally:
            self.rendezvous.close()


def _grad(p: Tensor) -> Tensor:
    g = p.grad
    if g is None:  # average_gradients keeps only parameters with a gradient
        raise DistributedError("nx.distributed.average_gradients: a parameter lost its gradient during the all-reduce")
    return g


def _buckets(params: Sequence[Tensor]) -> list[list[Tensor]]:
    """Parameters grouped by gradient dtype, each group cut into buckets of ~BUCKET_BYTES."""
    out: dict[Any, list[tuple[int, list[Tensor]]]] = {}
    for p in params:
        g = _grad(p)
        lists = out.setdefault(g.dtype, [(0, [])])
        size, last = lists[-1]
        if last and size + g.nbytes > BUCKET_BYTES:
            lists.append((0, []))
            size, last = lists[-1]
        last.append(p)
        lists[-1] = (size + g.nbytes, last)
    return [bucket for lists in out.values() for _, bucket in lists]


class AveragingOptimizer:
    """The optimizer as a data-parallel step sees it: ``step()`` first averages the gradients
    over the ranks; everything else is the wrapped optimizer's."""

    def __init__(self, optimizer: Any, engine: Engine) -> None:
        self._optimizer, self._engine = optimizer, engine

    def step(self, closure: Any = None) -> Any:
        if closure is not None:
            raise DistributedError("data-parallel compile_step: optimizer.step(closure) is not supported across ranks")
        self._engine.average_gradients([s.tensor for s in self._optimizer.slots()])
        return self._optimizer.step()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._optimizer, name)
