"""The array API ``fft`` extension (2024.12).

The transforms and shifts run on the backend of their tensor argument through its op table
(``fft.fft`` ...: NumPy on the CPU, ``jax.numpy.fft`` on tpu, ``torch.fft`` through
array-api-compat on cuda); a backend without them (OpenVINO, LiteRT) runs them on the host under
the fallback policy. ``fftfreq`` and ``rfftfreq`` create a tensor on ``device`` like the other
creation functions: natively where the backend has them, else computed on the host and copied.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from neurenix_core.device import DeviceLike
from neurenix_core.errors import UnsupportedDTypeError
from neurenix_core.plugins.backend import FFT_FUNCTIONS
from neurenix_core.tensor.dtypes import as_dtype, isdtype
from neurenix_core.tensor.op_errors import raise_op_error
from neurenix_core.tensor.ops import make_dispatched
from neurenix_core.tensor.placement import check_dtype, placement_for
from neurenix_core.tensor.tensor import Tensor, adopt, asarray

__all__ = list(FFT_FUNCTIONS)

for _name in FFT_FUNCTIONS:
    if _name not in ("fftfreq", "rfftfreq"):
        globals()[_name] = make_dispatched(f"fft.{_name}")


def fftfreq(n: int, /, *, d: float = 1.0, dtype: Any = None, device: DeviceLike | None = None) -> Tensor:
    """Array API ``fft.fftfreq``: the sample frequencies of an ``n``-point DFT with spacing ``d``."""
    return _frequencies("fftfreq", n, d, dtype, device)


def rfftfreq(n: int, /, *, d: float = 1.0, dtype: Any = None, device: DeviceLike | None = None) -> Tensor:
    """Array API ``fft.rfftfreq``: the non-negative sample frequencies of an ``n``-point real DFT."""
    return _frequencies("rfftfreq", n, d, dtype, device)


def _frequencies(name: str, n: int, d: float, dtype: Any, device: DeviceLike | None) -> Tensor:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"fft.{name}: n must be a positive int, got {n!r}")
    # The standard's default is the default real floating-point dtype (float32 in neurenix).
    dt = np.dtype(np.float32) if dtype is None else as_dtype(dtype)
    if not isdtype(dt, "real floating"):
        raise UnsupportedDTypeError(f"fft.{name}: dtype must be a real floating-point dtype, got {dt}")
    p = placement_for(device)
    native = p.ops.get(f"fft.{name}")
    if native is None:
        host = getattr(np.fft, name)(int(n), d=d)
        return asarray(host.astype(dt), device=p.device)
    check_dtype(p, dt)
    be = p.backend
    try:
        result = native(int(n), d=d, dtype=be._native_dtype(dt), device=be._native_device(p.index))
    except Exception as exc:  # noqa: BLE001 - raise_op_error re-raises it typed, naming the device, with this as the cause
        raise_op_error(f"fft.{name}", p, [], exc)
    return adopt(result, p)
