"""Tensor Core dimension alignment: a validator and a zero-padding pass.

Rules (Ampere guide, dimension tutorial): GEMM dimensions must be multiples of 8 for fp16/bf16,
4 for tf32 (and fp32, which reaches Tensor Cores only as TF32) and 16 for int8. The validator
lists every Conv2d/Linear/MultiheadAttention whose dimensions break the rule, attention head
sizes, convolutions not in ``channels_last`` and the batch size. :func:`align_model` rewrites a
copy of the model with ``torch.fx``: a layer's output dimension is zero-padded up to the next
multiple, the layers that consume it get zero input weights for the new channels, and the
padding is sliced off wherever the value meets anything else (the model output included), so
outputs are unchanged. Growth is capped at 1.2x per dimension, as in the tutorial.
"""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from neurenix_core.errors import UnsupportedOperationError
from neurenix_cuda_tc.capability import UnknownPrecisionError

if TYPE_CHECKING:
    import torch
    from torch import fx

__all__ = ["ALIGNMENT", "MAX_GROWTH", "Finding", "align_model", "alignment_for", "round_up", "validate_model"]

ALIGNMENT: Final = {"fp16": 8, "bf16": 8, "mixed": 8, "tf32": 4, "fp32": 4, "int8": 16}
MAX_GROWTH: Final = 1.2


def alignment_for(precision: str) -> int:
    key = str(precision).strip().lower()
    if key not in ALIGNMENT:
        raise UnknownPrecisionError(f"no Tensor Core alignment rule for precision {precision!r}; use one of {', '.join(ALIGNMENT)} (plugin cuda)")
    return ALIGNMENT[key]


def round_up(value: int, multiple: int) -> int:
    return -(-int(value) // multiple) * multiple


def capped(value: int, multiple: int, max_growth: float = MAX_GROWTH) -> int:
    """The aligned size, or ``value`` itself when aligning would grow it by more than ``max_growth``."""
    target = round_up(value, multiple)
    return target if target <= value * max_growth else value


@dataclass(frozen=True)
class Finding:
    """One alignment problem: the layer (module path), what is wrong and how to fix it."""

    layer: str
    kind: str  # conv_channels | linear_features | attention_dim | head_dim | memory_format | batch_size
    message: str
    suggestion: str = ""

    def __str__(self) -> str:
        return f"{self.layer}: {self.message}" + (f" -> {self.suggestion}" if self.suggestion else "")


def _dims(name: str, kind: str, label: str, dims: tuple[int, ...], align: int) -> list[Finding]:
    bad = [d for d in dims if d % align]
    if not bad:
        return []
    arrow = "->".join(str(d) for d in dims)
    fixed = "->".join(str(round_up(d, align)) for d in dims)
    return [Finding(name, kind, f"{label} {arrow} (not all multiples of {align})", f"use {fixed}")]


def _layer_findings(name: str, m: torch.nn.Module, align: int, memory_format: bool) -> list[Finding]:
    import torch

    if isinstance(m, torch.nn.Conv2d):
        out = _dims(name, "conv_channels", "Conv channels", (m.in_channels, m.out_channels), align)
        if memory_format and not m.weight.is_contiguous(memory_format=torch.channels_last):
            out.append(Finding(name, "memory_format", "Conv weight is NCHW, not channels_last", "model.to(memory_format=torch.channels_last)"))
        return out
    if isinstance(m, torch.nn.Linear):
        return _dims(name, "linear_features", "Linear features", (m.in_features, m.out_features), align)
    if isinstance(m, torch.nn.MultiheadAttention):
        out = _dims(name, "attention_dim", "Attention embed_dim", (m.embed_dim,), align)
        head = m.embed_dim // m.num_heads
        if head % align:
            out.append(Finding(name, "head_dim", f"Attention head_dim {head} (embed_dim {m.embed_dim} / {m.num_heads} heads) "
                               f"is not a multiple of {align}", "choose num_heads so that head_dim is 64 or 128"))
        return out
    return []


def validate_model(model: Any, precision: str = "fp16", batch_size: int | None = None, *, memory_format: bool = True) -> list[Finding]:
    """Every Tensor Core alignment problem of ``model`` (neurenix_core.nn model, Graph or torch.nn.Module).

    Layer names are module paths (a neurenix model's node names). ``memory_format`` also flags
    convolutions whose weights are not ``channels_last``; ``batch_size`` is checked when given.
    """
    from neurenix_cuda_tc.convert import to_torch_module

    align = alignment_for(precision)
    module = to_torch_module(model)
    names = getattr(module, "node_names", {})
    import torch

    findings: list[Finding] = []
    # An attention layer's out_proj is a Linear of the same width: reported once, as the attention.
    attn = [n for n, m in module.named_modules() if isinstance(m, torch.nn.MultiheadAttention)]
    for name, m in module.named_modules():
        if any(name != a and (a == "" or name.startswith(a + ".")) for a in attn):
            continue
        display = names.get(name.removeprefix("layers."), name) or type(m).__name__
        findings += _layer_findings(display, m, align, memory_format)
    if batch_size is not None and batch_size % align:
        findings.append(Finding("input", "batch_size", f"batch size {batch_size} is not a multiple of {align}", f"use {round_up(batch_size, align)}"))
    return findings


# ----------------------------------------------------------------------------- padding pass
_PASS_MODULES: Final = ("ReLU", "ReLU6", "GELU", "SiLU", "Sigmoid", "Tanh", "LeakyReLU", "ELU", "Hardswish", "Mish",
                        "Dropout", "Identity")
_POOL_MODULES: Final = ("MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d", "AdaptiveMaxPool2d", "Dropout2d")


def _pass_functions() -> set[Any]:
    import torch
    import torch.nn.functional as F

    return {torch.relu, F.relu, torch.sigmoid, torch.tanh, F.gelu, F.silu, F.dropout, F.leaky_relu}


@dataclass
class _Plan:
    pad_in: list[tuple[torch.nn.Module, int]]  # (consumer layer, extra input columns per channel block)
    pad_bn: list[torch.nn.Module]
    slices: list[tuple[fx.Node, fx.Node, int]]  # (value, user, axis): narrow value before user


class _Padder:
    def __init__(self, gm: fx.GraphModule, align: int, max_growth: float) -> None:
        self.gm = gm
        self.align = align
        self.max_growth = max_growth
        self.modules = dict(gm.named_modules())
        self.calls = Counter(n.target for n in gm.graph.nodes if n.op == "call_module")
        self.functions = _pass_functions()
        self.done: list[str] = []

    def module(self, node: fx.Node) -> torch.nn.Module | None:
        if node.op != "call_module" or self.calls[node.target] != 1:
            return None  # shared modules are called twice: padding one call would change the other
        return self.modules[str(node.target)]

    def _passes(self, user: fx.Node, value: fx.Node, axis: int, d: int) -> tuple[bool, torch.nn.Module | None]:
        """Does ``user`` keep channels independent (so the padding can flow through)?"""
        if not user.args or user.args[0] is not value or any(a is value for a in list(user.args[1:]) + list(user.kwargs.values())):
            return False, None
        m = self.module(user)
        if m is not None:
            kind = type(m).__name__
            if kind in _PASS_MODULES or (axis == 1 and kind in _POOL_MODULES):
                return True, None
            if axis == 1 and kind == "BatchNorm2d" and m.num_features == d:
                return True, m
            return False, None
        if user.op == "call_function" and user.target in self.functions:
            return True, None
        return user.op == "call_method" and user.target in ("relu", "sigmoid", "tanh"), None

    def _consumer(self, user: fx.Node, value: fx.Node, axis: int, d: int, flat: bool) -> tuple[torch.nn.Module, int] | None:
        import torch

        m = self.module(user)
        if m is None or not user.args or user.args[0] is not value or len(user.args) > 1 or user.kwargs:
            return None
        if isinstance(m, torch.nn.Linear) and (axis == -1 or flat):
            if flat and m.in_features % d == 0:
                return m, m.in_features // d
            return (m, 1) if not flat and m.in_features == d else None
        if isinstance(m, torch.nn.Conv2d) and axis == 1 and not flat and m.groups == 1 and m.in_channels == d:
            return m, 1
        return None

    def _is_flatten(self, user: fx.Node, value: fx.Node) -> bool:
        import torch

        m = self.module(user)
        if isinstance(m, torch.nn.Flatten):
            return m.start_dim == 1 and m.end_dim == -1 and user.args[0] is value
        return user.op == "call_function" and user.target is torch.flatten and user.args[:2] == (value, 1) and not user.kwargs

    def plan(self, value: fx.Node, axis: int, d: int, flat: bool = False) -> _Plan | None:
        """Where the padded channels of ``value`` go; None when a flattened value meets an op we cannot handle."""
        out = _Plan([], [], [])
        for user in list(value.users):
            consumer = self._consumer(user, value, axis, d, flat)
            if consumer is not None:
                out.pad_in.append(consumer)
                continue
            ok, bn = self._passes(user, value, axis, d)
            if ok and not (flat and bn is not None):
                sub = self.plan(user, axis, d, flat)
                if sub is not None:
                    _merge(out, sub, bn)
                    continue
            if not flat and axis == 1 and self._is_flatten(user, value):
                sub = self.plan(user, axis, d, flat=True)
                if sub is not None:
                    _merge(out, sub, None)
                    continue
            if flat:
                return None  # cannot slice a flattened value without knowing its spatial size
            out.slices.append((value, user, axis))
        return out

    def pad_producer(self, node: fx.Node) -> None:
        import torch

        m = self.module(node)
        if isinstance(m, torch.nn.Linear):
            d, axis = m.out_features, -1
        elif isinstance(m, torch.nn.Conv2d) and m.groups == 1:
            d, axis = m.out_channels, 1
        else:
            return
        p = capped(d, self.align, self.max_growth)
        if p == d:
            return
        plan = self.plan(node, axis, d)
        if plan is None:
            return
        _grow_out(m, p)
        for bn in plan.pad_bn:
            _grow_bn(bn, p)
        for consumer, block in plan.pad_in:
            _grow_in(consumer, d, p, block)
        for value, user, ax in plan.slices:
            with self.gm.graph.inserting_before(user):
                narrow = self.gm.graph.call_function(torch.narrow, (value, ax, 0, d))
            user.replace_input_with(value, narrow)
        self.done.append(f"{node.target}: {d} -> {p} output {'features' if axis == -1 else 'channels'}"
                         + (f" ({len(plan.slices)} slice(s) keep the original width downstream)" if plan.slices else ""))

    def pad_input(self, node: fx.Node) -> None:
        """A layer fed straight from a model input: zero-pad the input (within the growth cap)."""
        import torch
        import torch.nn.functional as F

        m = self.module(node)
        if not node.args or not isinstance(node.args[0], torch.fx.Node) or node.args[0].op != "placeholder":
            return
        if isinstance(m, torch.nn.Linear):
            d, spec = m.in_features, None
        elif isinstance(m, torch.nn.Conv2d) and m.groups == 1:
            d, spec = m.in_channels, 1
        else:
            return
        p = capped(d, self.align, self.max_growth)
        if p == d:
            return
        pad = (0, p - d) if spec is None else (0, 0, 0, 0, 0, p - d)
        with self.gm.graph.inserting_before(node):
            padded = self.gm.graph.call_function(F.pad, (node.args[0], pad))
        node.replace_input_with(node.args[0], padded)
        _grow_in(m, d, p, 1)
        self.done.append(f"{node.target}: input {d} -> {p} (zero-padded input)")


def _merge(into: _Plan, sub: _Plan, bn: torch.nn.Module | None) -> None:
    into.pad_in += sub.pad_in
    into.pad_bn += sub.pad_bn + ([bn] if bn is not None else [])
    into.slices += sub.slices


def _zeros_cat(t: torch.Tensor, dim: int, extra: int, fill: float = 0.0) -> torch.Tensor:
    import torch

    shape = list(t.shape)
    shape[dim] = extra
    return torch.cat([t, torch.full(shape, fill, dtype=t.dtype, device=t.device)], dim=dim)


def _grow_out(m: torch.nn.Module, p: int) -> None:
    import torch

    extra = p - m.weight.shape[0]
    with torch.no_grad():
        m.weight = torch.nn.Parameter(_zeros_cat(m.weight.data, 0, extra), requires_grad=m.weight.requires_grad)
        if m.bias is not None:
            m.bias = torch.nn.Parameter(_zeros_cat(m.bias.data, 0, extra), requires_grad=m.bias.requires_grad)
    if isinstance(m, torch.nn.Linear):
        m.out_features = p
    else:
        m.out_channels = p


def _grow_in(m: torch.nn.Module, d: int, p: int, block: int) -> None:
    """Zero input weights for the new channels; ``block`` columns per channel after a flatten."""
    import torch

    with torch.no_grad():
        m.weight = torch.nn.Parameter(_zeros_cat(m.weight.data, 1, (p - d) * block), requires_grad=m.weight.requires_grad)
    if isinstance(m, torch.nn.Linear):
        m.in_features = m.weight.shape[1]
    else:
        m.in_channels = p


def _grow_bn(bn: torch.nn.Module, p: int) -> None:
    import torch

    extra = p - bn.num_features
    with torch.no_grad():
        # Neutral statistics for the padded channels (var 1, not 0, so no division by ~0).
        for key, fill in (("weight", 1.0), ("bias", 0.0)):
            old = getattr(bn, key)
            if old is not None:
                setattr(bn, key, torch.nn.Parameter(_zeros_cat(old.data, 0, extra, fill), requires_grad=old.requires_grad))
        for key, fill in (("running_mean", 0.0), ("running_var", 1.0)):
            buf = getattr(bn, key)
            if buf is not None:
                setattr(bn, key, _zeros_cat(buf, 0, extra, fill))
    bn.num_features = p


def align_model(model: Any, precision: str = "fp16", *, max_growth: float = MAX_GROWTH, pad_inputs: bool = True) -> tuple[torch.nn.Module, list[str]]:
    """A copy of ``model`` with misaligned Linear/Conv2d dimensions zero-padded; outputs are unchanged.

    Returns (padded torch module, one line per padded layer). The original model is not touched.
    A model ``torch.fx`` cannot trace raises UnsupportedOperationError naming the cause.
    """
    import torch
    from torch import fx

    from neurenix_cuda_tc.convert import to_torch_module

    align = alignment_for(precision)
    module = copy.deepcopy(to_torch_module(model))
    try:
        gm = fx.symbolic_trace(module)
    except Exception as exc:  # fx raises TraceError, TypeError, NotImplementedError... all mean "not traceable"
        raise UnsupportedOperationError(
            f"plugin cuda align_model cannot trace {type(module).__name__} with torch.fx ({type(exc).__name__}: {exc}); "
            "use validate_model() and fix the dimensions in the model definition"
        ) from exc
    padder = _Padder(gm, align, max_growth)
    for node in list(gm.graph.nodes):
        if node.op == "call_module" and isinstance(padder.modules.get(str(node.target)), (torch.nn.Linear, torch.nn.Conv2d)):
            if pad_inputs:
                padder.pad_input(node)
            padder.pad_producer(node)
    gm.graph.lint()
    gm.recompile()
    if hasattr(module, "node_names"):
        gm.node_names = module.node_names  # type: ignore[assignment]
    return gm, padder.done

