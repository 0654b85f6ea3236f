"""A graph from dynamo, with its weights made constants, as a module ``torch.export`` takes.

Dynamo hands the backend an FX graph whose placeholders are the user's tensors, the sizes it
treats as dynamic (SymInt placeholders) and, since PyTorch inlines ``nn.Module`` calls, every
parameter and buffer the graph reads. Dynamo marks those with a static address
(``get_static_address_type``), as it marks other long-lived buffers (a static key/value cache),
which stay inputs. For inference the backend freezes the parameters and buffers: each becomes a buffer of
the graph module (``get_attr``), so ``torch.export`` lifts it as a constant and the importer gives
the devices constant weights (folded batch norms, weight layouts, quantization) instead of inputs.
A size placeholder becomes ``sym_size`` of the user tensor axis it names, so the module takes the
user's tensors only, with that axis dynamic.

The frozen tensors are kept with their version counters (:class:`Frozen`): a parameter changed
in place (``optimizer.step()``, ``load_state_dict``) or replaced since the freeze is seen at the
next call, and the piece is compiled again from the current values.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

from neurenix_core.errors import UnsupportedOperationError

__all__ = ["Frozen", "Split", "freeze", "input_names", "split"]


@dataclass(frozen=True)
class Split:
    """How the backend's inputs divide: weights (frozen), user tensors (live), sizes of live axes."""

    weights: tuple[int, ...]
    live: tuple[int, ...]
    #: placeholder index -> (position among the live tensors, axis)
    sizes: dict[int, tuple[int, int]]
    #: per live tensor, the axes dynamo made dynamic
    dynamic: tuple[tuple[int, ...], ...]


def _placeholders(gm: Any) -> list[Any]:
    return [n for n in gm.graph.nodes if n.op == "placeholder"]


def _symbol(value: Any) -> str | None:
    import torch

    return str(value.node.expr) if isinstance(value, torch.SymInt) else None


def _is_weight(node: Any, value: Any) -> bool:
    """A module's parameter or buffer, which dynamo reads through the module. Other tensors with a
    static address (transformers' StaticCache marks its key/value buffers so) are data: inputs."""
    import torch

    source = getattr(node.meta.get("grapharg"), "source", None)
    return isinstance(value, torch.nn.Parameter) or "._buffers[" in str(getattr(source, "name", ""))


def split(gm: Any, example_inputs: list[Any]) -> Split:
    """Classify ``example_inputs`` (dynamo's, one per placeholder of ``gm``)."""
    import torch
    from torch._dynamo.utils import get_static_address_type

    nodes = _placeholders(gm)
    weights: list[int] = []
    live: list[int] = []
    sym_nodes: list[tuple[int, Any, Any]] = []
    for i, (node, value) in enumerate(zip(nodes, example_inputs)):
        if isinstance(value, torch.Tensor):
            (weights if get_static_address_type(value) is not None and _is_weight(node, value) else live).append(i)
        else:
            sym_nodes.append((i, node, value))
    axes_of: dict[str, tuple[int, int]] = {}
    dynamic: list[tuple[int, ...]] = []
    for pos, i in enumerate(live):
        shape = getattr(nodes[i].meta.get("example_value"), "shape", ())
        symbolic = []
        for axis, d in enumerate(shape):
            sym = _symbol(d)
            if sym is not None:
                symbolic.append(axis)
                axes_of.setdefault(sym, (pos, axis))
        dynamic.append(tuple(symbolic))
    sizes = {}
    for i, node, value in sym_nodes:
        sym = _symbol(node.meta.get("example_value", value)) or _symbol(value)
        if sym is None or sym not in axes_of:
            raise UnsupportedOperationError(
                f"graph input {node.name!r} ({type(value).__name__}) is a value, not a tensor or the size of one; "
                "neurenix compiles graphs of tensors: pass it as a tensor, or mark it static (torch.compile(dynamic=False))")
        sizes[i] = axes_of[sym]
    return Split(tuple(weights), tuple(live), sizes, tuple(dynamic))


def freeze(gm: Any, example_inputs: list[Any], parts: Split) -> Any:
    """A copy of ``gm`` taking the live tensors only: weights as buffers, sizes as ``sym_size``."""
    import torch

    module = copy.deepcopy(gm)
    nodes = _placeholders(module)
    graph = module.graph
    first = next(n for n in graph.nodes if n.op != "placeholder")
    live_nodes = [nodes[i] for i in parts.live]
    for j, i in enumerate(parts.weights):
        name = f"_neurenix_weight_{j}"
        module.register_buffer(name, example_inputs[i].detach())
        with graph.inserting_before(first):
            attr = graph.get_attr(name)
        nodes[i].replace_all_uses_with(attr)
    for i, (pos, axis) in parts.sizes.items():
        with graph.inserting_before(first):
            size = graph.call_function(torch.ops.aten.sym_size.int, (live_nodes[pos], axis))
        nodes[i].replace_all_uses_with(size)
    for i in list(parts.weights) + list(parts.sizes):
        graph.erase_node(nodes[i])
    module.recompile()
    return module


def input_names(gm: Any, parts: Split) -> list[str]:
    """The user tensors' names as the model's code has them (dynamo's ``l_kwargs_attention_mask_``
    is ``attention_mask``): the graph's input names, which summaries show and cpu:0's runtime
    measurement reads (an input named like a mask is measured with ones)."""
    nodes = _placeholders(gm)
    names = [re.sub(r"^l_(?:kwargs_|args_)?", "", str(nodes[i].name)).strip("_") or f"input_{k}" for k, i in enumerate(parts.live)]
    return [n if names.count(n) == 1 else f"{n}_{k}" for k, n in enumerate(names)]


class Frozen:
    """The weights a piece was compiled with, and their versions: ``current(args)`` says whether
    the call's parameters are still those (same objects, not modified in place)."""

    def __init__(self, indices: tuple[int, ...], tensors: list[Any]) -> None:
        self.indices = indices
        self.tensors = [tensors[i] for i in indices]
        self.versions = [t._version for t in self.tensors]

    def current(self, args: tuple[Any, ...] | list[Any]) -> bool:
        for i, t, v in zip(self.indices, self.tensors, self.versions):
            a = args[i]
            if a is not t or a._version != v:
                return False
        return True
