"""The array-API operations, each dispatched to the backend of its tensor arguments.

Functions are generated from the standard's signature table (signatures.py): each has the
standard's parameters and hands them to one generic dispatcher (``_call``), so every backend gets
the same checks and the same error formats. The main namespace's are written out once by
scripts/gen_ops.py (``_generated_ops.py``: plain compiled code at import, no ``exec``); ``linalg``
and ``fft`` make theirs on first use (``make_dispatched``). The binary elementwise functions share
the operators' flat hot path (tensor.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from neurenix_core.device import DeviceLike
from neurenix_core.errors import UnsupportedDTypeError
from neurenix_core.plugins.backend import ARRAY_API_FUNCTIONS
from neurenix_core.tensor import _generated_ops
from neurenix_core.tensor.dtypes import as_dtype
from neurenix_core.tensor.op_names import SPECIAL
from neurenix_core.tensor.tensor import BINARY_FUNCTIONS, Tensor, _call, _call_with_dtype, cast

if TYPE_CHECKING:
    # The loop below binds these at run time, invisibly to a type checker: it reads the same
    # functions, typed, from the generated module's stub (_generated_ops.pyi).
    from neurenix_core.tensor._generated_ops import *

__all__: list[str] = []

# Creation functions live in creation.py (they need a device, not a tensor); the rest are
# written out below because they need more than pass-through (the list: op_names.py).
_SPECIAL = SPECIAL


def make_dispatched(qualname: str) -> Callable[..., Any]:
    """The namespace function ``qualname`` (``"sum"``, ``"linalg.qr"``, ``"fft.rfft"``): the
    standard's signature, dispatched by ``_call`` to the backend of its tensor arguments."""
    # The table and its generator load with nx.linalg / nx.fft, not at import.
    from neurenix_core.tensor.signatures import GENERATED_DOC, make_function, takes

    doc = GENERATED_DOC.format(qualname)
    extension = qualname.split(".")[0] if "." in qualname else None
    module = f"neurenix_core.tensor.{extension}" if extension else __name__
    return make_function(qualname, _call_with_dtype if takes(qualname, "dtype") else _call, doc, module)


for _name in ARRAY_API_FUNCTIONS:
    if _name in _SPECIAL:
        continue
    # The binary functions are the operators' flat hot path; their signature is already (x1, x2, /).
    if _name in BINARY_FUNCTIONS:
        _fn = BINARY_FUNCTIONS[_name]
        _fn.__doc__ = f"Array API ``{_name}``, run by the backend of the argument tensors."
    else:
        _fn = getattr(_generated_ops, _name)
    _fn.__module__ = __name__  # exported from here (pickle looks the name up in __module__)
    globals()[_name] = _fn
    __all__.append(_name)


def _sequence(name: str, arrays: Any) -> tuple[Any, ...]:
    # Accept any iterable of tensors (a generator too); the standard says tuple or list.
    items = tuple(arrays)
    if not items:
        raise ValueError(f"{name}: needs at least one tensor")
    for a in items:
        if type(a) is not Tensor:
            raise TypeError(f"{name}: every element must be a neurenix Tensor, got {type(a).__name__}; convert with nx.asarray(...)")
    return items


def concat(arrays: Any, /, *, axis: int | None = 0) -> Tensor:
    """Array API ``concat``: join tensors (all on one device) along an existing axis."""
    return _call("concat", (list(_sequence("concat", arrays)),), {"axis": axis})  # type: ignore[no-any-return]


def stack(arrays: Any, /, *, axis: int = 0) -> Tensor:
    """Array API ``stack``: join tensors (all on one device) along a new axis."""
    return _call("stack", (list(_sequence("stack", arrays)),), {"axis": axis})  # type: ignore[no-any-return]


def meshgrid(*arrays: Tensor, indexing: str = "xy") -> list[Tensor]:
    """Array API ``meshgrid``."""
    return list(_call("meshgrid", _sequence("meshgrid", arrays), {"indexing": indexing}))


def broadcast_arrays(*arrays: Tensor) -> list[Tensor]:
    """Array API ``broadcast_arrays`` (views of the inputs where the backend makes views)."""
    return list(_call("broadcast_arrays", _sequence("broadcast_arrays", arrays)))


def astype(x: Tensor, dtype: Any, /, *, copy: bool = True, device: DeviceLike | None = None) -> Tensor:
    """Cast ``x`` to ``dtype`` on its device; with ``device=`` the result is then copied there."""
    if type(x) is not Tensor:
        raise TypeError(f"astype: expected a neurenix Tensor, got {type(x).__name__}")
    dt = as_dtype(dtype)
    be = x._p.backend
    if not be.supports_dtype(dt):
        if copy is False and device is None and dt == x.dtype:
            # Nothing to convert (the standard returns x itself): the tensor holds a dtype its device
            # has no cast for, as a host fallback's result may (nx.fft.rfft on npu:0 is complex64);
            # refusing it broke every astype(x, x.dtype, copy=False) after one (found by tests/differential).
            return x
        raise UnsupportedDTypeError(
            f"{x.device} (backend {be.name}) does not support dtype {dt}; "
            f"supported: {', '.join(_supported(be))}. Pick one of those or move to 'cpu' first"
        )
    out = cast(x, dt, copy)
    return out if device is None else out.to(device)


def _supported(be: Any) -> list[str]:
    from neurenix_core.tensor.dtypes import dtype_table

    return [n for n, d in dtype_table().items() if be.supports_dtype(d)]


# A literal list: type checkers read ``__all__ += [...]`` (not a loop of appends).
__all__ += ["astype", "broadcast_arrays", "concat", "meshgrid", "stack"]
