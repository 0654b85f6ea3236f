"""Every nn layer (alone and in the small models users write), loss and functional form, on every
device: eagerly with autograd off and on, compiled with ``nx.compile`` (a layer followed by
Flatten, on cpu:0 once per host runtime), against the float64 reference interpreter
(``run_graph`` on the traced graph), each result followed by a chain of view ops. Gradients of
the input and of every parameter are compared with finite differences of the reference."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import strategies as st

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.autograd import tape
from neurenix_core.errors import CompilationError
from neurenix_core.graph.ir import Graph
from neurenix_core.graph.reference.run import run_graph
from neurenix_core.tensor.dtypes import as_dtype
from neurenix_core.tensor.tensor import Tensor

from .gen import values
from .harness import (
    DiffCase,
    MemoryWatch,
    Mismatch,
    Refused,
    View,
    central_differences,
    check_fields,
    compare,
    crash,
    live_tensors,
    magnitude,
    refusal,
)
from .nn_cases import FUNCTIONAL, LAYERS, LOSSES, Built
from .test_namespace import draw_chain


def test_nn_catalogue_covers_every_layer() -> None:
    """A layer or loss added to nx.nn without a differential entry fails here."""
    from neurenix_core.nn import layers, losses

    missing = sorted(n for n in (*layers.__all__, *losses.__all__) if n not in LAYERS and n not in LOSSES)
    assert not missing, f"nn layers/losses without a differential case (add them to tests/differential/nn_cases.py): {missing}"


@pytest.mark.differential("nn", "nograd")
def test_nn_nograd(diff_case: DiffCase, nx_device: nx.Device, run_examples: Callable[..., None]) -> None:
    run_examples(lambda data: _dispatch(diff_case, data, nx_device, grad=False))


@pytest.mark.differential("nn", "grad")
def test_nn_grad(diff_case: DiffCase, nx_device: nx.Device, run_examples: Callable[..., None]) -> None:
    run_examples(lambda data: _dispatch(diff_case, data, nx_device, grad=True))


@pytest.mark.differential("nn", "compiled")
def test_nn_compiled(diff_case: DiffCase, nx_device: nx.Device, run_examples: Callable[..., None]) -> None:
    run_examples(lambda data: compiled_example(LAYERS[diff_case.target], data, nx_device, diff_case.runtime))


def _dispatch(case: DiffCase, data: st.DataObject, device: nx.Device, *, grad: bool) -> None:
    if case.target in LAYERS:
        layer_example(LAYERS[case.target], data, device, grad=grad)
    elif case.target in LOSSES:
        loss_example(case.target, data, device, grad=grad)
    else:
        functional_example(case.target, data, device, grad=grad)


# --------------------------------------------------------------------------- layers and models
def _reference_graph(module: nn.Module, shape: tuple[int, ...]) -> Graph:
    return module.to_graph(shape)


def _run_reference(graph: Graph, x: np.ndarray) -> np.ndarray:
    return np.asarray(run_graph(graph, x), dtype=np.float64)


def layer_example(layer: Any, data: st.DataObject, device: nx.Device, *, grad: bool) -> None:
    watch = MemoryWatch([nx.Device("cpu", 0), device])  # before the weights exist: they are the case's too
    leaves = tape._live_leaves
    built: Built = layer.build(data)
    x = built.x.values
    graph = _reference_graph(built.module, x.shape)
    want = _run_reference(graph, x)
    chain = draw_chain(data, want.shape)
    g_host = values(data, chain_shape(want.shape, chain), "float32", -1, 1) if grad else None
    _layer_run(layer.name, built, graph, want, chain, g_host, device, grad, watch)
    del built
    watch.released(f"{layer.name} on {device}")
    if tape._live_leaves != leaves:
        raise Mismatch("grad", f"{layer.name}: {tape._live_leaves - leaves} autograd leaves still counted after every tensor was deleted")


def chain_shape(shape: tuple[int, ...], chain: list[View]) -> tuple[int, ...]:
    for view in chain:
        shape = view.on_host(np.empty(shape)).shape
    return shape


def _layer_run(name: str, built: Built, graph: Graph, want: np.ndarray, chain: list[View], g_host: np.ndarray | None,
               device: nx.Device, grad: bool, watch: MemoryWatch) -> None:
    where = f"{name} on {device} ({'grad' if grad else 'no_grad'})"
    model = built.module.to(device)
    params = list(model.parameters())
    state = [*params, *model.buffers()]
    for i, p in enumerate(params):
        check_fields(p, f"{where}: parameter {i} after .to()", device, (), on_tape=None)
    with nx.enable_grad() if grad else nx.no_grad():
        xt = nx.asarray(built.x.native(), device=device)
        if grad:
            xt.requires_grad_(True)
        y = _forward(lambda: model(xt), where)
        check_fields(y, f"{where}: output", device, [xt, *state], on_tape=grad, composite=True)
        scale = magnitude(want)
        compare(y, want, device, f"{where}: output", dtype="float32", scale=scale)
        made = [xt, y, *state]
        final, _ = _chain(y, want, chain, [xt, *state], device, where, scale, grad, made)
        watch.holds(live_tensors(made), f"{where}: after the forward pass and the chain")
        if g_host is None:
            return
        g = _backward(final, g_host, device, where)  # every layer trains on a device that trains
        _check_layer_grads(graph, built, xt, model, chain, g_host, device, where)
        watch.holds(live_tensors([*made, g]), f"{where}: after backward")


def _forward(run: Any, where: str) -> Tensor:
    """``run()``: a typed refusal is reported as Refused, any other exception is a crash."""
    try:
        return run()  # type: ignore[no-any-return]
    except Exception as exc:
        reason = refusal(exc, dtypes_declared=True)  # float32 and int64 only: every device declares them
        if reason is not None:
            raise Refused(reason) from exc
        raise crash(where, exc) from exc


def _backward(final: Tensor, g_host: np.ndarray, device: nx.Device, where: str) -> Tensor:
    """``final.backward(g)`` with ``g_host`` on the device; any exception is a crash. Returns g."""
    g = nx.asarray(g_host.astype(np.float32), device=device)
    try:
        final.backward(g)
    except Exception as exc:
        raise crash(f"{where}: backward", exc) from exc
    return g


def _chain(y: Tensor, want: np.ndarray, chain: list[View], sources: list[Any], device: nx.Device, where: str, scale: float, grad: bool,
           made: list[Any]) -> tuple[Tensor, np.ndarray]:
    prev, prev_ref = y, want
    for view in chain:
        try:
            nxt = view.on_tensor(prev)
        except Exception as exc:  # the regression: a view op failing on a layer's output
            raise crash(f"{where} then {view.name}", exc) from exc
        check_fields(nxt, f"{where} then {view.name}", device, [prev, *sources], on_tape=grad)
        nxt_ref = view.on_host(prev_ref)
        compare(nxt, nxt_ref, device, f"{where} then {view.name}", dtype=prev.dtype, scale=scale)
        made.append(nxt)
        prev, prev_ref = nxt, nxt_ref
    return prev, prev_ref


def _check_layer_grads(graph: Graph, built: Built, xt: Tensor, model: nn.Module, chain: list[View], g: np.ndarray,
                       device: nx.Device, where: str) -> None:
    """The input's and every parameter's gradient against central differences of the float64
    reference interpreter (the parameters perturbed in the traced graph's nodes)."""
    x64 = built.x.values.astype(np.float64)
    g64 = g.astype(np.float64)
    nodes = {n.name: n for n in graph.nodes}
    for node in graph.nodes:  # the reference perturbs float64 copies of the weights
        for k, v in list(node.params.items()):
            node.params[k] = np.asarray(v, dtype=np.float64).copy()  # type: ignore[index]

    def loss(x: np.ndarray) -> float:
        y = _run_reference(graph, x)
        for view in chain:
            y = view.on_host(y)
        return float(np.sum(g64 * y))

    terms = int(g.size)
    _grad_close(xt, central_differences(loss, x64), device, f"{where}: d/d input", terms)
    for pname, p in model.named_parameters():
        node, key = _node_param(nodes, pname)
        base = node.params[key]

        def loss_p(v: np.ndarray, node: Any = node, key: str = key) -> float:
            node.params[key] = v
            return loss(x64)

        fd = central_differences(loss_p, base.copy())
        node.params[key] = base
        _grad_close(p, fd, device, f"{where}: d/d {pname}", terms)


def _node_param(nodes: dict[str, Any], pname: str) -> tuple[Any, str]:
    """The graph node and parameter key of module parameter ``pname`` ("0.out_proj.weight" is
    node "0"'s "out_proj_weight"; a layer traced alone is its op's node)."""
    parts = pname.split(".")
    for cut in range(len(parts) - 1, -1, -1):
        prefix = ".".join(parts[:cut])
        if prefix in nodes:
            return nodes[prefix], "_".join(parts[cut:])
    if len(nodes) == 1:
        return next(iter(nodes.values())), "_".join(parts)
    raise KeyError(f"no graph node holds parameter {pname!r} (nodes: {list(nodes)})")


def _grad_close(t: Tensor, fd: tuple[np.ndarray, np.ndarray], device: nx.Device, where: str, terms: int) -> None:
    """A gradient is a sum over the ``terms`` output elements: its atol scales with the largest
    |gradient| times ``terms``, the kit's rule for reductions (neurenix_core/testing/suite)."""
    gr = t.grad
    if gr is None:
        raise Mismatch("grad", f"{where}: no gradient accumulated")
    check_fields(gr, where, device, None, on_tape=False)
    if gr.dtype != t.dtype or tuple(gr.shape) != tuple(t.shape):
        raise Mismatch("grad", f"{where}: gradient {gr.dtype}{tuple(gr.shape)} for a tensor {t.dtype}{tuple(t.shape)}")
    want, uncertainty = fd
    try:
        compare(gr, want, device, where, scale=magnitude(want) * max(terms, 1), slack=uncertainty)
    except Mismatch as m:
        raise Mismatch("grad", str(m).split("] ", 1)[1].rsplit(" (reproduce", 1)[0]) from m


# --------------------------------------------------------------------------- compiled
_PRECISION_WORDS = {"bf16": "bfloat16", "fp16": "float16", "tf32": "float32", "fp32": "float32"}


def stated_precision(compiled: Any) -> str:
    """The float dtype the compile computes in: ``precision=`` when given, else the backend's
    default, which ``.summary`` states (the TPU's is bf16): its first precision word."""
    if compiled.precision is not None:
        return _PRECISION_WORDS.get(str(compiled.precision), "float32")
    found = re.search(r"\b(bf16|fp16|tf32|fp32)\b", str(compiled.summary))
    return _PRECISION_WORDS[found.group(1)] if found else "float32"


def compiled_example(layer: Any, data: st.DataObject, device: nx.Device, runtime: str | None) -> None:
    watch = MemoryWatch([nx.Device("cpu", 0), device])
    built: Built = layer.build(data)
    model = built.module
    x = built.x.values
    # The pattern: a layer followed by Flatten (models already end in one or in a head).
    if not layer.name.startswith("model:") and _reference_graph(model, x.shape) is not None and np.ndim(_run_reference(model.to_graph(x.shape), x)) >= 2:
        model = nn.Sequential(model, nn.Flatten())
    graph = _reference_graph(model, x.shape)
    want = _run_reference(graph, x)
    chain = draw_chain(data, want.shape)
    _compiled_run(layer.name, model, built, want, chain, device, runtime)
    del model, built
    watch.released(f"compiled {layer.name} on {device}")


def _compiled_run(name: str, model: nn.Module, built: Built, want: np.ndarray, chain: list[View], device: nx.Device, runtime: str | None) -> None:
    where = f"compiled {name} on {device}" + (f" (runtime {runtime})" if runtime else "")
    try:
        # options={"runtime": ...}: this runtime runs the cpu:0 graph, or a typed error says why not.
        compiled = nx.compile(model, device=device, progress=False, options={"runtime": runtime} if runtime else None)
    except (CompilationError, Exception) as exc:  # typed refusals are reported, the rest is a crash
        reason = refusal(exc, dtypes_declared=True) or (f"CompilationError: {str(exc).splitlines()[0][:160]}" if isinstance(exc, CompilationError) else None)
        if reason is not None:
            raise Refused(reason) from exc
        raise crash(f"{where}: nx.compile", exc) from exc
    with nx.no_grad():
        xt = nx.asarray(built.x.native(), device=device)
        for label, arg in (("device tensor", xt), ("host array", built.x.native())):
            try:
                y = compiled(arg)
            except Exception as exc:  # a typed refusal at the first call (each shape compiles then) is reported, the rest is a crash
                reason = refusal(exc, dtypes_declared=True)
                if reason is not None and label == "device tensor":
                    raise Refused(reason) from exc
                raise crash(f"{where}: call with a {label}", exc) from exc
            check_fields(y, f"{where}: output for a {label}", device, [xt] if label == "device tensor" else [], on_tape=False)
            precision = stated_precision(compiled)  # after the first call: the summary is the compile's, made then
            # The compile reports its precision; a float16 compile is held to float16's tolerance.
            compare(nx.asarray(y.numpy().astype(as_dtype(precision)), device=device) if precision != "float32" else y, want, device,
                    f"{where}: output for a {label}", scale=magnitude(want))
            if y.dtype != np.float32:
                raise Mismatch("dtype", f"{where}: output dtype {y.dtype} for a float32 model")
            if label == "device tensor":
                # The views are exact: each is compared with the same view of the output itself.
                _chain(y, y.numpy().astype(np.float64), chain, [xt], device, where, magnitude(want), False, [xt, y])
            del y


# --------------------------------------------------------------------------- losses and functional forms
def loss_example(name: str, data: st.DataObject, device: nx.Device, *, grad: bool) -> None:
    watch = MemoryWatch([nx.Device("cpu", 0), device])
    leaves = tape._live_leaves
    _loss_case(name, data, device, grad, watch)  # returns with every tensor it made deleted
    watch.released(f"{name} on {device}")
    if tape._live_leaves != leaves:
        raise Mismatch("grad", f"{name}: {tape._live_leaves - leaves} autograd leaves still counted after every tensor was deleted")


def _loss_case(name: str, data: st.DataObject, device: nx.Device, grad: bool, watch: MemoryWatch) -> None:
    loss = LOSSES[name]
    module, x, target = loss.draw(data)
    want = np.asarray(loss.ref(module, x.reference(), target.reference()), dtype=np.float64)
    chain = draw_chain(data, want.shape)
    g_host = values(data, chain_shape(want.shape, chain), "float32", -1, 1) if grad else None

    def ref(v: np.ndarray) -> np.ndarray:
        return np.asarray(loss.ref(module, v, target.reference()), dtype=np.float64)

    _one_input_run(f"{name} on {device}", lambda xt, tt: module.to(device)(xt, tt), ref, x.native(), target.native(), want, chain,
                   g_host, device, grad, watch, [module])


def functional_example(name: str, data: st.DataObject, device: nx.Device, *, grad: bool) -> None:
    fn = FUNCTIONAL[name]
    x, kwargs = fn.draw(data)
    want = np.asarray(fn.ref(x.reference(), **kwargs), dtype=np.float64)
    chain = draw_chain(data, want.shape)
    g_host = values(data, chain_shape(want.shape, chain), "float32", -1, 1) if grad else None
    watch = MemoryWatch([device])
    _one_input_run(f"{name} on {device}", lambda xt, _: fn.call(xt, **kwargs), lambda v: np.asarray(fn.ref(v, **kwargs), np.float64),
                   x.native(), None, want, chain, g_host, device, grad, watch, [])
    watch.released(f"{name} on {device}")


def _one_input_run(where: str, call: Callable[[Tensor, Tensor | None], Any], ref: Callable[[np.ndarray], np.ndarray], x: np.ndarray,
                   other: np.ndarray | None, want: np.ndarray, chain: list[View], g_host: np.ndarray | None, device: nx.Device,
                   grad: bool, watch: MemoryWatch, modules: list[nn.Module]) -> None:
    """A loss or functional form of the input ``x`` (``other``: a target, not differentiated)."""
    where = f"{where} ({'grad' if grad else 'no_grad'})"
    with nx.enable_grad() if grad else nx.no_grad():
        xt = nx.asarray(x, device=device)
        tt = nx.asarray(other, device=device) if other is not None else None
        if grad:
            xt.requires_grad_(True)
        y = _forward(lambda: call(xt, tt), where)
        state = [t for m in modules for t in (*m.parameters(), *m.buffers())]
        check_fields(y, f"{where}: output", device, [xt, *([tt] if tt is not None else []), *state], on_tape=grad, composite=True)
        scale = magnitude(want) * max(x.size, 1)  # a mean or sum over the batch: the kit's reduction rule
        compare(y, want, device, f"{where}: output", dtype="float32", scale=scale)
        made = [xt, y, *([tt] if tt is not None else []), *state]
        final, _ = _chain(y, want, chain, [xt], device, where, scale, grad, made)
        watch.holds(live_tensors(made), f"{where}: after the forward pass and the chain")
        if g_host is None:
            return
        g = _backward(final, g_host, device, where)  # losses are differentiable on every device that trains
        g64 = g_host.astype(np.float64)

        def loss(v: np.ndarray) -> float:
            out = ref(v)
            for view in chain:
                out = view.on_host(out)
            return float(np.sum(g64 * out))

        _grad_close(xt, central_differences(loss, x.astype(np.float64)), device, f"{where}: d/d input", max(int(x.size), int(g_host.size)))
        watch.holds(live_tensors([*made, g]), f"{where}: after backward")
