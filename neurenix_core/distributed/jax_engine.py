"""jax.distributed for tpu: one JAX process per host (per rank when emulated), every device of
the job in one global view, XLA's own collectives (gloo across processes on JAX's CPU platform).

Data-parallel training runs the tpu plugin's own jitted step over a one-axis mesh ("dp") with one
device per process: parameters and optimizer state enter as replicated global arrays, each rank's
batch as its shard of one global batch, so the loss is the global batch's and XLA inserts the
gradient all-reduce inside the program. Results come back as this process's replica.
"""

from __future__ import annotations

import hashlib
import os
import socket
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar, cast

import numpy as np

from neurenix_core.device import Device
from neurenix_core.distributed.engine import Engine
from neurenix_core.distributed.launch import LaunchEnv
from neurenix_core.errors import DistributedError, RankFailedError
from neurenix_core.tensor.tensor import Tensor

__all__ = ["JaxEngine"]

T = TypeVar("T")
_REDUCE: dict[str, Callable[..., Any]] = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}


class JaxEngine(Engine):
    def __init__(self, launch: LaunchEnv, device: Device, timeout_s: float) -> None:
        super().__init__(launch, device)
        self.name = "jax.distributed"
        self.platform = "cpu" if device.emulated else "tpu"
        if device.emulated and "JAX_PLATFORMS" not in os.environ:
            os.environ["JAX_PLATFORMS"] = "cpu"  # as the tpu plugin does: an emulated run must not claim a real TPU
        import jax

        self.jax = jax
        _refuse_started(jax)
        if device.emulated:
            jax.config.update("jax_cpu_collectives_implementation", "gloo")  # CPU collectives across processes
        self.rendezvous = _rendezvous(launch, timeout_s)
        self._initialize(timeout_s)
        if launch.source == "tpu-pod":  # only now known, from the pod's metadata
            self.rank, self.world_size = jax.process_index(), jax.process_count()
        self._checked: set[str] = set()
        self._globals: dict[int, tuple[Any, Any]] = {}  # id(local replica) -> (it, its global array)
        self._mesh()

    # ------------------------------------------------------------------ start
    def _initialize(self, timeout_s: float) -> None:
        launch, jax = self.launch, self.jax
        # jax's own failure detection (it aborts the process) stays behind ours (~2 s, RankFailedError),
        # and leaving the job after a peer died waits no longer than the timeout either.
        seconds = max(1, int(timeout_s))
        kwargs: dict[str, Any] = {"initialization_timeout": seconds, "heartbeat_timeout_seconds": max(10, seconds),
                                  "shutdown_timeout_seconds": min(seconds, 30)}
        if launch.source != "tpu-pod":
            kwargs.update(coordinator_address=self._coordinator(), num_processes=launch.world_size, process_id=launch.rank)
        try:
            jax.distributed.initialize(**kwargs)
        except Exception as exc:  # XlaRuntimeError / ValueError from the coordination service
            remedy = ("no Cloud TPU pod metadata was found: launch with torchrun, or set RANK, WORLD_SIZE, MASTER_ADDR and "
                      "MASTER_PORT" if launch.source == "tpu-pod" else
                      "check that every rank was started with the same WORLD_SIZE and can reach rank 0")
            raise DistributedError(
                f"nx.distributed.init (rank {launch.rank}, {launch.source}): jax.distributed.initialize failed ({exc}); {remedy}"
            ) from exc

    def _coordinator(self) -> str:
        """rank 0 picks a free port for JAX's coordinator and publishes it (MASTER_PORT is the store's)."""
        launch, rdv = self.launch, self.rendezvous
        if rdv is None:
            return f"{launch.master_addr}:{launch.master_port}"
        if launch.rank == 0:
            with socket.socket() as s:
                s.bind(("", 0))
                port = s.getsockname()[1]
            rdv.store.set("jax/coordinator", f"{launch.master_addr}:{port}")
        return str(rdv.store.get("jax/coordinator").decode())

    def _mesh(self) -> None:
        from jax.sharding import Mesh, NamedSharding, PartitionSpec

        jax, index = self.jax, self.device.index
        local = jax.local_devices(backend=self.platform)
        if index >= len(local):
            raise DistributedError(f"nx.distributed: {self.device} does not exist on rank {self.rank} ({len(local)} local devices)")
        self.local_device = local[index]
        every = jax.devices(self.platform)
        per_process = [sorted((d for d in every if d.process_index == p), key=lambda d: d.id) for p in range(jax.process_count())]
        # One device per process, the same tpu:i on each (checked once by the first collective below).
        self.mesh = Mesh(np.array([devs[index] for devs in per_process]), ("dp",))
        self.replicated = NamedSharding(self.mesh, PartitionSpec())
        self.sharded = NamedSharding(self.mesh, PartitionSpec("dp"))
        self._agree(f"device index {index}")

    # ------------------------------------------------------------------ errors
    @contextmanager
    def _guard(self, what: str) -> Iterator[None]:
        try:
            yield
        except DistributedError:
            raise
        except Exception as exc:  # JaxRuntimeError from a collective whose peer is gone
            if self.rendezvous is not None:
                raise self.rendezvous.diagnose(what, exc) from exc
            raise RankFailedError(f"nx.distributed.{what} on rank {self.rank} of {self.world_size} failed: {exc}") from exc

    def _run(self, what: str, fn: Callable[[], T]) -> T:
        """``fn()`` (a collective, a step) as a call that ends with RankFailedError when a peer
        dies: XLA's CPU collectives otherwise wait for jax's own heartbeat timeout, then abort."""
        with self._guard(what):
            if self.rendezvous is None:
                return fn()
            return cast(T, self.rendezvous.run_watched(what, fn))

    def _agree(self, what: str) -> None:
        """Every rank must pass the same ``what`` (batch shapes, device index): checked by digest."""
        if what in self._checked:
            return
        from jax.experimental import multihost_utils

        digest = np.frombuffer(hashlib.sha256(what.encode()).digest()[:8], dtype=np.int64)
        seen = np.asarray(self._run("check", lambda: multihost_utils.process_allgather(digest))).reshape(-1)
        differ = [r for r, d in enumerate(seen) if d != seen[0]]
        if differ:
            raise DistributedError(
                f"nx.distributed (rank {self.rank}): rank(s) {differ} differ from rank 0 in {what.split(' ')[0]} (here: {what}); "
                "every rank must use the same device index and pass batch shards of the same shape"
            )
        self._checked.add(what)

    # ------------------------------------------------------------------ collectives
    def _gather(self, x: Tensor, what: str) -> np.ndarray:
        from jax.experimental import multihost_utils

        host = x.numpy()
        return np.asarray(self._run(what, lambda: multihost_utils.process_allgather(host, tiled=False)))

    def _on_device(self, host: np.ndarray, like: Tensor) -> Tensor:
        from neurenix_core.tensor.creation import asarray

        return asarray(host.astype(like.dtype, copy=False), device=like.device)

    def barrier(self) -> None:
        from jax.experimental import multihost_utils

        self._run("barrier", lambda: multihost_utils.sync_global_devices("neurenix barrier"))

    def all_reduce(self, x: Tensor, op: str) -> Tensor:
        g = self._gather(x, "all_reduce")
        return self._on_device(np.asarray(_REDUCE[op](g, axis=0)), x)

    def all_gather(self, x: Tensor) -> Tensor:
        return self._on_device(self._gather(x, "all_gather"), x)

    def broadcast(self, x: Tensor, src: int) -> Tensor:
        from jax.experimental import multihost_utils

        host = x.numpy()
        out = self._run("broadcast", lambda: multihost_utils.broadcast_one_to_all(host, is_source=self.rank == src))
        return self._on_device(np.asarray(out), x)

    def average_gradients(self, params: Sequence[Tensor]) -> None:
        from jax.experimental import multihost_utils

        owners = [p for p in params if p.grad is not None]
        grads = tuple(p.grad.numpy() for p in owners)  # type: ignore[union-attr]
        stacked = self._run("average_gradients", lambda: multihost_utils.process_allgather(grads, tiled=False))
        for p, g in zip(owners, stacked):
            p.grad = self._on_device(np.asarray(g).mean(axis=0), p.grad)  # type: ignore[arg-type]

    # ------------------------------------------------------------------ the data-parallel step
    def global_jit(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``jax.jit(fn)`` over the job: the last argument (the batch) is sharded over the ranks,
        the others replicated; results come back as this process's replica."""
        jax = self.jax
        jitted = jax.jit(fn, out_shardings=self.replicated)

        def call(*args: Any) -> Any:
            *state, batch = args
            self._agree("batch shapes " + repr([tuple(np.shape(b)) for b in batch]))
            global_state = jax.tree.map(self._replicate, tuple(state))
            global_batch = tuple(self._shard(b) for b in batch)
            # Dispatch is asynchronous: wait for the result here, where a dead peer is noticed.
            out = self._run("compile_step", lambda: jax.block_until_ready(jitted(*global_state, global_batch)))
            local = jax.tree.map(lambda a: a.addressable_data(0), out)
            # The next step gets these replicas back (new parameters, optimizer state): remember
            # their global arrays instead of wrapping them again (~3 ms a step for an MLP's Adam state).
            self._globals = {id(x): (x, g) for x, g in zip(jax.tree.leaves(local), jax.tree.leaves(out))}
            return local

        return call

    def _replicate(self, x: Any) -> Any:
        known = self._globals.get(id(x))
        if known is not None and known[0] is x:
            return known[1]
        local = self.jax.device_put(x, self.local_device)
        return self.jax.make_array_from_single_device_arrays(local.shape, self.replicated, [local])

    def _shard(self, x: Any) -> Any:
        local = self.jax.device_put(x, self.local_device)
        if local.ndim == 0:
            raise DistributedError("data-parallel compile_step on tpu: every batch argument needs a leading batch axis")
        shape = (local.shape[0] * self.world_size, *local.shape[1:])
        return self.jax.make_array_from_single_device_arrays(shape, self.sharded, [local])

    def lower_step(self, lower: Callable[[Any], Any], optimizer: Any) -> Any:
        step = lower(optimizer)
        distribute = getattr(step, "distribute", None)
        if distribute is None:
            raise DistributedError(
                f"data-parallel compile_step on {self.device}: the step ({getattr(step, 'engine', type(step).__name__)}) cannot run "
                "under jax.distributed; use the eager tape with nx.distributed.average_gradients(model) after loss.backward()"
            )
        distribute(self.global_jit)
        return step

    def shutdown(self) -> None:
        try:
            self.jax.distributed.shutdown()
        finally:
            if self.rendezvous is not None:
                self.rendezvous.close()


def _refuse_started(jax: Any) -> None:
    from jax._src import xla_bridge

    if xla_bridge.backends_are_initialized():
        raise DistributedError(
            "nx.distributed.init on tpu: JAX has already started in this process (a tpu tensor or model exists); "
            "call nx.distributed.init() first, before creating anything on tpu"
        )


def _rendezvous(launch: LaunchEnv, timeout_s: float) -> Any:
    """torch's TCPStore where the launcher provides one (torchrun); None on a TPU pod or without torch."""
    if not launch.rendezvous:
        return None
    try:
        import torch.distributed  # noqa: F401 - the store only
    except ImportError:
        return None
    from neurenix_core.distributed.rendezvous import Rendezvous

    rdv = Rendezvous(launch, timeout_s)
    rdv.join()
    rdv.start_heartbeat()  # before jax.distributed starts: a rank dying in its setup is named too
    return rdv
