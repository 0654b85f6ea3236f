"""What an engine does for nx.distributed, and the one that is running in this process.

Two engines implement it: torch.distributed (torch_engine.py: gloo on the CPU and on emulated
cuda, nccl on a real GPU) and jax.distributed (jax_engine.py: tpu, CPU collectives when emulated).
A single-process run (no launcher) gets ``LocalEngine``: rank 0 of 1, every collective the identity,
so the same script runs with and without torchrun.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from neurenix_core.device import Device
from neurenix_core.distributed.launch import LaunchEnv
from neurenix_core.errors import DistributedError
from neurenix_core.tensor.tensor import Tensor

__all__ = ["REDUCE_OPS", "Engine", "LocalEngine", "current", "install", "uninstall"]

REDUCE_OPS = ("sum", "mean", "max", "min")


class Engine:
    """Base of the engines: rank, world and device; collectives on neurenix Tensors."""

    name = "base"

    def __init__(self, launch: LaunchEnv, device: Device) -> None:
        self.launch, self.device = launch, device
        self.rank, self.world_size, self.local_rank = launch.rank, launch.world_size, launch.local_rank

    def barrier(self) -> None:
        raise NotImplementedError("need barrier")

    def all_reduce(self, x: Tensor, op: str) -> Tensor:
        raise NotImplementedError("need all_reduce")

    def all_gather(self, x: Tensor) -> Tensor:
        raise NotImplementedError("need all_gather")

    def broadcast(self, x: Tensor, src: int) -> Tensor:
        raise NotImplementedError("need broadcast")

    def average_gradients(self, params: Sequence[Tensor]) -> None:
        raise NotImplementedError("need average_gradients")

    def broadcast_parameters(self, model: Any, src: int = 0) -> None:
        """Overwrite every parameter and buffer with rank ``src``'s values (in place: the same
        Tensor objects, so an optimizer holding them still works; same shape and dtype, so the
        memory accounting is unchanged, as ``tensor.tensor.replace_data``)."""
        for t in [*model.parameters(), *model.buffers()]:
            t._data = self.broadcast(t, src)._data

    def lower_step(self, lower: Callable[[Any], Any], optimizer: Any) -> Any:
        """The data-parallel step: ``lower(optimizer)`` builds the device's one-process step."""
        raise NotImplementedError("need lower_step")

    def shutdown(self) -> None:
        """Leave the job; collectives afterwards raise."""


class LocalEngine(Engine):
    """One process: the collectives of a world of one."""

    name = "local"

    def barrier(self) -> None:
        return None

    def all_reduce(self, x: Tensor, op: str) -> Tensor:
        return x

    def all_gather(self, x: Tensor) -> Tensor:
        from neurenix_core.tensor.creation import asarray

        return asarray(x.numpy()[None], device=x.device)

    def broadcast(self, x: Tensor, src: int) -> Tensor:
        return x

    def average_gradients(self, params: Sequence[Tensor]) -> None:
        return None

    def broadcast_parameters(self, model: Any, src: int = 0) -> None:
        return None

    def lower_step(self, lower: Callable[[Any], Any], optimizer: Any) -> Any:
        return lower(optimizer)


_current: list[Engine] = []


def current(what: str) -> Engine:
    """The running engine; DistributedError naming ``what`` and the remedy before init()."""
    if not _current:
        raise DistributedError(f"nx.distributed.{what}: call nx.distributed.init() first (it reads the launcher's environment)")
    return _current[0]


def install(engine: Engine) -> None:
    if _current:
        raise DistributedError(
            f"nx.distributed.init: already initialised (engine {_current[0].name}, rank {_current[0].rank}); "
            "call nx.distributed.shutdown() before initialising again"
        )
    _current.append(engine)


def uninstall() -> Engine | None:
    return _current.pop() if _current else None
