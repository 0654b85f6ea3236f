"""AcmeBackend: the template's runtime. Here NumPy stands in for the vendor runtime.

A real vendor replaces the namespace with their array library (or subclasses ``Backend`` and
fills ``ops`` with their kernels) and keeps the private surface: ``_from_host``, ``_to_host``,
``_dtype_of``, ``_native_dtype``, ``_native_device``. The core does the rest: device checks,
memory accounting (``backend.memory``), the fallback policy and error wrapping.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from neurenix_core.contract import ArrayNamespaceBackend
from neurenix_core.errors import UnsupportedDTypeError

__all__ = ["DTYPES", "AcmeBackend"]

DTYPES: frozenset[str] = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64"})


class AcmeBackend(ArrayNamespaceBackend):
    """Device type ``acme``; native storage ``numpy.ndarray`` (the emulation runs on the host)."""

    def __init__(self, *, device_count: int = 1, emulated: bool = True) -> None:
        super().__init__(np, device_type="acme", device_count=device_count, emulated=emulated)
        self.ops.update(_extension_ops())

    def _native_device(self, index: int) -> Any:
        return "cpu"  # NumPy's only device; a real runtime returns its device handle for ``index``

    def _from_host(self, array: np.ndarray, index: int) -> Any:
        return np.array(array, copy=True)  # a real copy: the tensor must not alias the caller's array

    def _native_dtype(self, dtype: np.dtype[Any]) -> Any:
        if str(dtype) not in DTYPES:
            raise UnsupportedDTypeError(
                f"acme (backend {self.name}) does not support dtype {dtype}; use one of {', '.join(sorted(DTYPES))} or move to 'cpu'"
            )
        return np.dtype(dtype)

    def device_info(self, index: int) -> dict[str, Any]:
        info = super().device_info(index)
        info.update({"name": "ACME accelerator" + (" (emulated with NumPy on the host CPU)" if self.emulated else ""), "numpy": np.__version__})
        return info


def _extension_ops() -> dict[str, Any]:
    """The nn.* extension ops. The emulation runs NumPy, so it uses the core's NumPy kernels;
    a real vendor maps these names to their own kernels."""
    from neurenix_core.contract import CPUBackend

    return {name: fn for name, fn in CPUBackend().ops.items() if name.startswith("nn.")}
