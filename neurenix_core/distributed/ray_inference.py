"""Batch inference over a Ray cluster: one compiled neurenix model per Ray actor, each on the best
device of the node it lands on, over a Ray Data dataset (``Dataset.map_batches``).

    import ray
    from neurenix_core.distributed.ray_inference import predict, placements
    ray.init()                                         # or ray.init(address="auto") on a cluster
    out = predict(ray.data.from_numpy(x), make_model, concurrency=4)
    rows = out.take_all()           # per row: "prediction", the other columns, "nx_node", "nx_actor", "nx_device"
    print(placements(rows))

``make_model`` is a picklable callable (a module-level function, a ``functools.partial``) that
returns an ``nn.Module`` with its weights (e.g. loaded from a ``.npz`` the nodes can read): Ray
ships the callable, not the model. Ray (``pip install 'neurenix-core[ray]'``) is imported only here.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from neurenix_core.errors import DistributedError

__all__ = ["ModelActor", "placements", "predict"]

PLACEMENT_COLUMNS = ("nx_node", "nx_actor", "nx_device")


class ModelActor:
    """A Ray Data actor: builds the model once, compiles it for its node's device, predicts batches."""

    def __init__(self, make_model: Callable[[], Any], device: str | None, column: str, output: str, compile_options: Mapping[str, Any]) -> None:
        import ray

        from neurenix_core.device import Device
        from neurenix_core.graph.compile.compiler import compile as nx_compile
        from neurenix_core.plugins.state import default_device

        dev = Device(device) if device is not None else default_device()  # this node's best device
        self.compiled = nx_compile(make_model(), device=dev, outputs="host", progress=False, **compile_options)
        self.column, self.output = column, output
        ctx = ray.get_runtime_context()
        self.where = {"nx_node": f"{socket.gethostname()} ({ctx.get_node_id()[:8]})", "nx_actor": f"pid {os.getpid()}",
                      "nx_device": f"{dev}{' (emulated)' if dev.emulated else ''}"}

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        if self.column not in batch:
            raise DistributedError(f"ray_inference.predict: the dataset has no column {self.column!r} (it has {sorted(batch)}); pass column=")
        inputs = np.ascontiguousarray(batch[self.column])
        result = np.asarray(self.compiled(inputs))
        n = len(inputs)
        # Other columns (ids, labels) pass through, so rows can be matched after Ray reorders blocks.
        kept = {k: v for k, v in batch.items() if k != self.column}
        return {**kept, self.output: result, **{k: np.array([v] * n) for k, v in self.where.items()}}


def predict(dataset: Any, make_model: Callable[[], Any], *, device: str | None = None, column: str = "data",
            output: str = "prediction", batch_size: int = 64, concurrency: int = 1, num_cpus: float = 1,
            compile_options: Mapping[str, Any] | None = None) -> Any:
    """``dataset.map_batches`` through ``concurrency`` ModelActors; a lazy Ray Dataset whose rows
    carry the prediction, the dataset's other columns, and where it was computed (PLACEMENT_COLUMNS).

    ``device``: None picks each node's best device (``nx.default_device()`` on that node);
    a name ("npu:0") asks for it on every node, and a node without it fails with its error.
    """
    if concurrency < 1 or batch_size < 1:
        raise DistributedError(f"ray_inference.predict: concurrency ({concurrency}) and batch_size ({batch_size}) must be >= 1")
    return dataset.map_batches(ModelActor, fn_constructor_args=(make_model, device, column, output, dict(compile_options or {})),
                               batch_size=batch_size, batch_format="numpy", concurrency=concurrency, num_cpus=num_cpus)


def placements(rows: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str, str], int]:
    """Rows per (node, actor, device): where the cluster ran the model."""
    counts: dict[tuple[str, str, str], int] = {}
    for row in rows:
        key = (str(row["nx_node"]), str(row["nx_actor"]), str(row["nx_device"]))
        counts[key] = counts.get(key, 0) + 1
    return counts
