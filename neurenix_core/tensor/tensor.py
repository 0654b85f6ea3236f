"""Tensor: a native array of one backend, on one device, with the array-API methods.

Dispatch is resolved once per tensor: a tensor points at its ``Placement`` (backend, device,
op table, memory counters), so an op is one dict lookup in the op table, never a pluggy call.
Devices are checked once, here, with one message format. The binary operators are the hot path
and are written out flat (no helper calls between the operator and the native op); everything
else goes through ``_call``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, Union

import numpy as np

from neurenix_core.device import Device, DeviceLike, as_device
from neurenix_core.errors import ShapeError, TransferError, UnsupportedDTypeError
from neurenix_core.tensor import transfer
from neurenix_core.tensor.autograd_slot import stand_in as _stand_in
from neurenix_core.tensor.dtypes import PLAIN_DTYPES, as_dtype
from neurenix_core.tensor.host_run import getitem_on_host, run_on_host
from neurenix_core.tensor.indexing import set_native
from neurenix_core.tensor.op_errors import BROADCASTING, mismatch, raise_op_error
from neurenix_core.tensor.placement import check_dtype, default_backend, host_default, host_to_native, placement_for

if TYPE_CHECKING:
    from collections.abc import Iterator

    from typing_extensions import Self  # typing.Self from Python 3.11; for type checkers only

    from neurenix_core.plugins.backend import Backend, Placement

#: An operand of a binary function (``nx.add``) or operator (``x + 1``): a Tensor or a Python scalar,
#: as the array API 2024.12 allows. Defined here, beside Tensor, and re-exported by tensor/types.py.
# Union, not |: "Tensor" is a forward reference here, and str | type fails at run time.
Operand: TypeAlias = Union["Tensor", bool, int, float, complex]

# mismatch, raise_op_error, default_backend and placement_for live in op_errors.py and placement.py;
# they stay importable from here, where plugins found them in 0.1.
__all__ = [
    "Tensor",
    "adopt",
    "asarray",
    "check_same_device",
    "default_backend",
    "from_dlpack",
    "mismatch",
    "placement_for",
    "raise_op_error",
    "wrap",
    "wrap_on",
    "wrap_results",
]

_new = object.__new__
_ndarray = np.ndarray  # one global load on the generic hot path instead of two
# Exact types only: a NumPy scalar (np.float64 subclasses float) takes the slow, checked path.
_SCALAR_TYPES = frozenset({bool, int, float, complex})


class Tensor:
    """An array on a device. ``nx.Tensor(data, dtype=None, device=None)`` is ``nx.asarray``."""

    # _base: the tensor owning the buffer when this one is a view (keeps it alive, charged once);
    # None for an owner. Every path that makes a Tensor sets it: the view paths read it directly.
    # _ag: autograd state (neurenix_core/autograd/tape.py): a Leaf or a Node; unset = no grad.
    __slots__ = ("__weakref__", "_ag", "_base", "_data", "_nbytes", "_p")

    _data: Any
    _p: Placement
    _nbytes: int
    _base: Tensor | None
    _ag: Any

    # NumPy must not compute ``ndarray + tensor`` on the host behind our back: it defers to us.
    __array_ufunc__ = None

    def __new__(cls, data: Any, dtype: Any = None, device: DeviceLike | None = None) -> Tensor:  # noqa: PYI034 - asarray's Tensor, whatever cls
        return asarray(data, dtype=dtype, device=device)

    def __del__(self) -> None:
        # Release exactly what adopt() charged (0 for views). Straight-line int updates: see memory.py.
        m = self._p.mem
        m.in_use -= self._nbytes
        m.count -= 1

    # ----------------------------------------------------------------- attributes
    @property
    def shape(self) -> tuple[int, ...]:
        return self._p.backend._shape_of(self._data)

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._p.backend._dtype_of(self._data)

    @property
    def device(self) -> Device:
        return self._p.device

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        """Logical size of the data (a view reports its own size though it is charged 0)."""
        return self.size * self.dtype.itemsize

    @property
    def _backend(self) -> Backend:
        return self._p.backend

    @property
    def _device(self) -> Device:
        return self._p.device

    @property
    def _index(self) -> int:
        return self._p.index

    @property
    def T(self) -> Tensor:  # array API name
        d = self._data
        if (d.ndim if type(d) is _ndarray else self.ndim) != 2:  # an ndarray's own ndim: no shape tuple
            raise ShapeError(f"{self.device}: Tensor.T needs a 2-D tensor, got {self.ndim}-D; use matrix_transpose or permute_dims")
        p = self._p
        fn = p.ops.get("permute_dims")
        if record is not None or fn is None:
            return _call("permute_dims", (self, (1, 0)))  # type: ignore[no-any-return]  # _call: the op's result, a Tensor here
        # _call's one-operand case written out (a NumPy view on the CPU: x.T is one attribute there).
        try:
            r = fn(d, (1, 0))
        except NotImplementedError:
            return _call_general("permute_dims", (self, (1, 0)), None, native=False)  # type: ignore[no-any-return]  # a Tensor here
        except Exception as exc:  # noqa: BLE001 - raise_op_error re-raises it typed, naming the device, with this as the cause
            raise_op_error("permute_dims", p, [self], exc)
        return _own1(r, self, d, p)  # type: ignore[no-any-return]  # a Tensor for one array

    @property
    def mT(self) -> Tensor:
        return UNARY_FUNCTIONS["matrix_transpose"](self)  # type: ignore[no-any-return]  # the op's result, a Tensor here

    @property
    def native(self) -> Any:
        """The backend's own array (a NumPy array, a jax.Array, a torch.Tensor ...)."""
        return self._data

    # ----------------------------------------------------------------- transfers
    def to(self, device: DeviceLike) -> Tensor:
        """A copy of this tensor on ``device``; this tensor is untouched."""
        p = placement_for(as_device(device))
        return adopt(transfer.copy_native(self._data, self._p, p), p)

    def to_device(self, device: DeviceLike, /, *, stream: Any = None) -> Tensor:
        if stream is not None:
            raise TransferError(f"{self.device}: streams are not supported by to_device; pass stream=None")
        return self.to(device)

    def numpy(self) -> np.ndarray:
        """A host NumPy copy of the data."""
        return self._p.backend._to_host(self._data)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if copy is False:
            native = self._data
            if isinstance(native, np.ndarray) and (dtype is None or np.dtype(dtype) == native.dtype):
                return native  # host memory, explicitly asked to share: the tensor's own buffer
            raise TransferError(f"{self.device}: np.asarray(tensor, copy=False) cannot share this tensor's memory; use np.from_dlpack(tensor) or allow a copy")
        out = self.numpy()
        return out if dtype is None else out.astype(dtype, copy=False)

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None, copy: bool | None = None) -> Any:
        return transfer.export_dlpack(self._data, self._p, stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)

    def __dlpack_device__(self) -> tuple[int, int]:
        return transfer.dlpack_device(self._data)

    def __array_namespace__(self, *, api_version: str | None = None) -> Any:
        if api_version not in (None, "2023.12", "2024.12"):
            raise ValueError(f"neurenix implements array API 2024.12, not {api_version}")
        # The namespace is the package this module belongs to, loaded before any of its modules
        # runs (Python imports a package before its submodules): looked up, not imported.
        return sys.modules["neurenix_core"]

    # copy, deepcopy and pickle must go through the accounting (the default slot copy would make
    # a second tensor releasing bytes it never charged).
    def __copy__(self) -> Tensor:
        return self.to(self.device)

    def __deepcopy__(self, memo: dict[int, Any]) -> Tensor:
        return self.to(self.device)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (_rebuild, (self.numpy(), str(self.device)))

    def item(self) -> Any:
        return self.numpy().item()

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def __repr__(self) -> str:
        body = np.array2string(self.numpy(), separator=", ", prefix="Tensor(")
        return f"Tensor({body}, dtype={self.dtype}, device='{self.device}')"

    def __str__(self) -> str:
        # print(t) shows dtype and device too, as torch does: a bare array hides where it lives.
        return self.__repr__()

    def __len__(self) -> int:
        shape = self.shape
        if not shape:
            raise TypeError("len() of a 0-d tensor")
        return shape[0]

    def __bool__(self) -> bool:
        return bool(self._scalar("bool"))

    def __float__(self) -> float:
        return float(self._scalar("float"))

    def __int__(self) -> int:
        return int(self._scalar("int"))

    def __index__(self) -> int:
        if self.dtype.kind not in "iu":
            raise TypeError(f"{self.device}: only integer tensors can be used as an index, not {self.dtype}")
        return int(self._scalar("index"))

    def __complex__(self) -> complex:
        return complex(self._scalar("complex"))

    def _scalar(self, what: str) -> Any:
        if self.size != 1:
            raise ShapeError(f"{self.device}: {what}() needs a tensor with one element, got shape {self.shape}")
        return self.numpy().reshape(()).item()

    def __iter__(self) -> Iterator[Tensor]:
        return (self[i] for i in range(len(self)))

    # Hashing by identity would make tensors usable as dict keys with surprising equality.
    __hash__ = None  # type: ignore[assignment]

    # ----------------------------------------------------------------- autograd
    # The engine lives in neurenix_core/autograd and installs itself as ``autograd`` below.
    @property
    def requires_grad(self) -> bool:
        return autograd.requires_grad(self)  # type: ignore[no-any-return]

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        autograd.set_requires_grad(self, value)

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        autograd.set_requires_grad(self, requires_grad)
        return self

    @property
    def grad(self) -> Tensor | None:
        """The gradient accumulated by ``backward()`` (leaf tensors that require grad)."""
        return autograd.grad_of(self)  # type: ignore[no-any-return]

    @grad.setter
    def grad(self, value: Tensor | None) -> None:
        autograd.set_grad(self, value)

    @property
    def is_leaf(self) -> bool:
        return autograd.is_leaf(self)  # type: ignore[no-any-return]

    def backward(self, gradient: Tensor | None = None) -> None:
        """Accumulate d(self)/d(leaf) into ``leaf.grad`` for every leaf that requires grad."""
        autograd.backward(self, gradient)

    def detach(self) -> Tensor:
        """The same data without gradient history (a view: no copy, no memory charged)."""
        return autograd.detach(self)  # type: ignore[no-any-return]

    # ----------------------------------------------------------------- indexing
    def __getitem__(self, key: Any) -> Tensor:
        p = self._p
        d = self._data
        k = type(key)
        # Basic indices (ints, slices, None, ...) are their own native key: no walk to unwrap Tensors.
        native_key = key if k in _BASIC_KEYS or (k is tuple and _basic(key)) else _index_key(key, p)
        try:
            result = d[native_key]
        except IndexError as exc:
            # Stays an IndexError (the Python protocol for out-of-range indices), with the device named.
            raise IndexError(f"{p.device}: index {key!r} does not fit shape {self.shape}: {exc}") from exc
        except Exception as exc:  # noqa: BLE001 - kept as the cause if the host cannot index it either
            # Some runtimes cannot index every way the standard allows (torch: negative steps).
            # If the host can, that is an op the device does not run natively: fallback policy.
            out = adopt(getitem_on_host(d, p, _host_key(key), [self], exc), p)
        else:
            if record is None and p.numpy_fast:
                # A NumPy buffer's view or copy (or scalar), wrapped as adopt would, written out.
                return _own1(result, self, d, p)  # type: ignore[no-any-return]  # a Tensor for an ndarray or NumPy scalar
            out = adopt(result, p, (self,))
        return out if record is None else record("__getitem__", (self, key), None, out)

    def __setitem__(self, key: Any, value: Any) -> None:
        _setitem(self, _index_key(key, self._p), value)

    # ----------------------------------------------------------------- unary operators
    # Bound below to the flat one-operand functions (_make_unary), the very objects behind
    # nx.negative, nx.positive, nx.abs and nx.bitwise_invert; declared here for type checkers.
    if TYPE_CHECKING:
        def __neg__(self) -> Tensor: ...
        def __pos__(self) -> Tensor: ...
        def __abs__(self) -> Tensor: ...
        def __invert__(self) -> Tensor: ...

    # ----------------------------------------------------------------- binary operators
    # Bound below from the flat hot path (_make_binary, set on the class by name); declared here,
    # for type checkers only, with the types they take and give. tests/test_typing.py checks that
    # every operator the loop sets is declared.
    if TYPE_CHECKING:
        def __add__(self, other: Operand, /) -> Tensor: ...
        def __radd__(self, other: Operand, /) -> Tensor: ...
        def __iadd__(self, other: Operand, /) -> Self: ...
        def __sub__(self, other: Operand, /) -> Tensor: ...
        def __rsub__(self, other: Operand, /) -> Tensor: ...
        def __isub__(self, other: Operand, /) -> Self: ...
        def __mul__(self, other: Operand, /) -> Tensor: ...
        def __rmul__(self, other: Operand, /) -> Tensor: ...
        def __imul__(self, other: Operand, /) -> Self: ...
        def __truediv__(self, other: Operand, /) -> Tensor: ...
        def __rtruediv__(self, other: Operand, /) -> Tensor: ...
        def __itruediv__(self, other: Operand, /) -> Self: ...
        def __floordiv__(self, other: Operand, /) -> Tensor: ...
        def __rfloordiv__(self, other: Operand, /) -> Tensor: ...
        def __ifloordiv__(self, other: Operand, /) -> Self: ...
        def __mod__(self, other: Operand, /) -> Tensor: ...
        def __rmod__(self, other: Operand, /) -> Tensor: ...
        def __imod__(self, other: Operand, /) -> Self: ...
        def __pow__(self, other: Operand, /) -> Tensor: ...
        def __rpow__(self, other: Operand, /) -> Tensor: ...
        def __ipow__(self, other: Operand, /) -> Self: ...
        def __and__(self, other: Operand, /) -> Tensor: ...
        def __rand__(self, other: Operand, /) -> Tensor: ...
        def __iand__(self, other: Operand, /) -> Self: ...
        def __or__(self, other: Operand, /) -> Tensor: ...
        def __ror__(self, other: Operand, /) -> Tensor: ...
        def __ior__(self, other: Operand, /) -> Self: ...
        def __xor__(self, other: Operand, /) -> Tensor: ...
        def __rxor__(self, other: Operand, /) -> Tensor: ...
        def __ixor__(self, other: Operand, /) -> Self: ...
        def __lshift__(self, other: Operand, /) -> Tensor: ...
        def __rlshift__(self, other: Operand, /) -> Tensor: ...
        def __ilshift__(self, other: Operand, /) -> Self: ...
        def __rshift__(self, other: Operand, /) -> Tensor: ...
        def __rrshift__(self, other: Operand, /) -> Tensor: ...
        def __irshift__(self, other: Operand, /) -> Self: ...
        def __matmul__(self, other: Tensor, /) -> Tensor: ...
        def __rmatmul__(self, other: Tensor, /) -> Tensor: ...
        def __imatmul__(self, other: Tensor, /) -> Self: ...
        def __lt__(self, other: Operand, /) -> Tensor: ...
        def __le__(self, other: Operand, /) -> Tensor: ...
        def __gt__(self, other: Operand, /) -> Tensor: ...
        def __ge__(self, other: Operand, /) -> Tensor: ...
        # Elementwise, as in NumPy and torch: a Tensor of booleans, not object's bool.
        def __eq__(self, other: Operand, /) -> Tensor: ...  # type: ignore[override]
        def __ne__(self, other: Operand, /) -> Tensor: ...  # type: ignore[override]


# --------------------------------------------------------------------- the hot path
def _make_binary(name: str, reflected: bool = False, function: bool = False) -> Callable[[Any, Any], Any]:
    """The function behind ``a + b`` (``reflected``: ``b + a``) and ``nx.add(a, b)`` (``function``).

    Written flat on purpose: every call or attribute load here is paid on every tensor op
    (benchmarks/dispatch.py). ``function`` only changes what happens to unsupported operands:
    an operator returns NotImplemented so Python can try the other side, a function raises.
    """

    def op(x1: Any, x2: Any, /) -> Any:
        if type(x1) is Tensor:
            p = x1._p
            d1 = x1._data
            if type(x2) is Tensor:
                q = x2._p
                if q is not p and q.device != p.device:
                    raise mismatch(name, p.device, q.device)
                d2 = x2._data
            elif type(x2) in _SCALAR_TYPES:
                d2 = x2
            else:
                return _slow_binary(name, x1, x2, function)
        elif type(x2) is Tensor and type(x1) in _SCALAR_TYPES:
            p = x2._p
            d1, d2 = x1, x2._data
        else:
            return _slow_binary(name, x1, x2, function)
        try:
            r = p.ops[name](d1, d2)
        except KeyError as exc:
            if name in p.ops:  # the KeyError came from inside the native op
                raise_op_error(name, p, [x1, x2], exc)
            return _call(name, (x1, x2))  # not native: the fallback policy decides
        except NotImplementedError:
            return _call(name, (x1, x2))
        except Exception as exc:  # noqa: BLE001 - raise_op_error re-raises it typed, naming the device, with this as the cause
            raise_op_error(name, p, [x1, x2], exc)
        if type(r) is not p.array_type:
            r = p.backend._coerce(r)
        t = _fresh(r, p)
        if record is not None:  # autograd hook: see "autograd" at the end of this module
            return record(name, (x1, x2), None, t)
        return t

    if reflected:
        def rop(x1: Any, x2: Any, /) -> Any:
            return op(x2, x1)

        rop.__name__ = rop.__qualname__ = f"r{name}"
        return rop
    op.__name__ = op.__qualname__ = name
    return op


def _make_unary(name: str) -> Callable[[Any], Any]:
    """The function behind ``nx.exp(x)`` and ``-x`` (``negative``): one tensor in, one out.

    ``_call``'s common case written out for one operand, flat for the same reason as
    ``_make_binary``: a fresh NumPy result is charged and wrapped here; anything else (a view,
    another array type, recording, another argument type, an op the device lacks) goes the way
    ``_call`` goes, with the same results and errors.
    """

    def op(x: Any, /) -> Any:
        if type(x) is Tensor and record is None:
            p = x._p
            try:
                fn = p.ops[name]
            except KeyError:
                return _call(name, (x,))  # not native: the fallback policy decides
            d = x._data
            try:
                r = fn(d)
            except NotImplementedError:
                return _call_general(name, (x,), None, native=False)
            except Exception as exc:  # noqa: BLE001 - raise_op_error re-raises it typed, naming the device, with this as the cause
                raise_op_error(name, p, [x], exc)
            # A new buffer (adopt's view test for one base-less operand): charged here, with
            # DeviceMemory.charge written out as in the binary operators (keep the copies in step).
            if type(r) is _ndarray and p.numpy_fast and r.base is None and r is not d and type(d) is _ndarray and d.base is None:
                return _fresh(r, p)
            return _own1(r, x, d, p)
        return _call(name, (x,))

    op.__name__ = op.__qualname__ = name
    # The standard's signature with no annotations, as the generated functions (their types are
    # in the stub, _generated_ops.pyi): inspect.signature(nx.exp) is the table's ``(x, /)``.
    op.__annotations__ = {}
    return op


#: The one-operand functions made so far by ``unary_function`` (the generated namespace's
#: elementwise functions, the unary operators), by array API name.
UNARY_FUNCTIONS: dict[str, Callable[[Any], Any]] = {}


def unary_function(name: str, doc: str | None = None) -> Callable[[Any], Any]:
    """The flat one-operand function for the array API function ``name`` (made once)."""
    fn = UNARY_FUNCTIONS.get(name)
    if fn is None:
        fn = UNARY_FUNCTIONS[name] = _make_unary(name)
    if doc is not None:
        fn.__doc__ = doc
    return fn


def _where(condition: Any, x1: Any, x2: Any, /) -> Any:
    """``nx.where``: ``_call``'s common case written out for three Tensors on one placement (the
    form on benchmarks/dispatch.py's list); Python scalars, other devices, recording, an op the
    device lacks go through ``_call``, with the same results and errors."""
    if record is None and type(condition) is Tensor and type(x1) is Tensor and type(x2) is Tensor:
        p = condition._p
        fn = p.ops.get("where")
        if fn is not None and x1._p is p and x2._p is p:
            dc = condition._data
            d1 = x1._data
            d2 = x2._data
            try:
                r = fn(dc, d1, d2)
            except NotImplementedError:
                return _call_general("where", (condition, x1, x2), None, native=False)
            except Exception as exc:  # noqa: BLE001 - raise_op_error re-raises it typed, naming the device, with this as the cause
                raise_op_error("where", p, [condition, x1, x2], exc)
            # A new buffer: base-less and none of the operands' own (base-less) buffers. An operand
            # without .base (not an ndarray) is not known to own its memory: rewrap decides.
            if type(r) is _ndarray and p.numpy_fast and r.base is None and r is not dc and r is not d1 and r is not d2:
                try:
                    owned = dc.base is None and d1.base is None and d2.base is None
                except AttributeError:
                    owned = False
                if owned:
                    return _fresh(r, p)
            return rewrap(r, p, [condition, x1, x2])
    return _call("where", (condition, x1, x2))


_where.__name__ = _where.__qualname__ = "where"  # exported as nx.where (pickle finds it by name)
_where.__annotations__ = {}  # the standard's signature, unannotated like the generated functions


def where_function(doc: str) -> Callable[..., Any]:
    """``nx.where`` (``_where``) with the generated functions' docstring."""
    _where.__doc__ = doc
    return _where


def _slow_binary(name: str, x1: Any, x2: Any, function: bool) -> Any:
    if isinstance(x1, np.ndarray) or isinstance(x2, np.ndarray):
        t = x1 if type(x1) is Tensor else x2
        where = f" on {t.device}" if type(t) is Tensor else ""
        raise TypeError(
            f"{name}: cannot combine a neurenix Tensor{where} with a NumPy array; "
            f"convert it first with nx.asarray(array, device=...)"
        )
    if type(x1) is Tensor or type(x2) is Tensor:
        other = x2 if type(x1) is Tensor else x1
        if type(other) is Tensor or isinstance(other, (int, float, complex, np.generic)):
            return _call(name, (x1, x2))
        if hasattr(other, "__dlpack__"):
            # A torch.Tensor or jax.Array: Python's own message would read "'Tensor' and 'Tensor'".
            t = x1 if type(x1) is Tensor else x2
            kind = f"{type(other).__module__.split('.')[0]}.{type(other).__qualname__}"
            raise TypeError(
                f"{name}: cannot combine a neurenix Tensor on {t.device} with a {kind}; "
                f"convert it first with nx.asarray(value, device='{t.device}') (DLPack, zero copy where the devices allow)"
            )
    if function:
        raise TypeError(
            f"{name}: operands must be neurenix Tensors or Python scalars, got "
            f"{type(x1).__name__} and {type(x2).__name__}; convert with nx.asarray(...)"
        )
    return NotImplemented  # Python then tries the other operand or raises its TypeError


def _make_inplace(name: str) -> Callable[[Tensor, Any], Tensor]:
    binary = _BINARY_OPS[name]

    def op(self: Tensor, other: Any) -> Tensor:
        result = binary(self, other)
        if result is NotImplemented:
            return NotImplemented  # type: ignore[no-any-return]
        if result.shape != self.shape:
            raise ShapeError(
                f"{self.device}: in-place {name} would change the shape {self.shape} to {result.shape}; "
                f"use the out-of-place form x = x {name} y"
            )
        if result.dtype != self.dtype:
            raise UnsupportedDTypeError(
                f"{self.device}: in-place {name} would change the dtype {self.dtype} to {result.dtype}; "
                f"cast the operand first or use the out-of-place form"
            )
        _setitem(self, Ellipsis, result)
        return self

    return op


_OPERATORS = {
    "add": "add", "sub": "subtract", "mul": "multiply", "truediv": "divide", "floordiv": "floor_divide",
    "mod": "remainder", "pow": "pow", "matmul": "matmul", "and": "bitwise_and", "or": "bitwise_or",
    "xor": "bitwise_xor", "lshift": "bitwise_left_shift", "rshift": "bitwise_right_shift",
}
_COMPARISONS = {"lt": "less", "le": "less_equal", "gt": "greater", "ge": "greater_equal", "eq": "equal", "ne": "not_equal"}
_BINARY_OPS: dict[str, Callable[[Any, Any], Any]] = {n: _make_binary(n) for n in (*BROADCASTING, "matmul")}
#: The namespace functions nx.add, nx.matmul ...: the same flat path, raising on bad operands.
BINARY_FUNCTIONS: dict[str, Callable[[Any, Any], Any]] = {n: _make_binary(n, function=True) for n in _BINARY_OPS}

for _dunder, _op_name in _OPERATORS.items():
    setattr(Tensor, f"__{_dunder}__", _BINARY_OPS[_op_name])
    setattr(Tensor, f"__r{_dunder}__", _make_binary(_op_name, reflected=True))
    setattr(Tensor, f"__i{_dunder}__", _make_inplace(_op_name))
for _dunder, _op_name in _COMPARISONS.items():
    setattr(Tensor, f"__{_dunder}__", _BINARY_OPS[_op_name])
for _dunder, _op_name in (("neg", "negative"), ("pos", "positive"), ("abs", "abs"), ("invert", "bitwise_invert")):
    setattr(Tensor, f"__{_dunder}__", unary_function(_op_name))
unary_function("matrix_transpose")  # Tensor.mT's


def _rebuild(host: np.ndarray, device: str) -> Tensor:
    """Unpickling: the host data placed on the device it was on (which must exist here)."""
    p = placement_for(device)
    return adopt(host_to_native(np.asarray(host), p), p)


# --------------------------------------------------------------------- wrapping natives
def replace_data(t: Tensor, native: Any) -> None:
    """Point ``t`` at ``native`` (same shape and dtype, so the memory accounting is unchanged):
    how a lowered step writes back what the framework computed (buffers, gradients' owners)."""
    t._data = native


def adopt(native: Any, p: Placement, sources: tuple[Any, ...] | list[Any] = ()) -> Tensor:
    """A Tensor around an op result on placement ``p``.

    A result that shares memory with one of the ``sources`` tensors (a view: slice, reshape,
    ``astype(copy=False)``) is charged nothing and keeps the owning tensor alive; any other
    result owns its buffer and is charged (OutOfMemoryError before the tensor exists).
    """
    be = p.backend
    if type(native) is not p.array_type:
        native = be._coerce(native)
    root = be._memory_root(native)
    for s in sources:
        if type(s) is Tensor and s._p is p and (root is s._data or root is be._memory_root(s._data)):
            return _view(native, p, s if s._base is None else s._base)  # every Tensor has _base set (_fresh, _view)
    return _fresh(native, p)


def _fresh(r: Any, p: Placement) -> Tensor:
    """The one constructor of a Tensor owning a new buffer: ``r`` (of ``p``'s array type) is
    charged its bytes to ``p``'s device (OutOfMemoryError before the Tensor exists) and every
    field is set. Every path that wraps a fresh backend result comes here, the per-op fast paths
    included: a field written out by hand in six places was once forgotten in one of them."""
    n = r.nbytes if p.native_nbytes else p.backend._nbytes_of(r)
    # DeviceMemory.charge inlined (tests/test_tensor_fields.py holds the two equal): this is on
    # every op's path (benchmarks/dispatch.py), where a second call would cost a tenth of it.
    m = p.mem
    used = m.in_use + n
    if used > m.limit:
        raise m.refuse(n)
    m.in_use = used
    m.count += 1
    if used > m.peak:  # noqa: PLR1730 - no max() call on the hot path
        m.peak = used
    t = _new(Tensor)
    t._data = r
    t._p = p
    t._nbytes = n
    t._base = None
    return t


def _view(native: Any, p: Placement, base: Tensor) -> Tensor:
    """A view of ``base``'s buffer: charged nothing, counted as a live Tensor, keeping ``base`` alive."""
    p.mem.count += 1
    t = _new(Tensor)
    t._data = native
    t._p = p
    t._nbytes = 0
    t._base = base
    return t


def wrap(native: Any, backend: Backend, device: Device, index: int) -> Tensor:
    """Make a Tensor around a native array that owns its memory, charging its bytes to the device.

    For plugin and core code that produced ``native`` itself (compiled model outputs, transfers).
    """
    return wrap_on(native, backend.placement(index))


def wrap_on(native: Any, p: Placement) -> Tensor:
    """``wrap`` on a placement already resolved (the compiled-call path resolves it once)."""
    if type(native) is not p.array_type:
        native = p.backend._coerce(native)
    # Freshly produced: owns its buffer, so no view bookkeeping (adopt's memory-root walk).
    return _fresh(native, p)


def views_of(outs: tuple[Any, ...], sources: Sequence[Any]) -> tuple[Any, ...]:
    """A compiled call's result Tensors, each one that shares a buffer with a ``sources`` Tensor
    (a model returning its input, or a view of it: Identity, a Flatten that torch.fx leaves a
    view) turned into a view of that Tensor, as ``adopt`` makes views: charged nothing and
    keeping the buffer's owner alive. Runners wrap their natives without seeing the call's
    Tensors, which charged one buffer twice."""
    owners = [s for s in sources if type(s) is Tensor]
    if not owners:
        return outs
    # Each source's buffer and memory root, found once per call (not once per output: a language
    # model's step has 60 cache Tensors in and 60 out). Keyed by id: the owners list keeps them alive.
    roots: dict[int, list[Tensor]] | None = None
    for t in outs:
        if type(t) is not Tensor or t._base is not None or not t._nbytes:
            continue
        if roots is None:
            roots = {}
            for s in owners:
                for buffer in {id(s._data): s._data, id(root := s._p.backend._memory_root(s._data)): root}.values():
                    roots.setdefault(id(buffer), []).append(s)
        p = t._p
        owner = next((s for s in roots.get(id(p.backend._memory_root(t._data)), ()) if s._p is p), None)
        if owner is not None:
            p.mem.in_use -= t._nbytes  # undo the fresh buffer's charge (the count stays one Tensor)
            t._nbytes = 0
            t._base = owner if owner._base is None else owner._base
    return outs


def wrap_results(out: Any, p: Placement) -> Any:
    """A compiled call's results other than one array of the backend's type (tuples and lists of
    results, results that are already Tensors, arrays to coerce) as Tensors on ``p``. The one
    array case is wrapped inline by ``Compiled.__call__``, with ``DeviceMemory.charge`` written
    out as in the binary operators (keep the copies in step)."""
    if isinstance(out, (tuple, list)):
        outs = tuple(o if isinstance(o, Tensor) else wrap_on(o, p) for o in out)
        return outs[0] if len(outs) == 1 else outs
    return out if isinstance(out, Tensor) else wrap_on(out, p)


# --------------------------------------------------------------------- device checks and errors
def check_same_device(op: str, tensors: list[Tensor]) -> Tensor:
    first = tensors[0]
    p = first._p
    for t in tensors[1:]:
        q = t._p
        if q is not p and q.device != p.device:
            raise mismatch(op, p.device, q.device)
    return first


# --------------------------------------------------------------------- the generic path
def collect_tensors(value: Any, out: list[Tensor]) -> None:
    """Append every Tensor in ``value`` (walking lists and tuples) to ``out``: the operands of an op."""
    if type(value) is Tensor:
        out.append(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            collect_tensors(v, out)


def _unwrap(value: Any) -> Any:
    if type(value) is Tensor:
        return value._data
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(_unwrap(v) for v in value)
    return value


def rewrap(result: Any, p: Placement, sources: tuple[Any, ...] | list[Any] = ()) -> Any:
    """Wrap every native array in an op result (tuples, named tuples, lists) on placement ``p``."""
    if isinstance(result, tuple):
        items = [rewrap(r, p, sources) for r in result]
        return type(result)(*items) if hasattr(result, "_fields") else tuple(items)
    if isinstance(result, list):
        return [rewrap(r, p, sources) for r in result]
    if isinstance(result, (p.array_type, np.generic)) or (hasattr(result, "shape") and hasattr(result, "dtype")):
        return adopt(result, p, sources)
    return result


#: Argument types handed to a native op as they are: ``_unwrap`` returns them unchanged and
#: ``collect_tensors`` finds no Tensor in them (a tuple of ints, e.g. a shape, is checked apart);
#: the classes of NumPy's dtypes too (``astype``'s target), found here without an isinstance call.
_PLAIN_TYPES = frozenset({bool, int, float, complex, str, type(None), *(type(d) for d in PLAIN_DTYPES)})


def _plain(value: Any) -> bool:
    """True for an argument that holds no Tensor and needs no unwrapping: ``_unwrap`` and
    ``collect_tensors`` only look into Tensors, lists and tuples, so anything else (a scalar, a
    dtype, a NumPy value) and a tuple of ints (a shape, axes) go to the native op as they are."""
    t = type(value)
    if t in _PLAIN_TYPES:
        return True
    if t is tuple:
        for v in value:
            if type(v) is not int:
                return False
        return True
    return t is not Tensor and not isinstance(value, (list, tuple))


def _own1(r: Any, x: Tensor, d: Any, p: Placement) -> Any:
    """The Tensor(s) for ``r``, the result of a one-operand op on ``x`` (native ``d``) on ``p``:
    ``rewrap(r, p, [x])``, with its two common NumPy cases written out (no memory-root walk):
    a new buffer is charged; a view of ``x``'s own buffer (``reshape``, ``x.T``, ``x[0]``) is
    charged nothing and keeps the owner of that buffer alive."""
    if type(r) is not _ndarray and p.numpy_roots and isinstance(r, np.generic):
        r = p.backend._coerce(r)  # a 0-d reduction's NumPy scalar: what adopt does first
    if type(r) is _ndarray and p.numpy_fast and type(d) is _ndarray and d.base is None:
        b = r.base
        if b is None and r is not d:
            return _fresh(r, p)
        if b is d:
            owner = x._base
            return _view(r, p, x if owner is None else owner)
    return rewrap(r, p, [x])


def _call(name: str, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None) -> Any:
    """Generic dispatch: find the tensors, check one device, run natively or fall back.

    The common case (no autograd recording, every Tensor argument on the first one's placement,
    no Tensor inside a list or tuple argument, a native op) is written out flat here: every call
    or attribute load is paid by ``nx.sum(x, axis=0)`` / ``nx.where(c, a, b)`` on every call
    (benchmarks/dispatch.py). Anything else goes to ``_call_general``, which gives the same
    results and errors.
    """
    if record is None and args:
        x = args[0]
        if type(x) is Tensor:
            p = x._p
            fn = p.ops.get(name)
            if fn is not None:
                if kwargs:
                    for v in kwargs.values():
                        if type(v) not in _PLAIN_TYPES and not _plain(v):
                            return _call_general(name, args, kwargs)
                n_args = len(args)
                if n_args == 1 or (n_args == 2 and type(args[1]) is not Tensor and _plain(args[1])):
                    # One Tensor operand (most functions; reshape's shape, x.T's axes beside it).
                    d = x._data
                    try:
                        if n_args == 1:
                            r = fn(d, **kwargs) if kwargs else fn(d)
                        else:
                            r = fn(d, args[1], **kwargs) if kwargs else fn(d, args[1])
                    except NotImplementedError:
                        # As in _call_general: in the table, not for these arguments: the fallback policy decides.
                        return _call_general(name, args, kwargs, native=False)
                    except Exception as exc:  # noqa: BLE001 - raise_op_error re-raises it typed, naming the device, with this as the cause
                        raise_op_error(name, p, [x], exc)
                    return _own1(r, x, d, p)
                # Several operands (where, take, vecdot ...): the natives when every Tensor is on
                # p itself and no list or tuple holds one; otherwise the general path decides.
                nargs = []
                for a in args:
                    if type(a) is Tensor:
                        if a._p is not p:
                            return _call_general(name, args, kwargs)
                        nargs.append(a._data)
                    elif type(a) in _PLAIN_TYPES or _plain(a):
                        nargs.append(a)
                    else:
                        return _call_general(name, args, kwargs)
                try:
                    r = fn(*nargs, **kwargs) if kwargs else fn(*nargs)
                except NotImplementedError:
                    return _call_general(name, args, kwargs, native=False)
                except Exception as exc:  # noqa: BLE001 - raise_op_error re-raises it typed, naming the device, with this as the cause
                    raise_op_error(name, p, _tensors_in(args), exc)
                # A NumPy result owning a new buffer is charged here: base-less, and none of the
                # Tensor operands' buffers, which own their memory (adopt's view test for them).
                # Anything else (a view, an operand that is a view itself) goes to rewrap.
                if type(r) is _ndarray and p.numpy_fast and r.base is None:
                    for a in args:
                        if type(a) is Tensor:
                            d = a._data
                            if r is d or type(d) is not _ndarray or d.base is not None:
                                return rewrap(r, p, _tensors_in(args))
                    return _fresh(r, p)
                return rewrap(r, p, _tensors_in(args))
    return _call_general(name, args, kwargs)


def _call1(name: str, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None) -> Any:
    """``_call`` for the functions whose only positional parameter is the tensor ``x``
    (reductions, sort, argmax, clip ...; ``args`` is ``(x,)``): its one-operand case with the
    checks it needs and nothing else, and a fresh NumPy result wrapped inline (as in
    ``_make_unary``); every other case is ``_call``'s, with the same results and errors."""
    x = args[0]
    if record is None and type(x) is Tensor:
        p = x._p
        fn = p.ops.get(name)
        if fn is not None:
            if kwargs:
                for v in kwargs.values():
                    if type(v) not in _PLAIN_TYPES and not _plain(v):
                        return _call_general(name, args, kwargs)
            d = x._data
            try:
                r = fn(d, **kwargs) if kwargs else fn(d)
            except NotImplementedError:
                return _call_general(name, args, kwargs, native=False)
            except Exception as exc:  # noqa: BLE001 - raise_op_error re-raises it typed, naming the device, with this as the cause
                raise_op_error(name, p, [x], exc)
            if type(r) is _ndarray and p.numpy_fast and r.base is None and r is not d and type(d) is _ndarray and d.base is None:
                return _fresh(r, p)
            return _own1(r, x, d, p)
    return _call(name, args, kwargs)


def _tensors_in(args: tuple[Any, ...]) -> list[Tensor]:
    out: list[Tensor] = []
    collect_tensors(args, out)
    return out


def _call_general(name: str, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None, native: bool = True) -> Any:
    """Every case of ``_call``; ``native=False`` skips the op table (the native op already
    raised NotImplementedError), going straight to the fallback policy."""
    kwargs = kwargs or {}
    tensors: list[Tensor] = []
    collect_tensors(args, tensors)
    collect_tensors(tuple(kwargs.values()), tensors)
    if not tensors:
        raise TypeError(f"{name}: expected at least one neurenix Tensor argument; create one with nx.asarray(...)")
    p = check_same_device(name, tensors)._p
    fn = p.ops.get(name) if native else None
    if fn is None:
        out = _run_fallback(name, p, args, kwargs, tensors)
        return out if record is None else record(name, args, kwargs, out)
    nargs = tuple(_unwrap(a) for a in args)
    nkw = {k: _unwrap(v) for k, v in kwargs.items()}
    try:
        out = rewrap(fn(*nargs, **nkw), p, tensors)
    except NotImplementedError:
        # The op is in the table but the library lacks it for these arguments (array-api-compat
        # raises this, e.g. unique_all on torch): that is "not native", so the fallback policy decides.
        out = _run_fallback(name, p, args, kwargs, tensors)
    except Exception as exc:  # noqa: BLE001 - raise_op_error re-raises it typed, naming the device, with this as the cause
        raise_op_error(name, p, tensors, exc)
    return out if record is None else record(name, args, kwargs, out)



def _call_with_dtype(name: str, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None) -> Any:
    """``_call`` for ops with a ``dtype=`` keyword (sum, prod, cumulative_*, linalg.trace): the
    backend's native op gets its own dtype object (torch needs a torch.dtype), a host fallback
    gets the neurenix dtype. The generated function passes ``dtype`` only when it is given."""
    if kwargs and "dtype" in kwargs and type(args[0]) is Tensor:
        dt = as_dtype(kwargs["dtype"])
        be = args[0]._p.backend
        kwargs["dtype"] = be._native_dtype(dt) if name in be.ops else dt
    return _call(name, args, kwargs)

#: Index key types NumPy takes as they are (basic indexing; no Tensor to unwrap).
_BASIC_KEYS = frozenset({int, slice, type(None), type(Ellipsis)})


def _basic(key: tuple[Any, ...]) -> bool:
    """True for a tuple key of basic indices only (``x[:, 1]``, ``x[0, ..., None]``)."""
    for k in key:
        if type(k) not in _BASIC_KEYS:
            return False
    return True


def _index_key(key: Any, p: Placement) -> Any:
    if type(key) is Tensor:
        q = key._p
        if q is not p and q.device != p.device:
            raise mismatch("indexing", p.device, q.device)
        return key._data
    if isinstance(key, tuple):
        return tuple(_index_key(k, p) for k in key)
    return key


# --------------------------------------------------------------------- host fallbacks and assignment
def _host(value: Any) -> Any:
    """Operands with every Tensor replaced by a host copy (tuples and lists walked; named tuples kept)."""
    if type(value) is Tensor:
        return value._p.backend._to_host(value._data)
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(_host(v) for v in value)
    return value


def _host_key(key: Any) -> Any:
    if type(key) is Tensor:
        return key.numpy()
    return tuple(_host_key(k) for k in key) if isinstance(key, tuple) else key


def _run_fallback(name: str, p: Placement, args: tuple[Any, ...], kwargs: dict[str, Any], tensors: list[Tensor]) -> Any:
    """``name`` on the host CPU under the fallback policy; the result comes back on ``p``'s device."""
    result, on_cpu = run_on_host(name, p, tuple(_host(a) for a in args), {k: _host(v) for k, v in kwargs.items()}, tensors)
    return rewrap(result, p, tensors if on_cpu else ())


def _setitem(t: Tensor, key: Any, value: Any) -> None:
    p = t._p
    if record is not None:  # autograd is recording: writing into a taped tensor is refused
        autograd.check_inplace(t, value)
    if type(value) is Tensor:
        q = value._p
        if q is not p and q.device != p.device:
            raise mismatch("__setitem__", p.device, q.device)
        value = value._data
    elif isinstance(value, np.ndarray):
        raise TypeError(f"__setitem__ on {p.device}: the value must be a Tensor on {p.device} or a Python scalar; convert with nx.asarray(value, device='{p.device}')")
    t._data = set_native(t._data, p, key, value, [t])


# --------------------------------------------------------------------- construction
def asarray(obj: Any, /, *, dtype: Any = None, device: DeviceLike | None = None, copy: bool | None = None) -> Tensor:
    """A tensor from Python data, a NumPy array, a Tensor, or anything with ``__dlpack__``.

    ``copy=False`` shares memory (a NumPy array or DLPack producer on a host-memory device, or a
    Tensor already on ``device`` with ``dtype``) or raises TransferError; it never copies silently.
    The Tensor constructor itself (``nx.Tensor(data)``), hence defined beside the class.
    """
    if isinstance(obj, Tensor):
        return _from_tensor(obj, dtype, device, copy)
    if copy is False or (hasattr(obj, "__dlpack__") and not isinstance(obj, (np.ndarray, np.generic))):
        if not hasattr(obj, "__dlpack__"):
            raise TransferError(f"asarray(copy=False) needs a NumPy array, a Tensor or a DLPack producer to share memory with, got {type(obj).__name__}")
        out = from_dlpack(obj, device=device, copy=copy)
        return out if dtype is None else _from_tensor(out, dtype, None, copy)
    p = placement_for(device)
    return adopt(host_to_native(host_default(np.asarray(obj), dtype, obj), p), p)


def _from_tensor(obj: Tensor, dtype: Any, device: DeviceLike | None, copy: bool | None) -> Tensor:
    moved = device is not None and as_device(device) != obj.device
    if moved and copy is False:
        raise TransferError(f"asarray(copy=False) cannot share memory between {obj.device} and {device}; use .to({str(device)!r})")
    out = obj.to(device) if moved else obj  # type: ignore[arg-type]
    if dtype is not None and as_dtype(dtype) != out.dtype:
        if copy is False:
            raise TransferError(f"asarray(copy=False) cannot change dtype {out.dtype} to {as_dtype(dtype)} without a copy")
        check_dtype(out._p, as_dtype(dtype))
        return cast(out, as_dtype(dtype))
    if copy and out is obj:
        return obj.to(obj.device)
    return out


def cast(x: Tensor, dt: np.dtype[Any], copy: bool = True) -> Tensor:
    """``x`` cast to the neurenix dtype ``dt``, which its device supports (callers check), on its device."""
    p = x._p
    fn = p.ops.get("astype")
    if fn is None or record is not None:
        # The neurenix dtype for a host fallback; the general path records for autograd.
        target = dt if fn is None else p.backend._native_dtype(dt)
        return _call("astype", (x, target), {"copy": copy})  # type: ignore[no-any-return]
    # _call's one-operand case written out (nx.astype is on benchmarks/dispatch.py's list), with
    # the backend's own dtype object (a torch.dtype on cuda).
    target = p.backend._native_dtype(dt)
    d = x._data
    try:
        r = fn(d, target, copy=copy)
    except NotImplementedError:
        return _call_general("astype", (x, target), {"copy": copy}, native=False)  # type: ignore[no-any-return]
    except Exception as exc:  # noqa: BLE001 - raise_op_error re-raises it typed, naming the device, with this as the cause
        raise_op_error("astype", p, [x], exc)
    return _own1(r, x, d, p)  # type: ignore[no-any-return]  # a Tensor for one array


def from_dlpack(x: Any, /, *, device: DeviceLike | None = None, copy: bool | None = None) -> Tensor:
    """A tensor from any ``__dlpack__`` producer.

    Zero copy onto host-memory backends (cpu, npu, edgetpu, ort) and onto backends whose library
    imports DLPack natively; otherwise, unless ``copy=False``, through a host copy.
    """
    if not hasattr(x, "__dlpack__"):
        raise TransferError(f"from_dlpack needs an object with __dlpack__, got {type(x).__name__}")
    if device is None and isinstance(x, Tensor):
        device = x.device  # the standard: without device=, the result stays on x's device
    p = placement_for(device)
    if isinstance(x, Tensor):
        if x.device == p.device and copy is not True:
            return adopt(x._data, p, (x,))  # same device: a view sharing x's buffer
        x = x._data
    native = transfer.import_dlpack(x, p, copy)
    if native is None:
        if copy is False:
            raise TransferError(f"from_dlpack(copy=False): backend {p.backend.name} cannot share memory with {type(x).__name__}; allow a copy")
        native = transfer.host_from_dlpack(x, p)
    return adopt(native, p)


# --------------------------------------------------------------------- autograd hook
# Reverse-mode autograd (neurenix_core/autograd) records the ops above on a tape. It installs
# itself here when it is imported; this module never imports it (no cycle):
#
# ``record(op, args, kwargs, result) -> result`` is set only while grad mode is on *and* some
# tensor requires grad (autograd/tape.py keeps the count). Otherwise it is None, and an op pays
# one global load and compare for it (benchmarks/dispatch.py measures the hot path).
record: Callable[[str, tuple[Any, ...], dict[str, Any] | None, Any], Any] | None = None
#: The engine behind Tensor.requires_grad / .grad / .backward() / .detach() (autograd/engine.py);
#: until it is loaded, the stand-in that loads it on first use (autograd/on_demand.py, autograd_slot.py).
autograd: Any = _stand_in()
