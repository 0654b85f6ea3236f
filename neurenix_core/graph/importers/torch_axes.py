"""Which input axes ``from_torch`` keeps dynamic, and the warning for those it could not.

``torch.export`` specialises an axis whose example size is 0 or 1 (its "0/1 specialisation":
broadcasting makes size 1 special), so a batch-1 example would pin the batch. Here every axis
meant dynamic (the default: axis 0 of every tensor input and axis 1 of rank-2 integer inputs;
or the axes ``dynamic_shapes=`` marks with a ``Dim``, ``Dim.AUTO`` or ``Dim.DYNAMIC``) whose
example size is 1 is *widened* to 2 for the trace: the example is repeated along that axis
(``torch.cat([x, x], axis)``), which gives the graph torch.export captures for every size >= 2,
the same graph a batch-2 example gives. The imported graph keeps the user's example shapes.
A size-2 trace cannot see code that branches on a size being 1, so the widened graph is run at
the user's example on the NumPy interpreter and compared with PyTorch (``differs_at_example``);
where it differs, or the widened trace fails or fixes the axis, the example is exported as given.

Why not ``torch.fx.experimental._config.backed_size_oblivious``: with it, torch 2.13's fake
tensors computed wrong shapes for some models (Swin: a reshape of an expanded window mask
guarded ``Eq(batch, 1)`` and baked batch 1 into a later ``view``), silently.

After the export every axis meant dynamic that came out as a fixed size is collected with the
reason (torch's own guard, read from the export's ShapeEnv, rendered over the input names) and
named in one :class:`~neurenix_core.errors.NeurenixWarning` (a ``FallbackError`` under
``nx.fallback_policy('error')``).
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from neurenix_core.errors import FallbackError, NeurenixWarning
from neurenix_core.user_frame import user_stacklevel

__all__ = ["Axis", "AxisPlan", "default_spec", "differs_at_example", "fixed_axes", "plan_axes", "warn_fixed"]


@dataclass(frozen=True)
class Axis:
    """One input axis meant dynamic: the input's readable name, its index among the tensor
    inputs (the graph's input order), the axis, the example's size there, and ``source``:
    the name torch.export's ShapeEnv gives it (``L['input_ids'].size()[0]``)."""

    name: str
    leaf: int
    axis: int
    size: int
    source: str


@dataclass
class AxisPlan:
    """What to export with: the (widened) example, the dynamic-shapes spec for torch.export,
    the axes meant dynamic and which of them were widened from 1 to 2."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    spec: Any
    meant: list[Axis] = field(default_factory=list)
    widened: set[tuple[int, int]] = field(default_factory=set)
    shapes: list[tuple[int, ...]] = field(default_factory=list)  # the user's example shapes, per tensor input
    #: what tracing the size-1 axes at size 2 gave, when it did not work (the warning's reason)
    widen_failure: str = ""


def default_spec(torch: Any, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Axis 0 of every tensor input dynamic, and axis 1 of rank-2 integer inputs (token ids);
    keyed by forward's parameter names, as torch.export takes it."""
    auto = torch.export.Dim.AUTO

    def spec(x: Any) -> Any:
        if isinstance(x, (list, tuple)):
            return type(x)(spec(v) for v in x)
        if isinstance(x, dict):
            return {k: spec(v) for k, v in x.items()}
        if not isinstance(x, torch.Tensor) or x.dim() == 0:
            return None
        axes = {0: auto}
        if x.dim() == 2 and not x.dtype.is_floating_point and x.dtype != torch.bool:
            axes[1] = auto
        return axes

    try:
        bound = inspect.signature(module.forward).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return None if kwargs else tuple(spec(x) for x in args)
    return {pname: spec(value) for pname, value in bound.arguments.items()}


def _is_dynamic(torch: Any, d: Any) -> bool:
    """Whether a per-axis spec entry asks for a dynamic axis (a Dim, Dim.AUTO, Dim.DYNAMIC)."""
    if d is None or isinstance(d, int):
        return False
    return not (isinstance(d, torch.export.dynamic_shapes._DimHint) and d.type == torch.export.Dim.STATIC.type)


def _widenable(torch: Any, d: Any) -> bool:
    """Whether the axis may be traced at size 2: its range allows 2 and it is not derived
    from another Dim (``2 * batch``: its example must stay that function of the root's)."""
    if type(d).__name__ == "_DerivedDim":
        return False
    low, high = getattr(d, "min", None), getattr(d, "max", None)
    return (low is None or int(low) <= 2) and (high is None or high >= 2)


def _leaves(torch: Any, value: Any, spec: Any, path: str, source: str) -> Iterator[tuple[str, str, Any, dict[int, Any]]]:
    """(readable name, ShapeEnv source prefix, tensor, {axis: spec entry}) per tensor leaf in
    torch.utils._pytree order (the order of the exported graph's inputs)."""
    if isinstance(value, torch.Tensor):
        if isinstance(spec, dict):
            axes = {int(a): d for a, d in spec.items()}
        elif isinstance(spec, (list, tuple)):
            axes = dict(enumerate(spec))
        else:
            axes = {}
        yield path, source, value, {a % max(value.dim(), 1): d for a, d in axes.items() if _is_dynamic(torch, d)}
    elif isinstance(value, (list, tuple)):
        specs = spec if isinstance(spec, (list, tuple)) and len(spec) == len(value) else [None] * len(value)
        for i, (v, s) in enumerate(zip(value, specs)):
            yield from _leaves(torch, v, s, f"{path}[{i}]", f"{source}[{i}]")
    elif isinstance(value, dict):
        named: dict[Any, Any] = spec if isinstance(spec, dict) else {}
        for k, v in value.items():
            yield from _leaves(torch, v, named.get(k), f"{path}[{k!r}]", f"{source}[{k!r}]")


def _per_input(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], spec: Any) -> list[tuple[str, Any, Any]]:
    """(parameter name, value, its spec) for each positional then keyword input, in the order
    torch.export flattens them (positional first, keywords in the order given)."""
    try:
        sig = inspect.signature(module.forward)
        names = list(sig.bind(*args, **kwargs).arguments)
    except (TypeError, ValueError):
        sig, names = None, [f"args[{i}]" for i in range(len(args))] + list(kwargs)
    if isinstance(spec, dict):
        by_name = dict(spec)
    elif isinstance(spec, (list, tuple)):
        by_name = dict(zip(names, spec))
    else:
        by_name = {}
    out: list[tuple[str, Any, Any]] = []
    positional = [p for p in (sig.parameters.values() if sig else ()) if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    star = next((p.name for p in (sig.parameters.values() if sig else ()) if p.kind is p.VAR_POSITIONAL), None)
    rest = by_name.get(star) if star else None
    for i, a in enumerate(args):
        if i < len(positional):
            out.append((positional[i].name, a, by_name.get(positional[i].name)))
        else:
            j = i - len(positional)
            out.append((f"{star or 'args'}[{j}]", a, rest[j] if isinstance(rest, (list, tuple)) and j < len(rest) else None))
    starstar = next((p.name for p in (sig.parameters.values() if sig else ()) if p.kind is p.VAR_KEYWORD), None)
    for k, v in kwargs.items():
        if sig is not None and k not in sig.parameters and starstar:
            extra = by_name.get(starstar)
            out.append((k, v, extra.get(k) if isinstance(extra, dict) else None))
        else:
            out.append((k, v, by_name.get(k)))
    return out


def plan_axes(torch: Any, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], spec: Any, *, widen: bool = True) -> AxisPlan:
    """The axes ``spec`` marks dynamic and the example to export with: each such axis of size 1
    repeated to size 2 (``widen``), so that torch.export keeps it dynamic."""
    import torch.utils._pytree as pytree

    leaves: list[Any] = []
    for name, value, s in _per_input(module, args, kwargs, spec):
        source = f"L[{name!r}]" if "[" not in name else f"L['args']{name[name.index('['):]}"
        leaves.extend(_leaves(torch, value, s, name, source))
    flat, tree = pytree.tree_flatten((args, kwargs))
    tensors = [i for i, x in enumerate(flat) if isinstance(x, torch.Tensor)]
    plan = AxisPlan(args, kwargs, spec, shapes=[tuple(int(d) for d in flat[i].shape) for i in tensors])
    if len(tensors) != len(leaves):  # an input structure the walk does not follow: export as given
        return plan
    for leaf, (name, source, x, axes) in enumerate(leaves):
        for axis, d in sorted(axes.items()):
            if axis >= x.dim():
                continue
            plan.meant.append(Axis(name, leaf, axis, int(x.shape[axis]), f"{source}.size()[{axis}]"))
            if widen and int(x.shape[axis]) == 1 and _widenable(torch, d):
                plan.widened.add((leaf, axis))
    if plan.widened:
        flat = list(flat)
        for leaf, axis in sorted(plan.widened):
            x = flat[tensors[leaf]]
            flat[tensors[leaf]] = torch.cat([x, x], dim=axis)
        plan.args, plan.kwargs = pytree.tree_unflatten(flat, tree)
    return plan


def input_shapes(torch: Any, ep: Any) -> list[tuple[Any, ...]]:
    """The exported program's tensor inputs' shapes (ints and SymInts), in the graph's order."""
    user = set(ep.graph_signature.user_inputs)
    nodes = [n for n in ep.graph.nodes if n.op == "placeholder" and n.name in user]
    return [tuple(n.meta["val"].shape) for n in nodes if isinstance(n.meta.get("val"), torch.Tensor)]


def _guards(ep: Any) -> tuple[dict[str, Any], list[Any]]:
    """The export's ShapeEnv: source name -> size symbol, and its guards (what fixed a size)."""
    env = None
    for n in ep.graph.nodes:
        fake = getattr(n.meta.get("val"), "fake_mode", None)
        if fake is not None and fake.shape_env is not None:
            env = fake.shape_env
            break
    if env is None:
        return {}, []
    sources = {}
    for sym, srcs in env.var_to_sources.items():
        for src in srcs:
            sources[src.name() if callable(src.name) else src.name] = sym
    return sources, list(env.guards)


def _readable(expr: Any, names: dict[Any, str]) -> str:
    """A guard over the input names: ``16*x.shape[0] == 64``."""
    import sympy

    ops = {sympy.Eq: "==", sympy.Ne: "!=", sympy.Le: "<=", sympy.Lt: "<", sympy.Ge: ">=", sympy.Gt: ">"}
    op = next((text for kind, text in ops.items() if isinstance(expr, kind)), None)
    text = f"{expr.lhs} {op} {expr.rhs}" if op else str(expr)
    for sym, name in sorted(names.items(), key=lambda kv: -len(str(kv[0]))):
        text = text.replace(str(sym), name)
    return text


def fixed_axes(torch: Any, ep: Any, plan: AxisPlan) -> list[tuple[Axis, str]]:
    """Each axis meant dynamic that the export fixed, with torch's reason."""
    shapes = input_shapes(torch, ep)
    if len(shapes) != len(plan.shapes):
        return []
    sources, guards = _guards(ep)
    names = {sym: f"{a.name}.shape[{a.axis}]" for a in plan.meant for src, sym in sources.items() if src == a.source}
    out = []
    for a in plan.meant:
        d = shapes[a.leaf][a.axis]
        if isinstance(d, torch.SymInt) and not d.node.expr.is_Integer:
            continue
        sym = sources.get(a.source)
        why = [g for g in guards if sym is not None and sym in g.expr.free_symbols]
        if why:
            reason = "the model's code requires " + " and ".join(sorted({_readable(g.expr, names) for g in why}))
        elif a.size <= 1 and (a.leaf, a.axis) not in plan.widened:
            reason = f"its example size is {a.size}, which torch.export fixes (it specialises sizes 0 and 1)"
            reason += f"; traced at size 2 instead, {plan.widen_failure}" if plan.widen_failure else ""
        else:
            reason = "torch.export specialised it (the model's code fixes this size)"
        out.append((a, reason))
    return out


def describe(a: Axis) -> str:
    return f"input {a.name!r} axis {a.axis} (example size {a.size})"


def warn_fixed(module: Any, fixed: list[tuple[Axis, str]]) -> None:
    """One NeurenixWarning naming every axis meant dynamic that was fixed, with the reason
    (a FallbackError under ``nx.fallback_policy('error')``)."""
    from neurenix_core.tensor.fallback import get_fallback_policy

    if not fixed:
        return
    parts = "; ".join(f"{describe(a)}: {reason}" for a, reason in fixed)
    count = "1 axis" if len(fixed) == 1 else f"{len(fixed)} axes"
    msg = (f"from_torch({type(module).__name__}): {count} meant to be dynamic came out fixed at the example's size, "
           f"so calls must use that size there: {parts}. Remedy: change the model code named above, pass dynamic_shapes= "
           "to choose the dynamic axes yourself, or static=True to import the example's shapes without this warning")
    if get_fallback_policy() == "error":
        raise FallbackError(msg)
    warnings.warn(msg, NeurenixWarning, stacklevel=user_stacklevel())


def differs_at_example(torch: Any, module: Any, graph: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """Empty when ``graph`` (traced with size-1 axes widened to 2) gives PyTorch's result at the
    user's example; else what differs. A size-2 trace cannot see code that branches on a size
    being 1 (torch then assumes sizes >= 2 and records no guard), so the import checks the one
    size-1 shape it knows: the example's, on the NumPy interpreter."""
    import numpy as np
    import torch.utils._pytree as pytree

    from neurenix_core.graph.reference.run import run_graph

    with torch.no_grad():
        want = [x.detach().cpu().numpy() for x in pytree.tree_leaves(module(*args, **kwargs)) if isinstance(x, torch.Tensor)]
    inputs = [x.detach().cpu().numpy() for x in pytree.tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor)]
    got = run_graph(graph, *inputs, float_dtype=None)
    got = list(got) if isinstance(got, tuple) else [got]
    if len(got) != len(want):
        return f"the graph gives {len(got)} outputs at the example's shapes and PyTorch {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        g64, w64 = np.asarray(g, np.float64), np.asarray(w, np.float64)
        if g64.shape != w64.shape:
            return f"output {i} has shape {g64.shape} at the example's shapes and PyTorch's has {w64.shape}"
        both_nan = np.isnan(g64) & np.isnan(w64)
        err = float(np.where(both_nan, 0.0, np.abs(g64 - w64)).max(initial=0.0)) / max(float(np.nanmax(np.abs(w64), initial=0.0)), 1.0)
        if not err <= 1e-3:  # fp32 rounding is ~1e-6; a different branch is far off (NaN included)
            return (f"output {i} differs from PyTorch's by {err:.1e} (relative) at the example's shapes: the model's code "
                    "computes differently when that size is 1")
    return ""
