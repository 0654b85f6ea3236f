"""The array-API operations, each dispatched to the backend of its tensor arguments.

Functions are generated from the standard's name lists: one generic dispatcher per signature
shape, so every backend gets the same checks and the same error formats.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from neurenix_core.backend import ARRAY_API_FUNCTIONS
from neurenix_core.tensor import Tensor, _binary, _call

__all__: list[str] = []

_BINARY = (
    "add", "atan2", "bitwise_and", "bitwise_left_shift", "bitwise_or", "bitwise_right_shift",
    "bitwise_xor", "copysign", "divide", "equal", "floor_divide", "greater", "greater_equal",
    "hypot", "less", "less_equal", "logaddexp", "logical_and", "logical_or", "logical_xor",
    "maximum", "minimum", "multiply", "nextafter", "not_equal", "pow", "remainder", "subtract",
)
# Creation functions live in creation.py (they need a device, not a tensor).
_CREATION = {
    "arange", "asarray", "empty", "empty_like", "eye", "full", "full_like", "linspace",
    "ones", "ones_like", "zeros", "zeros_like", "from_dlpack",
}


def _make_binary(name: str) -> Callable[..., Tensor]:
    def op(x1: Any, x2: Any, /) -> Tensor:
        return _binary(name, x1, x2)

    return op


def _make_generic(name: str) -> Callable[..., Any]:
    def op(*args: Any, **kwargs: Any) -> Any:
        return _call(name, args, kwargs)

    return op


def _export(name: str, fn: Callable[..., Any], qualname: str | None = None) -> None:
    fn.__name__ = name.rsplit(".", 1)[-1]
    fn.__qualname__ = fn.__name__
    fn.__doc__ = f"Array API ``{qualname or name}``, run by the backend of the argument tensors."
    globals()[fn.__name__] = fn
    __all__.append(fn.__name__)


for _name in ARRAY_API_FUNCTIONS:
    if _name in _CREATION:
        continue
    _export(_name, _make_binary(_name) if _name in _BINARY else _make_generic(_name))


def astype(x: Tensor, dtype: Any, /, *, copy: bool = True, device: Any = None) -> Tensor:
    """Cast ``x`` to ``dtype`` on its device (then move it when ``device`` is given)."""
    from neurenix_core.dtypes import as_dtype
    from neurenix_core.errors import UnsupportedDTypeError

    dt = as_dtype(dtype)
    if not x._backend.supports_dtype(dt):
        raise UnsupportedDTypeError(f"{x.device} (backend {x._backend.name}) does not support dtype {dt}; pick another dtype or move to 'cpu' first")
    out = _call("astype", (x, x._backend._native_dtype(dt)), {"copy": copy})
    return out if device is None else out.to(device)


def make_linalg(name: str) -> Callable[..., Any]:
    fn = _make_generic(f"linalg.{name}")
    fn.__name__ = name
    fn.__doc__ = f"Array API ``linalg.{name}``, run by the backend of the argument tensors."
    return fn
