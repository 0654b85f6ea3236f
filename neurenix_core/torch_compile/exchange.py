"""How a piece's tensors cross between PyTorch and the device it was compiled for.

**Host** (cpu:0, and every device whose backend does not declare DLPack,
``Capabilities.dlpack``): NumPy views of the torch inputs go in, the compiled model gives NumPy
arrays (``outputs="host"``) and torch tensors over them come back (piece.py's ``to_numpy`` and
``to_torch``): no copy on the CPU, one each way from and to another torch device.

**DLPack** (another device whose backend declares it): each input crosses as
``nx.from_dlpack(t, device=...)``: shared where the memory already is the device's (the cuda
plugin's arrays are torch tensors: a CUDA tensor on its GPU, a CPU tensor under emulation), a
copy onto the device otherwise. The model gives Tensors on the device (``outputs="device"``),
and a result torch can read (host memory, or CUDA memory on the inputs' GPU) comes back with
``torch.from_dlpack``, sharing the device's buffer; one torch cannot read (a real TPU's memory)
is copied through the host as on the host path.

A result that shares memory the caller does not expect to share is copied: a view of an input
where eager's output is not a view (neurenix may drop a ``clone``), and an output computed from
constants only, which a runtime may hand out from the same buffer at every call.

Everything is decided once per compile from declarations (the manifest, the backend's memory,
the graph's dtypes, the example inputs' torch devices), so a call does no trial and error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from neurenix_core.device import Device
from neurenix_core.torch_compile.freeze import Split

__all__ = ["HOST", "Exchange", "plan", "to_numpy", "to_torch"]


def to_numpy(t: Any) -> np.ndarray:
    """A torch tensor as NumPy: a view on the CPU, a copy from another device."""
    if t.requires_grad:
        t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    return t.numpy()


def to_torch(a: Any, device: Any) -> Any:
    """A result array as a torch tensor on ``device`` (over the array's memory on the CPU)."""
    import torch

    if type(a) is not np.ndarray:
        a = np.asarray(a)
    if not a.flags.writeable:  # torch tensors are writable: a read-only result is copied, not aliased
        a = a.copy()
    out = torch.from_numpy(a)
    return out if device is None or device.type == "cpu" else out.to(device)


@dataclass(frozen=True)
class Exchange:
    """One compiled piece's crossing (see the module). ``device`` is None on the host path."""

    device: Device | None = None
    #: per live input: handed over with nx.from_dlpack (else as NumPy, copied in by the model)
    dlpack_in: tuple[bool, ...] = ()
    #: the device's results are taken by torch.from_dlpack (else copied through host memory)
    torch_reads: bool = False
    #: the results torch reads are on another torch device than the inputs (host memory for a
    #: CUDA tensor's model under emulation): moved there, as eager's would be
    move: bool = False
    #: per result (after the written ones): eager's output is a view of an input, so a result
    #: sharing an input's memory may stay a view
    keep_alias: tuple[bool, ...] = ()
    #: per result: computed from constants only, so possibly the model's own buffer: copied
    copy_out: tuple[bool, ...] = ()

    @property
    def outputs(self) -> str:
        """nx.compile's ``outputs=`` for this crossing."""
        return "host" if self.device is None else "device"

    @property
    def describe(self) -> str:
        if self.device is None:
            return "tensors cross through host memory (NumPy)"
        shared = sum(self.dlpack_in)
        back = "torch.from_dlpack" if self.torch_reads else "host memory (torch cannot read the device's)"
        return f"tensors cross by DLPack: {shared} of {len(self.dlpack_in)} input(s) by nx.from_dlpack, results by {back}"

    def inputs(self, live: list[Any]) -> list[Any]:
        """The live torch tensors as the compiled model takes them."""
        from neurenix_core.tensor.tensor import from_dlpack

        # torch refuses to export a tensor that requires grad (the NoBackward path hands those)
        return [from_dlpack(t.detach() if t.requires_grad else t, device=self.device) if shared else to_numpy(t)
                for t, shared in zip(live, self.dlpack_in)]

    def written(self, value: Any, where: Any) -> Any:
        """A written input's new value as torch reads it, for ``copy_`` into that input."""
        return self._torch(value, where)

    def result(self, k: int, value: Any, where: Any) -> Any:
        """Result ``k`` (counted after the written ones) as a torch tensor on ``where``."""
        from neurenix_core.tensor.tensor import Tensor

        out = self._torch(value, where)
        if type(value) is not Tensor or not self.torch_reads or self.move:
            return out  # a fresh host copy already, or moved (a copy) to the inputs' device
        # ``_base`` is set by the compiled call on a result that is a view of an input Tensor
        if (k < len(self.copy_out) and self.copy_out[k]) or (value._base is not None and not (k < len(self.keep_alias) and self.keep_alias[k])):
            return out.clone()
        return out

    def _torch(self, value: Any, where: Any) -> Any:
        from neurenix_core.tensor.tensor import Tensor

        if type(value) is not Tensor:  # an output kept in host memory (a dtype the device lacks)
            return to_torch(value, where)
        if not self.torch_reads:
            return to_torch(value.numpy(), where)
        import torch

        out = torch.from_dlpack(value)
        return out.to(where) if self.move else out


#: cpu:0's crossing, and that of every device without DLPack
HOST = Exchange()


def plan(device: Any, graph: Any, gm: Any, parts: Split, live: tuple[Any, ...], written: int) -> Exchange:
    """The crossing for ``graph`` (imported from dynamo's ``gm``) compiled for ``device``, with
    ``live`` the example torch inputs and ``written`` the count of in-place written inputs."""
    from neurenix_core.plugins.state import registry
    from neurenix_core.tensor.placement import placement_for

    p = placement_for(device)
    dev = p.device
    manifest = registry().plugin_for(dev).manifest  # None: a plugin that declares nothing, so no DLPack
    if str(dev.type) == "cpu" or manifest is None or not manifest.capabilities.dlpack:
        return HOST
    import torch

    memory = _result_memory(p)
    where = live[0].device if live else torch.device("cpu")
    torch_reads = memory is not None and (memory.type == "cpu" or memory == where)
    results = len(graph.outputs) - written
    return Exchange(
        device=dev,
        dlpack_in=tuple(_shares_in(p, spec, t) for spec, t in zip(graph.inputs, live)),
        torch_reads=torch_reads,
        move=torch_reads and memory != where,
        keep_alias=_eager_aliases(gm, parts, results),
        copy_out=_constant_outputs(graph)[written:],
    )


def _result_memory(p: Any) -> Any:
    """The torch device whose memory holds ``p``'s arrays, or None where torch cannot read it:
    host memory for an emulated or host-memory backend, the GPU for a cuda device (neurenix's
    cuda:i is CUDA's device i), nothing else (a TPU's HBM)."""
    import torch

    if p.backend.emulated or p.array_type is np.ndarray:
        return torch.device("cpu")
    if str(p.device.type) == "cuda":
        return torch.device("cuda", p.index)
    return None


def _shares_in(p: Any, spec: Any, t: Any) -> bool:
    """Whether torch input ``t`` for graph input ``spec`` crosses by nx.from_dlpack: it has the
    dtype the graph declares and the device holds (else the model converts it, or keeps it in
    host memory, from NumPy), and the device imports its memory: host memory every DLPack
    backend does; another torch device only one whose arrays are torch tensors."""
    import torch

    from neurenix_core.tensor.dtypes import as_dtype

    dtype = as_dtype(spec.dtype)
    if as_dtype(t.dtype) != dtype or not p.backend.supports_dtype(dtype):
        return False
    return bool(t.device.type == "cpu" or p.array_type is torch.Tensor)


def _eager_aliases(gm: Any, parts: Split, count: int) -> tuple[bool, ...]:
    """Per output of dynamo's graph: whether eager's value is a view of a live input (dynamo's
    fake values share a fake storage exactly where eager's would). Unknown: False (copied)."""
    import torch
    from torch.multiprocessing.reductions import StorageWeakRef

    nodes = [n for n in gm.graph.nodes if n.op == "placeholder"]
    inputs = [nodes[i].meta.get("example_value") for i in parts.live]
    storages = {StorageWeakRef(v.untyped_storage()) for v in inputs if isinstance(v, torch.Tensor)}
    out = next(n for n in gm.graph.nodes if n.op == "output")
    values = out.args[0] if isinstance(out.args[0], (tuple, list)) else (out.args[0],)
    if len(values) != count:
        return (False,) * count
    fakes = [getattr(v, "meta", {}).get("example_value") for v in values]
    return tuple(isinstance(f, torch.Tensor) and StorageWeakRef(f.untyped_storage()) in storages for f in fakes)


def _constant_outputs(graph: Any) -> tuple[bool, ...]:
    """Per graph output: whether it depends on no graph input (a constant, or computed from
    constants only), so a runtime may return the same buffer at every call."""
    fed = {spec.name for spec in graph.inputs}
    for node in graph.nodes:  # in execution order: a node's inputs come before it
        if any(name in fed for name in node.inputs):
            fed.add(node.output)
    return tuple(name not in fed for name in graph.outputs)
