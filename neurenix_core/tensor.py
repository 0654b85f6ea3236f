"""Tensor: a native array of one backend, on one device, with the array-API methods.

Dispatch is resolved once per tensor: a tensor keeps its backend object and device, and an op
is one dict lookup in ``backend.ops`` (never a pluggy call). Devices are checked once, here, with
one message format.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from neurenix_core import _state
from neurenix_core.device import Device, DeviceLike, as_device
from neurenix_core.errors import DeviceMismatchError, TransferError

if TYPE_CHECKING:
    from neurenix_core.backend import Backend

__all__ = ["Tensor", "wrap", "check_same_device", "mismatch"]

_new = object.__new__
_SCALARS = (bool, int, float, complex)


class Tensor:
    """An array on a device. ``nx.Tensor(data, dtype=None, device=None)`` is ``nx.asarray``."""

    __slots__ = ("_data", "_backend", "_device", "_index", "_nbytes", "__weakref__")

    _data: Any
    _backend: Backend
    _device: Device
    _index: int
    _nbytes: int

    def __new__(cls, data: Any, dtype: Any = None, device: DeviceLike | None = None) -> Tensor:
        from neurenix_core.creation import asarray

        return asarray(data, dtype=dtype, device=device)

    def __del__(self) -> None:
        # Release exactly what wrap() charged; getattr guards half-built objects.
        backend = getattr(self, "_backend", None)
        if backend is not None:
            backend.memory.release(self._index, self._nbytes)

    # ----------------------------------------------------------------- attributes
    @property
    def shape(self) -> tuple[int, ...]:
        return self._backend._shape_of(self._data)

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._backend._dtype_of(self._data)

    @property
    def device(self) -> Device:
        return self._device

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self._nbytes

    @property
    def T(self) -> Tensor:  # noqa: N802 - array API name
        if self.ndim != 2:
            raise ValueError(f"Tensor.T needs a 2-D tensor, got {self.ndim}-D; use matrix_transpose or permute_dims")
        return _call("permute_dims", (self, (1, 0)))

    @property
    def mT(self) -> Tensor:  # noqa: N802
        return _call("matrix_transpose", (self,))

    @property
    def native(self) -> Any:
        """The backend's own array (a NumPy array, a jax.Array, a torch.Tensor ...)."""
        return self._data

    # ----------------------------------------------------------------- transfers
    def to(self, device: DeviceLike) -> Tensor:
        """A copy of this tensor on ``device``; this tensor is untouched."""
        from neurenix_core.transfer import copy_to

        return copy_to(self, as_device(device))

    def to_device(self, device: DeviceLike, /, *, stream: Any = None) -> Tensor:
        if stream is not None:
            raise TransferError(f"{self._device}: streams are not supported by to_device; pass stream=None")
        return self.to(device)

    def numpy(self) -> np.ndarray:
        """A host NumPy copy of the data."""
        return self._backend._to_host(self._data)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        out = self.numpy()
        return out if dtype is None else out.astype(dtype, copy=False)

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None, copy: bool | None = None) -> Any:
        from neurenix_core.transfer import export_dlpack

        return export_dlpack(self, stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)

    def __dlpack_device__(self) -> tuple[int, int]:
        from neurenix_core.transfer import dlpack_device

        return dlpack_device(self)

    def __array_namespace__(self, *, api_version: str | None = None) -> Any:
        import neurenix_core

        if api_version not in (None, "2023.12", "2024.12"):
            raise ValueError(f"neurenix implements array API 2024.12, not {api_version}")
        return neurenix_core

    def item(self) -> Any:
        return self.numpy().item()

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def __repr__(self) -> str:
        body = np.array2string(self.numpy(), separator=", ", prefix="Tensor(")
        return f"Tensor({body}, dtype={self.dtype}, device='{self._device}')"

    def __str__(self) -> str:
        return str(self.numpy())

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __bool__(self) -> bool:
        return bool(self.numpy())

    def __float__(self) -> float:
        return float(self.numpy())

    def __int__(self) -> int:
        return int(self.numpy())

    def __index__(self) -> int:
        return self.numpy().__index__()

    def __complex__(self) -> complex:
        return complex(self.numpy())

    def __iter__(self) -> Any:
        return (self[i] for i in range(len(self)))

    # Hashing by identity would make tensors usable as dict keys with surprising equality.
    __hash__ = None  # type: ignore[assignment]

    # ----------------------------------------------------------------- indexing
    def __getitem__(self, key: Any) -> Tensor:
        native_key = _index_key(key, self)
        return wrap(self._data[native_key], self._backend, self._device, self._index)

    def __setitem__(self, key: Any, value: Any) -> None:
        from neurenix_core.indexing import setitem

        setitem(self, _index_key(key, self), value)

    # ----------------------------------------------------------------- operators
    def __add__(self, other: Any) -> Tensor:
        return _binary("add", self, other)

    def __radd__(self, other: Any) -> Tensor:
        return _binary("add", other, self)

    def __sub__(self, other: Any) -> Tensor:
        return _binary("subtract", self, other)

    def __rsub__(self, other: Any) -> Tensor:
        return _binary("subtract", other, self)

    def __mul__(self, other: Any) -> Tensor:
        return _binary("multiply", self, other)

    def __rmul__(self, other: Any) -> Tensor:
        return _binary("multiply", other, self)

    def __truediv__(self, other: Any) -> Tensor:
        return _binary("divide", self, other)

    def __rtruediv__(self, other: Any) -> Tensor:
        return _binary("divide", other, self)

    def __floordiv__(self, other: Any) -> Tensor:
        return _binary("floor_divide", self, other)

    def __rfloordiv__(self, other: Any) -> Tensor:
        return _binary("floor_divide", other, self)

    def __mod__(self, other: Any) -> Tensor:
        return _binary("remainder", self, other)

    def __rmod__(self, other: Any) -> Tensor:
        return _binary("remainder", other, self)

    def __pow__(self, other: Any) -> Tensor:
        return _binary("pow", self, other)

    def __rpow__(self, other: Any) -> Tensor:
        return _binary("pow", other, self)

    def __matmul__(self, other: Any) -> Tensor:
        return _binary("matmul", self, other)

    def __rmatmul__(self, other: Any) -> Tensor:
        return _binary("matmul", other, self)

    def __and__(self, other: Any) -> Tensor:
        return _binary("bitwise_and", self, other)

    def __rand__(self, other: Any) -> Tensor:
        return _binary("bitwise_and", other, self)

    def __or__(self, other: Any) -> Tensor:
        return _binary("bitwise_or", self, other)

    def __ror__(self, other: Any) -> Tensor:
        return _binary("bitwise_or", other, self)

    def __xor__(self, other: Any) -> Tensor:
        return _binary("bitwise_xor", self, other)

    def __rxor__(self, other: Any) -> Tensor:
        return _binary("bitwise_xor", other, self)

    def __lshift__(self, other: Any) -> Tensor:
        return _binary("bitwise_left_shift", self, other)

    def __rlshift__(self, other: Any) -> Tensor:
        return _binary("bitwise_left_shift", other, self)

    def __rshift__(self, other: Any) -> Tensor:
        return _binary("bitwise_right_shift", self, other)

    def __rrshift__(self, other: Any) -> Tensor:
        return _binary("bitwise_right_shift", other, self)

    def __lt__(self, other: Any) -> Tensor:
        return _binary("less", self, other)

    def __le__(self, other: Any) -> Tensor:
        return _binary("less_equal", self, other)

    def __gt__(self, other: Any) -> Tensor:
        return _binary("greater", self, other)

    def __ge__(self, other: Any) -> Tensor:
        return _binary("greater_equal", self, other)

    def __eq__(self, other: Any) -> Tensor:  # type: ignore[override]
        return _binary("equal", self, other)

    def __ne__(self, other: Any) -> Tensor:  # type: ignore[override]
        return _binary("not_equal", self, other)

    def __neg__(self) -> Tensor:
        return _call("negative", (self,))

    def __pos__(self) -> Tensor:
        return _call("positive", (self,))

    def __abs__(self) -> Tensor:
        return _call("abs", (self,))

    def __invert__(self) -> Tensor:
        return _call("bitwise_invert", (self,))


# --------------------------------------------------------------------- dispatch core
def wrap(native: Any, backend: Backend, device: Device, index: int) -> Tensor:
    """Make a Tensor around a native array, charging its bytes to the device."""
    nbytes = backend._nbytes_of(native)
    backend.memory.charge(index, nbytes)
    t = _new(Tensor)
    t._data = native
    t._backend = backend
    t._device = device
    t._index = index
    t._nbytes = nbytes
    return t


def mismatch(op: str, a: Device, b: Device) -> DeviceMismatchError:
    return DeviceMismatchError(
        f"{op}: operands are on different devices ({a} and {b}); neurenix never moves data silently. "
        f"Move one explicitly, e.g. x.to('{a}'), before combining them."
    )


def check_same_device(op: str, tensors: list[Tensor]) -> Tensor:
    first = tensors[0]
    for t in tensors[1:]:
        if t._device is not first._device and t._device != first._device:
            raise mismatch(op, first._device, t._device)
    return first


def _binary(name: str, x1: Any, x2: Any) -> Tensor:
    # The hot path of a + b: two type checks, one device check, one dict lookup.
    if type(x1) is Tensor:
        t = x1
        if type(x2) is Tensor:
            if x2._device is not t._device and x2._device != t._device:
                raise mismatch(name, t._device, x2._device)
            d2 = x2._data
        elif isinstance(x2, _SCALARS):
            d2 = x2
        else:
            return _call(name, (x1, x2))
        d1 = t._data
    elif type(x2) is Tensor and isinstance(x1, _SCALARS):
        t, d1, d2 = x2, x1, x2._data
    else:
        return _call(name, (x1, x2))
    be = t._backend
    fn = be.ops.get(name)
    if fn is None:
        return _call(name, (x1, x2))
    return wrap(fn(d1, d2), be, t._device, t._index)


def _collect(value: Any, out: list[Tensor]) -> None:
    if type(value) is Tensor:
        out.append(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _collect(v, out)


def _unwrap(value: Any) -> Any:
    if type(value) is Tensor:
        return value._data
    if isinstance(value, (list, tuple)):
        return type(value)(_unwrap(v) for v in value) if not hasattr(value, "_fields") else value
    return value


def _rewrap(result: Any, be: Backend, device: Device, index: int) -> Any:
    if isinstance(result, tuple):
        items = [_rewrap(r, be, device, index) for r in result]
        return type(result)(*items) if hasattr(result, "_fields") else tuple(items)
    if isinstance(result, list):
        return [_rewrap(r, be, device, index) for r in result]
    if hasattr(result, "shape") and hasattr(result, "dtype"):
        return wrap(result, be, device, index)
    return result


def _call(name: str, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None) -> Any:
    """Generic dispatch: find the tensors, check one device, run natively or fall back."""
    kwargs = kwargs or {}
    tensors: list[Tensor] = []
    _collect(args, tensors)
    _collect(tuple(kwargs.values()), tensors)
    if not tensors:
        from neurenix_core.errors import NeurenixError

        raise TypeError(f"{name}: expected at least one neurenix Tensor argument") from NeurenixError
    t = check_same_device(name, tensors)
    be = t._backend
    fn = be.ops.get(name)
    if fn is None:
        from neurenix_core.transfer import run_fallback

        return run_fallback(name, be, t._device, t._index, args, kwargs)
    nargs = tuple(_unwrap(a) for a in args)
    nkw = {k: _unwrap(v) for k, v in kwargs.items()}
    return _rewrap(fn(*nargs, **nkw), be, t._device, t._index)


def _index_key(key: Any, t: Tensor) -> Any:
    if type(key) is Tensor:
        if key._device != t._device:
            raise mismatch("indexing", t._device, key._device)
        return key._data
    if isinstance(key, tuple):
        return tuple(_index_key(k, t) for k in key)
    return key


def default_backend(device: DeviceLike | None) -> tuple[Backend, Device, int]:
    """Resolve ``device`` (or the default) to (backend, device, index) for creation functions."""
    reg = _state.registry()
    if device is None:
        dev = _state.default_device()
        auto = _state.is_auto()
    else:
        dev, auto = as_device(device), False
    be = reg.backend_for(dev, auto=auto)
    if auto and be.device_type != dev.type:  # the automatic choice moved after a failure
        dev = reg.auto_default
    return be, dev, dev.index
