"""The built-in CPU backend's ``Backend``: NumPy arrays on the host, device ``cpu:0``.

Apart from its hooks (cpu.py, the entry point module imported at discovery), so that discovery
loads neither this class nor the backend base classes (``plugins.backend``, ``plugins.memory``):
they load when the cpu backend starts, on the first tensor (issue 43).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from neurenix_core.errors import UnsupportedDTypeError
from neurenix_core.plugins.backend import ArrayNamespaceBackend
from neurenix_core.tensor.dtypes import DTYPE_NAMES, PLAIN_DTYPES

__all__ = ["CPUBackend"]


class CPUBackend(ArrayNamespaceBackend):
    """NumPy arrays on the host; one device, ``cpu:0``. Native storage is ``numpy.ndarray``."""

    def __init__(self) -> None:
        super().__init__(np, device_type="cpu", device_count=1)
        from neurenix_core.backends.cpu_nn import OPS as NN_OPS

        # The nn.* extension ops (CONTRIBUTING.md); also the host fallback of every other backend.
        self.ops.update(NN_OPS)

    def _native_device(self, index: int) -> Any:
        return "cpu"

    def _from_host(self, array: np.ndarray, index: int) -> Any:
        # Our own copy: later writes to the caller's array must not change the tensor.
        return np.array(array, copy=True)

    def _native_dtype(self, dtype: np.dtype[Any]) -> Any:
        # The common dtypes by identity-backed set lookup first: str(dtype) costs about a
        # microsecond, and nx.astype asks on every call (benchmarks/dispatch.py).
        if dtype in PLAIN_DTYPES:
            return dtype
        if str(dtype) not in DTYPE_NAMES:
            raise UnsupportedDTypeError(f"cpu:0 (backend cpu) does not support dtype {dtype}")
        return dtype

    def device_info(self, index: int) -> dict[str, Any]:
        info = super().device_info(index)
        info.update({"name": "host CPU (NumPy)", "numpy": np.__version__, "cpu_count": os.cpu_count()})
        return info
