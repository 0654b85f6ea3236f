"""The checks every differential case makes, whatever it runs (a namespace function, a layer, a
compiled model): results against the float64 reference, and the Tensor's invariants.

A failure is a :class:`Mismatch` whose ``kind`` says what broke (``KINDS``); the sweep
(benchmarks/differential_sweep.py) counts failures by kind. The invariants are the ones
tensor.py's general path (``adopt``) establishes, so every hand-written fast path is held to them:

- every slot of ``Tensor.__slots__`` is set (``_ag`` only on the tape: unset means no grad);
- the tensor is on the device under test, through that device's own placement;
- memory: a result sharing a buffer with an operand is a view (charged 0, ``_base`` the owner of
  that buffer); any other result owns its buffer (charged its nbytes, ``_base`` None);
- while the case runs the device holds exactly the bytes of the tensors alive, and after they
  are deleted its ``in_use`` and tensor count are back where they were.
"""

from __future__ import annotations

import gc
import math
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

import neurenix_core as nx
from neurenix_core.errors import NeurenixError, UnsupportedDTypeError, UnsupportedOperationError
from neurenix_core.plugins.backend import Placement
from neurenix_core.tensor.dtypes import as_dtype
from neurenix_core.tensor.tensor import Tensor
from neurenix_core.testing.reference import tolerance

__all__ = [
    "KINDS",
    "VIEWS",
    "Arr",
    "DiffCase",
    "Example",
    "MemoryWatch",
    "Mismatch",
    "Refused",
    "Settings",
    "check_fields",
    "compare",
    "flat_tensors",
    "host_args",
    "live_tensors",
    "settings",
    "to_device",
]

#: What a failure can be, in the order a case checks them.
KINDS = (
    "crash",   # the library raised where the reference gave a result (the AttributeError)
    "fields",  # a Tensor slot left unset, or the wrong placement
    "memory",  # charged bytes, the view's owner, or in_use/count not back to where they were
    "device",  # a result on another device than the one under test
    "shape",
    "dtype",
    "value",   # outside the per-precision tolerance of the float64 reference
    "grad",    # a gradient off the finite differences of the float64 reference, or not recorded
)

#: The fields every Tensor has once made. ``_ag`` is autograd's and unset means "no grad"
#: (tensor.py), so it is checked apart; ``__weakref__`` is Python's.
REQUIRED_SLOTS: tuple[str, ...] = tuple(s for s in Tensor.__slots__ if s not in ("__weakref__", "_ag"))


class Mismatch(AssertionError):
    """A differential failure of one ``kind`` (one of KINDS)."""

    def __init__(self, kind: str, message: str) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown mismatch kind {kind!r}")
        super().__init__(f"[{kind}] {message} (reproduce: NEURENIX_DIFF_SEED={settings().seed})")
        self.kind = kind


class Refused(Exception):
    """The library refused the case with a typed error naming why (an honest error, not a wrong
    result): counted and reported, never a pass of the value checks."""


# --------------------------------------------------------------------------- run settings
@dataclass(frozen=True)
class Settings:
    """The run's sample, from the environment (conftest prints it in the report header).

    ``NEURENIX_DIFF_SEED``: the seed of the (function x device) sample and of every hypothesis
    example (a CI failure reproduces with it); ``NEURENIX_DIFF_SAMPLE``: the share of the pairs
    off cpu:0 that run, or ``all``; ``NEURENIX_DIFF_EXAMPLES``: hypothesis examples per test."""

    seed: int
    sample: float
    examples: int

    @property
    def full(self) -> bool:
        return self.sample >= 1.0


#: The CI defaults: about a minute of the suite on two xdist workers (docs/testing.md).
DEFAULT_SAMPLE = 0.12
DEFAULT_EXAMPLES = 2


def settings() -> Settings:
    seed = os.environ.get("NEURENIX_DIFF_SEED", "")
    sample = os.environ.get("NEURENIX_DIFF_SAMPLE", "")
    examples = os.environ.get("NEURENIX_DIFF_EXAMPLES", "")
    return Settings(
        seed=int(seed) if seed else 0,
        sample=1.0 if sample == "all" else float(sample) if sample else DEFAULT_SAMPLE,
        examples=int(examples) if examples else DEFAULT_EXAMPLES,
    )


# --------------------------------------------------------------------------- cases
@dataclass(frozen=True)
class DiffCase:
    """One differential case: a target (a namespace function or an nn entry) on one device in
    one mode; ``runtime`` names the host runtime of a compiled cpu:0 case."""

    family: str
    target: str
    device: str
    backend: str
    mode: str
    runtime: str | None = None

    @property
    def id(self) -> str:
        where = self.backend if self.runtime is None else f"{self.backend}.{self.runtime}"
        return f"{self.target}-{self.mode}-{where}"

    @property
    def always(self) -> bool:
        """In every run's sample: cpu:0 eager (the hand-written NumPy fast paths) and its NumPy
        interpreter, the cheapest cases and those every user runs."""
        return self.device == "cpu:0" and self.runtime in (None, "numpy")


# --------------------------------------------------------------------------- examples
@dataclass(frozen=True)
class Arr:
    """A tensor argument of an example: its exact values (floats already rounded to ``dtype``,
    held in float64 / complex128) and the dtype it has on the device."""

    values: np.ndarray
    dtype: str

    def native(self) -> np.ndarray:
        """The values as an array of the dtype under test (bfloat16 through ml_dtypes)."""
        return np.asarray(self.values).astype(as_dtype(self.dtype))

    def reference(self) -> np.ndarray:
        """The values as the float64 reference computes with them (integers and bools as they are)."""
        kind = as_dtype(self.dtype).kind
        if kind == "c":
            return np.asarray(self.values, np.complex128)
        if kind in "fV":  # V: bfloat16
            return np.asarray(self.values, np.float64)
        return self.native()


@dataclass(frozen=True)
class Example:
    """Positional arguments (``Arr``, lists of ``Arr``, or plain values) and keyword arguments."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]

    def arrays(self) -> list[Arr]:
        out: list[Arr] = []
        for a in (*self.args, *self.kwargs.values()):
            if isinstance(a, Arr):
                out.append(a)
            elif isinstance(a, (list, tuple)):
                out.extend(v for v in a if isinstance(v, Arr))
        return out


def _map_args(value: Any, fn: Callable[[Arr], Any]) -> Any:
    if isinstance(value, Arr):
        return fn(value)
    if isinstance(value, list):
        return [_map_args(v, fn) for v in value]
    if isinstance(value, tuple) and any(isinstance(v, Arr) for v in value):
        return tuple(_map_args(v, fn) for v in value)
    return value


def to_device(ex: Example, device: nx.Device, *, requires_grad: bool = False) -> tuple[tuple[Any, ...], dict[str, Any], list[Tensor]]:
    """The example's arguments as Tensors on ``device`` (floating ones requiring grad when asked),
    and the list of those Tensors (the case's sources)."""
    made: list[Tensor] = []

    def place(a: Arr) -> Tensor:
        t = nx.asarray(a.native(), device=device)
        if requires_grad and (as_dtype(a.dtype).kind in "fc" or a.dtype == "bfloat16"):
            t.requires_grad_(True)
        made.append(t)
        return t

    args = tuple(_map_args(a, place) for a in ex.args)
    kwargs = {k: _map_args(v, place) for k, v in ex.kwargs.items()}
    return args, kwargs, made


def host_args(ex: Example, exact: bool = False) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The example's arguments as host arrays: float64 (the reference), or ``exact``: in the
    dtypes under test (what the dtype oracle computes with)."""
    conv: Callable[[Arr], Any] = Arr.native if exact else Arr.reference
    return tuple(_map_args(a, conv) for a in ex.args), {k: _map_args(v, conv) for k, v in ex.kwargs.items()}


def flat_tensors(value: Any) -> list[Any]:
    """The arrays of a result (a Tensor or array, or tuples / named tuples / lists of them), in order."""
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in flat_tensors(v)]
    return [value]


# --------------------------------------------------------------------------- invariants
def placement_of(device: nx.Device) -> Placement:
    from neurenix_core.tensor.placement import placement_for

    return placement_for(device)


def check_fields(t: Any, where: str, device: nx.Device, sources: Sequence[Any] | None, *, on_tape: bool | None,
                 composite: bool = False) -> None:
    """Every invariant of one result Tensor ``t`` (see the module docstring).

    ``sources``: the Tensors it may share memory with (its operands; None when they are not
    known, as for a gradient: then its charge is only checked against its own ``_base``);
    ``composite``: ``t`` comes from several ops (a layer, a model), so it may be a view of an
    intermediate result, which keeps that one alive; ``on_tape``: whether it must carry autograd
    state (None: not checked)."""
    if type(t) is not Tensor:
        raise Mismatch("fields", f"{where}: expected a neurenix Tensor, got {type(t).__name__}")
    missing = [s for s in REQUIRED_SLOTS if not _has_slot(t, s)]
    if missing:
        raise Mismatch("fields", f"{where}: Tensor slot(s) {missing} not set (Tensor.__slots__ = {Tensor.__slots__})")
    p = t._p
    if p.device != device:
        raise Mismatch("device", f"{where}: result on {p.device}, not on the device under test {device}")
    if p is not placement_of(device):
        raise Mismatch("fields", f"{where}: the tensor's placement {p!r} is not {device}'s own placement")
    _check_charge(t, where, sources, composite)
    ag = getattr(t, "_ag", None)
    if on_tape is True and ag is None:
        raise Mismatch("grad", f"{where}: result of an op on tensors requiring grad carries no autograd node")
    if on_tape is False and ag is not None:
        raise Mismatch("grad", f"{where}: result carries autograd state {type(ag).__name__} with grad off / no input requiring grad")


def _has_slot(t: Tensor, name: str) -> bool:
    try:
        getattr(t, name)
    except AttributeError:
        return False
    return True


def _owner_of(t: Tensor, sources: Sequence[Any]) -> Tensor | None:
    """The tensor that must own ``t``'s buffer: adopt's rule (the general path), or None when ``t``
    shares memory with none of the sources."""
    p = t._p
    be = p.backend
    root = be._memory_root(t._data)
    for s in sources:
        if type(s) is Tensor and s is not t and s._p is p and _has_slot(s, "_base") and (root is s._data or root is be._memory_root(s._data)):
            return s._base if s._base is not None else s
    return None


def _check_charge(t: Tensor, where: str, sources: Sequence[Any] | None, composite: bool = False) -> None:
    be = t._p.backend
    if sources is not None and any(s is t for s in sources):
        sources = None  # the op returned an operand itself (astype(copy=False), asarray): its own invariants hold
    owner = _owner_of(t, sources) if sources is not None else None
    if owner is None and (sources is None or composite):
        owner = t._base  # not an operand's buffer: a view must still share its owner's
        if owner is not None and (type(owner) is not Tensor or be._memory_root(t._data) is not be._memory_root(owner._data)):
            raise Mismatch("memory", f"{where}: _base is set to a tensor whose buffer it does not share")
    if owner is None:
        want = be._nbytes_of(t._data)
        if t._base is not None:
            raise Mismatch("memory", f"{where}: a fresh buffer has _base set ({type(t._base).__name__}); it must own its memory")
        if t._nbytes != want:
            raise Mismatch("memory", f"{where}: a fresh buffer is charged {t._nbytes} bytes, its size is {want}")
        return
    if t._nbytes != 0:
        raise Mismatch("memory", f"{where}: a view of an operand's buffer is charged {t._nbytes} bytes, not 0 (charged twice)")
    if t._base is not owner:
        raise Mismatch("memory", f"{where}: a view's _base is {t._base!r:.80}, not the owner of its buffer")
    if owner._base is not None:
        raise Mismatch("memory", f"{where}: a view's owner is itself a view")


class MemoryWatch:
    """The byte accounting of the devices a case touches: what they held before it, what they must
    hold while its tensors live, and that they are back to it afterwards."""

    def __init__(self, devices: Sequence[nx.Device]) -> None:
        self.mems = {str(d): placement_of(d).mem for d in dict.fromkeys(devices)}
        self.before = {k: (m.in_use, m.count) for k, m in self.mems.items()}

    def holds(self, tensors: Sequence[Any], where: str) -> None:
        """The devices hold exactly the bytes and tensors of ``tensors`` (every live Tensor the
        case made, once each) beyond what they held before."""
        live: dict[int, Tensor] = {id(t): t for t in tensors if type(t) is Tensor}
        for key, mem in self.mems.items():
            mine = [t for t in live.values() if str(t.device) == key]
            want_bytes = self.before[key][0] + sum(t._nbytes for t in mine)
            want_count = self.before[key][1] + len(mine)
            if (mem.in_use, mem.count) != (want_bytes, want_count):
                if os.environ.get("NEURENIX_DIFF_DEBUG"):
                    print("holds: collecting", where, mem.in_use, want_bytes, mem.count, want_count)
                gc.collect()  # a reference cycle may hold an intermediate: only what survives counts
                if (mem.in_use, mem.count) != (want_bytes, want_count):
                    raise Mismatch("memory", f"{where}: {key} holds {mem.in_use} bytes in {mem.count} tensors, the live tensors "
                                             f"account for {want_bytes} in {want_count}")

    def released(self, where: str) -> None:
        for key, mem in self.mems.items():
            if (mem.in_use, mem.count) != self.before[key]:
                if os.environ.get("NEURENIX_DIFF_DEBUG"):
                    print("released: collecting", where, mem.in_use, self.before[key])
                gc.collect()
                if (mem.in_use, mem.count) != self.before[key]:
                    raise Mismatch("memory", f"{where}: after deleting every tensor {key} holds {mem.in_use} bytes in {mem.count} "
                                             f"tensors, it held {self.before[key][0]} in {self.before[key][1]} before")


def live_tensors(roots: Sequence[Any]) -> list[Tensor]:
    """``roots`` and every Tensor they keep alive: the owners of views (``_base``), accumulated
    gradients, and the arguments and results the autograd tape holds."""
    from neurenix_core.autograd.tape import Leaf, Node

    out: dict[int, Tensor] = {}
    stack: list[Any] = list(roots)
    while stack:
        item = stack.pop()
        if type(item) is Tensor:
            if id(item) in out:
                continue
            out[id(item)] = item
            base = getattr(item, "_base", None)
            if base is not None:
                stack.append(base)
            ag = getattr(item, "_ag", None)
            if type(ag) is Leaf and ag.grad is not None:
                stack.append(ag.grad)
            elif type(ag) is Node:
                stack.append(ag)
        elif type(item) is Node:
            if id(item) in out:
                continue
            out[id(item)] = item  # type: ignore[assignment]  # marks the node seen; filtered below
            stack += [*item.inputs, *item.parents]
            result = item._out()
            if result is not None:
                stack.append(result)
        elif isinstance(item, (list, tuple)):
            stack += list(item)
    return [t for t in out.values() if type(t) is Tensor]


_frozen = False


@contextmanager
def no_collection() -> Iterator[None]:
    """Automatic garbage collection off for a test: a collection of an earlier test's garbage in
    the middle of a case would change the device's in_use under MemoryWatch's feet. What was
    alive before the first differential test is frozen (``gc.freeze``), so that the collection
    each test starts with walks only newer objects (milliseconds instead of 150 ms)."""
    global _frozen
    if not _frozen:
        gc.collect()
        gc.freeze()
        _frozen = True
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


# --------------------------------------------------------------------------- values
def compare(got: Any, want: Any, device: nx.Device, where: str, *, dtype: Any = None, scale: float = 1.0, slack: Any = 0.0) -> None:
    """``got`` (a Tensor on ``device``) against the float64 reference ``want``: shape, dtype (when
    given) and values within the device's tolerance for the result's dtype
    (``neurenix_core.testing.reference.tolerance``: the kit's table or what the backend declares).
    ``scale`` widens atol for results whose absolute error grows with their magnitude, as the kit
    does (largest |value| for elementwise results, the number of terms for sums). ``slack``: the
    reference's own uncertainty (a finite difference's error estimate), added to the bound."""
    want = np.asarray(want)
    shape = tuple(got.shape)
    if shape != want.shape:
        raise Mismatch("shape", f"{where}: shape {shape}, the reference gives {want.shape}")
    if dtype is not None and got.dtype != as_dtype(dtype):
        raise Mismatch("dtype", f"{where}: dtype {got.dtype}, expected {as_dtype(dtype)}")
    host = got.numpy()
    kind = host.dtype.kind
    if kind in "biu" and want.dtype.kind in "biu":
        if not np.array_equal(host, want):
            bad = int(np.sum(host != want))
            raise Mismatch("value", f"{where}: {bad} of {want.size} integer values differ: got {host.ravel()[:8]}, want {want.ravel()[:8]}")
        return
    rtol, atol = tolerance(device, got.dtype)
    wide = np.complex128 if kind == "c" or want.dtype.kind == "c" else np.float64
    a, b = host.astype(wide), want.astype(wide)
    limit = atol * max(scale, 1.0) + rtol * np.abs(b) + np.asarray(slack, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        bad = ~((np.abs(a - b) <= limit) | (np.isnan(a) & np.isnan(b)) | (a == b))
    if np.any(bad):
        i = int(np.flatnonzero(bad)[0])
        raise Mismatch("value", f"{where}: {int(bad.sum())} of {b.size} values outside rtol={rtol}, atol={atol}*{max(scale, 1.0):.3g} "
                                f"({got.dtype}): first at flat index {i}: got {a.ravel()[i]}, reference {b.ravel()[i]}")


def central_differences(f: Callable[[np.ndarray], float], base: np.ndarray, h: float = 1e-6) -> tuple[np.ndarray, np.ndarray]:
    """df/d(base) by central differences in float64, and each entry's error estimate.

    The estimate is Richardson's, |D(h) - D(h/2)| (the truncation error of D(h/2) is a quarter
    of D(h)'s), plus the rounding of f's values over the step. A float32 gradient's tolerance is
    far above it; a float64 gradient is compared to what the difference can tell, no closer."""
    grad = np.zeros(base.shape)
    err = np.zeros(base.shape)
    for idx in np.ndindex(base.shape):
        step = h * max(1.0, abs(float(base[idx])))
        estimates = []
        for s in (step, step / 2):
            plus, minus = base.copy(), base.copy()
            plus[idx] += s
            minus[idx] -= s
            fp, fm = f(plus), f(minus)
            estimates.append(((fp - fm) / (2 * s), 4 * np.finfo(np.float64).eps * max(abs(fp), abs(fm), 1.0) / s))
        grad[idx] = estimates[1][0]
        err[idx] = abs(estimates[0][0] - estimates[1][0]) + estimates[1][1]
    return grad, err


def magnitude(values: Any) -> float:
    """The largest finite |value| of an array (the kit's ``scale`` for elementwise results)."""
    arr = np.abs(np.asarray(values, dtype=np.complex128 if np.iscomplexobj(values) else np.float64))
    finite = arr[np.isfinite(arr)]
    return float(finite.max()) if finite.size else 1.0


def refusal(exc: BaseException, *, dtypes_declared: bool) -> str | None:
    """The reason when ``exc`` is a typed refusal (an op the device does not run, or a dtype it
    does not declare), else None: anything else is a crash. ``dtypes_declared``: every dtype of the
    case (operands and results) is one the device declares, so an UnsupportedDTypeError is a bug
    dressed as a refusal (cross_entropy on npu:0 raised one for bool, which npu:0 declares)."""
    if isinstance(exc, UnsupportedDTypeError) and dtypes_declared:
        return None
    if isinstance(exc, (UnsupportedOperationError, UnsupportedDTypeError)):
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    return None


def crash(where: str, exc: BaseException) -> Mismatch:
    """A Mismatch for an exception the library raised where the reference gave a result."""
    typed = "typed " if isinstance(exc, NeurenixError) else ""
    err = Mismatch("crash", f"{where}: {typed}{type(exc).__name__}: {str(exc)[:300]}")
    err.__cause__ = exc
    return err


# --------------------------------------------------------------------------- view ops (chains)
@dataclass(frozen=True)
class View:
    """A view op that follows an op in a chain: the Tensor way and the NumPy way of doing it."""

    name: str
    applies: Callable[[tuple[int, ...]], bool]
    on_tensor: Callable[[Tensor], Any]
    on_host: Callable[[np.ndarray], np.ndarray]


def _flat_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    return (shape[0], math.prod(shape[1:])) if len(shape) >= 2 else shape


#: The ops that make views on a host-memory backend; the issue's regression was any of them
#: after an op whose result came out of a multi-operand fast path.
VIEWS: tuple[View, ...] = (
    View("reshape(-1)", lambda s: True, lambda t: nx.reshape(t, (-1,)), lambda a: a.reshape(-1)),
    View("flatten", lambda s: len(s) >= 2, lambda t: nx.nn.functional.flatten(t), lambda a: a.reshape(_flat_shape(a.shape))),
    View(".T", lambda s: len(s) == 2, lambda t: t.T, lambda a: a.T),
    View(".mT", lambda s: len(s) >= 2, lambda t: t.mT, lambda a: np.swapaxes(a, -1, -2)),
    View("[0]", lambda s: len(s) >= 1 and s[0] > 0, lambda t: t[0], lambda a: a[0]),
    View("[..., ::2]", lambda s: len(s) >= 1, lambda t: t[..., ::2], lambda a: a[..., ::2]),
    View("[None]", lambda s: True, lambda t: t[None], lambda a: a[None]),
    View("astype(copy=False)", lambda s: True, lambda t: nx.astype(t, t.dtype, copy=False), lambda a: a),
    View("permute_dims(reversed)", lambda s: True, lambda t: nx.permute_dims(t, tuple(reversed(range(t.ndim)))), lambda a: a.transpose()),
    View("expand_dims(0)", lambda s: True, lambda t: nx.expand_dims(t, axis=0), lambda a: a[None]),
)


def views_for(shape: tuple[int, ...]) -> list[View]:
    return [v for v in VIEWS if v.applies(shape)]
