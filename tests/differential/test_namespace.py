"""Every namespace function (the array API signature table, ``linalg``, ``fft``) and the Tensor's
indexing, on every device, eagerly with autograd off and on, against the float64 reference,
each result followed by a chain of view ops (reshape, flatten, .T, indexing, astype(copy=False)):
the chain that hid the issue's regression. See harness.py for what each case checks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import strategies as st

import neurenix_core as nx
from neurenix_core.autograd import tape
from neurenix_core.errors import NotDifferentiableError
from neurenix_core.tensor.dtypes import as_dtype
from neurenix_core.tensor.signatures import SIGNATURES
from neurenix_core.tensor.tensor import Tensor

from .cases import dtypes_on
from .gen import GRAD_FLOAT, values
from .harness import (
    Arr,
    DiffCase,
    Example,
    MemoryWatch,
    Mismatch,
    Refused,
    View,
    central_differences,
    check_fields,
    compare,
    crash,
    flat_tensors,
    host_args,
    live_tensors,
    magnitude,
    refusal,
    to_device,
    views_for,
)
from .namespace import CATALOGUE, HOST_RESULT, Op


def test_catalogue_covers_the_signature_table() -> None:
    """A function added to the signature table without a differential row fails here."""
    missing = sorted(q for q in SIGNATURES if q not in CATALOGUE)
    assert not missing, f"namespace functions without a differential case (add them to tests/differential/namespace.py): {missing}"


@pytest.mark.differential("namespace", "nograd")
def test_namespace_nograd(diff_case: DiffCase, nx_device: nx.Device, run_examples: Callable[..., None]) -> None:
    op = CATALOGUE[diff_case.target]
    if op.name in HOST_RESULT:
        run_examples(lambda data: host_example(op, data))
        return
    dtypes = dtypes_on(diff_case.device, op.dtypes)
    run_examples(lambda data: eager_example(op, data, nx_device, dtypes, grad=False))


@pytest.mark.differential("namespace", "grad")
def test_namespace_grad(diff_case: DiffCase, nx_device: nx.Device, run_examples: Callable[..., None]) -> None:
    op = CATALOGUE[diff_case.target]
    dtypes = dtypes_on(diff_case.device, tuple(d for d in op.dtypes if d in GRAD_FLOAT))
    run_examples(lambda data: eager_example(op, data, nx_device, dtypes, grad=True))


# --------------------------------------------------------------------------- one example
def eager_example(op: Op, data: st.DataObject, device: nx.Device, dtypes: tuple[str, ...], *, grad: bool) -> None:
    dtype = data.draw(st.sampled_from(dtypes), label="dtype")
    ex = op.draw(data, dtype)
    wants = [np.asarray(w) for w in flat_tensors(op.ref_fn()(*_ref_call(op, ex)[0], **_ref_call(op, ex)[1]))]
    dtypes_out = expected_dtypes(op, ex, len(wants))
    chain = draw_chain(data, wants[0].shape)
    watch = MemoryWatch([device])
    leaves = tape._live_leaves
    _run(op, ex, device, wants, dtypes_out, chain, grad, data)
    watch.released(f"{op.name} ({dtype})")
    if tape._live_leaves != leaves:
        raise Mismatch("grad", f"{op.name}: {tape._live_leaves - leaves} autograd leaves still counted after every tensor was deleted "
                               "(recording stays on for every later op)")


def _run(op: Op, ex: Example, device: nx.Device, wants: list[np.ndarray], dtypes_out: list[Any] | None, chain: list[View],
         grad: bool, data: st.DataObject) -> None:
    where = f"{op.name} on {device} ({'grad' if grad else 'no_grad'})"
    watch = MemoryWatch([device])
    with nx.enable_grad() if grad else nx.no_grad():
        args, kwargs, inputs = to_device(ex, device, requires_grad=grad)
        for t in inputs:
            check_fields(t, f"{where}: input", device, (), on_tape=None)
        watch.holds(inputs, f"{where}: inputs")
        if op.creates:
            kwargs["device"] = device
        kwargs = {k: (as_dtype(v) if k in op.dtype_kwargs and v is not None else v) for k, v in kwargs.items()}
        try:
            out = op.nx_fn()(*args, **kwargs)
        except Exception as exc:  # a typed refusal is reported, anything else is the library crashing
            involved = [as_dtype(a.dtype) for a in ex.arrays()] + [as_dtype(d) for d in dtypes_out or ()]
            reason = refusal(exc, dtypes_declared=all(device_backend(device).supports_dtype(d) for d in involved))
            if reason is not None:
                raise Refused(reason) from exc
            raise crash(where, exc) from exc
        outs = flat_tensors(out)
        if len(outs) != len(wants):
            raise Mismatch("shape", f"{where}: {len(outs)} result(s), the reference gives {len(wants)}")
        taped = grad and any(t.requires_grad for t in inputs)
        for i, o in enumerate(outs):
            on_tape = None if op.tape is None or type(o) is not Tensor else bool(op.tape and taped and tape.is_floating(o.dtype))
            check_fields(o, f"{where}: result {i}", device, inputs, on_tape=on_tape)
        scale = op.scale(ex, wants[0]) if op.scale is not None else magnitude(wants[0])
        if op.check is not None:
            op.check(outs, wants, ex, device, where)
        for i, (o, w) in enumerate(zip(outs, wants)):
            if op.check is None and not op.undefined_values:
                compare(o, w, device, f"{where}: result {i}", dtype=None if dtypes_out is None else dtypes_out[i], scale=scale)
            else:
                compare(o, o.numpy(), device, f"{where}: result {i}", dtype=None if dtypes_out is None else dtypes_out[i])
                if tuple(o.shape) != w.shape:
                    raise Mismatch("shape", f"{where}: result {i} has shape {tuple(o.shape)}, the reference gives {w.shape}")
        made = [*inputs, *outs]
        watch.holds(live_tensors(made), f"{where}: after the op")
        # The chain: view ops on the first result, each checked like the op itself.
        prev = outs[0]
        prev_ref = wants[0] if op.check is None and not op.undefined_values else prev.numpy()
        for view in chain:
            try:
                nxt = view.on_tensor(prev)
            except Exception as exc:  # the view op failing on a result is the regression this layer exists for
                raise crash(f"{where} then {view.name}", exc) from exc
            on_tape = None if op.tape is None else bool(op.tape and taped and tape.is_floating(nxt.dtype))
            check_fields(nxt, f"{where} then {view.name}", device, [prev, *inputs], on_tape=on_tape)
            nxt_ref = view.on_host(np.asarray(prev_ref))
            compare(nxt, nxt_ref, device, f"{where} then {view.name}", dtype=prev.dtype, scale=scale)
            made.append(nxt)
            prev, prev_ref = nxt, nxt_ref
        watch.holds(live_tensors(made), f"{where}: after the chain {[v.name for v in chain]}")
        if grad and op.tape:
            _check_grads(op, ex, inputs, outs, prev, chain, device, data, where, scale)
            watch.holds(live_tensors([*made, *(t.grad for t in inputs if t.grad is not None)]), f"{where}: after backward")


def _check_grads(op: Op, ex: Example, inputs: list[Tensor], outs: list[Any], final: Tensor, chain: list[View], device: nx.Device,
                 data: st.DataObject, where: str, scale: float) -> None:
    """``final.backward(g)`` against the finite differences of the float64 reference (op, then
    the chain), for every floating input; ops without a vjp rule (and ops with several results)
    must refuse with NotDifferentiableError naming the op."""
    leaves = [t for t in inputs if t.requires_grad]
    if not leaves or not tape.is_floating(final.dtype) or not device_backend(device).supports_dtype(final.dtype):
        return  # nothing to differentiate, or no cotangent of that dtype can exist on the device (complex on ort:0)
    g_host = values(data, tuple(final.shape), "float32", -1, 1)
    g = nx.asarray(g_host.astype(final.dtype), device=device)
    if not op.differentiable or len(outs) > 1:
        try:
            final.backward(g)
        except NotDifferentiableError:
            return
        except Exception as exc:  # anything but the typed refusal is a crash
            raise crash(f"{where}: backward", exc) from exc
        raise Mismatch("grad", f"{where}: {op.name} has no gradient rule, yet backward ran without NotDifferentiableError")
    try:
        final.backward(g)
    except NotDifferentiableError as exc:
        # A rule that refuses these arguments, naming why (repeat with a tensor of counts): honest.
        raise Refused(f"NotDifferentiableError: {str(exc).splitlines()[0][:160]}") from exc
    except Exception as exc:  # the op has a rule: backward must run
        raise crash(f"{where}: backward", exc) from exc
    floats = [a for a in ex.arrays() if tape.is_floating(as_dtype(a.dtype))]
    for t, a in zip(leaves, floats):
        gr = t.grad
        if gr is None:
            raise Mismatch("grad", f"{where}: no gradient accumulated for an input that requires grad")
        check_fields(gr, f"{where}: gradient", device, None, on_tape=False)
        if gr.dtype != t.dtype or tuple(gr.shape) != tuple(t.shape):
            raise Mismatch("grad", f"{where}: gradient {gr.dtype}{tuple(gr.shape)} for an input {t.dtype}{tuple(t.shape)}")
        want, uncertainty = finite_differences(op, ex, a, chain, np.asarray(g_host, np.float64))
        try:
            compare(gr, want, device, f"{where}: gradient", scale=max(scale, magnitude(want)), slack=uncertainty)
        except Mismatch as m:
            raise Mismatch("grad", str(m).split("] ", 1)[1].rsplit(" (reproduce", 1)[0]) from m


def finite_differences(op: Op, ex: Example, which: Arr, chain: list[View], g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """d(sum(g * chain(op(x))))/d(which) by central differences of the float64 reference, and
    their error estimate (harness.central_differences)."""
    base = which.reference().astype(np.float64)

    def f(values_: np.ndarray) -> float:
        swapped = _replace(ex, which, values_)
        args, kwargs = _ref_call(op, swapped)
        y = np.asarray(flat_tensors(op.ref_fn()(*args, **kwargs))[0], dtype=np.float64)
        for view in chain:
            y = view.on_host(y)
        return float(np.sum(g * y))

    return central_differences(f, base)


def _replace(ex: Example, which: Arr, values_: np.ndarray) -> Example:
    new = Arr(values_, "float64")

    def swap(v: Any) -> Any:
        if v is which:
            return new
        if isinstance(v, list):
            return [swap(x) for x in v]
        return v

    return Example(tuple(swap(a) for a in ex.args), {k: swap(v) for k, v in ex.kwargs.items()})


def device_backend(device: nx.Device) -> Any:
    return nx.backend(device)


# --------------------------------------------------------------------------- references
def _ref_call(op: Op, ex: Example) -> tuple[tuple[Any, ...], dict[str, Any]]:
    args, kwargs = host_args(ex)
    kwargs = {k: (_ref_dtype(v) if k in op.dtype_kwargs and v is not None else v) for k, v in kwargs.items()}
    return args, kwargs


def _ref_dtype(name: str) -> Any:
    """A dtype argument as the float64 reference takes it: floats computed in float64."""
    dt = as_dtype(name)
    return np.float64 if dt.kind in "fV" else np.complex128 if dt.kind == "c" else dt


def expected_dtypes(op: Op, ex: Example, n: int) -> list[Any] | None:
    """The result dtypes the standard gives: a dtype argument when one is passed, else what
    array_api_compat.numpy gives on the same dtypes (bfloat16, which NumPy lacks, stands in as
    float16: the promotion rules treat the two alike)."""
    given = ex.kwargs.get("dtype")
    if "dtype" in op.dtype_kwargs and given is not None:
        return [as_dtype(given)] * n
    low = any(a.dtype == "bfloat16" for a in ex.arrays())
    args, kwargs = host_args(_as_float16(ex) if low else ex, exact=True)
    try:
        results = [np.asarray(r).dtype for r in flat_tensors(op.ref_fn()(*args, **kwargs))]
    except (TypeError, ValueError):
        return None  # the reference cannot compute in these dtypes: the values are still compared
    return [as_dtype("bfloat16") if low and d == np.float16 else d for d in results]


def _as_float16(ex: Example) -> Example:
    def swap(v: Any) -> Any:
        if isinstance(v, Arr) and v.dtype == "bfloat16":
            return Arr(v.values, "float16")
        if isinstance(v, list):
            return [swap(x) for x in v]
        return v

    return Example(tuple(swap(a) for a in ex.args), {k: swap(v) for k, v in ex.kwargs.items()})


def host_example(op: Op, data: st.DataObject) -> None:
    """The data-type functions (finfo, can_cast ...): Python values, compared with NumPy's."""
    dtype = data.draw(st.sampled_from(op.dtypes), label="dtype")
    ex = op.draw(data, dtype)
    got = op.nx_fn()(**{k: (as_dtype(v) if k in op.dtype_kwargs else v) for k, v in ex.kwargs.items()})
    if op.name == "finfo" and dtype == "bfloat16":
        import ml_dtypes

        from .namespace import _info

        want = _info(ml_dtypes.finfo(ml_dtypes.bfloat16))
    else:
        want = op.ref_fn()(**{k: (as_dtype(v) if k in op.dtype_kwargs else v) for k, v in ex.kwargs.items()})
    if not np.array_equal(np.asarray(got), np.asarray(want)):
        raise Mismatch("value", f"{op.name}({ex.kwargs}): {got!r}, NumPy gives {want!r}")


def draw_chain(data: st.DataObject, shape: tuple[int, ...]) -> list[View]:
    """One or two view ops that apply to ``shape`` one after the other."""
    chain: list[View] = []
    for _ in range(data.draw(st.integers(1, 2), label="chain length")):
        view = data.draw(st.sampled_from(views_for(shape)), label="view")
        chain.append(view)
        shape = view.on_host(np.empty(shape)).shape
    return chain
