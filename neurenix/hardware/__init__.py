"""``neurenix.hardware``: Tensor Cores names (``is_tensor_cores_available``, ``TensorCoresBackend``)
from the neurenix-cuda-tc plugin, and the ``tpu``, ``npu`` and ``edgetpu`` submodules."""

from __future__ import annotations

import importlib
from typing import Any

from neurenix._exports import names, resolve

_SUBMODULES = ("tpu", "npu", "edgetpu", "tensor_cores")


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name.startswith("__"):
        raise AttributeError(name)
    return resolve(__name__, name)


def __dir__() -> list[str]:
    return sorted(set(names(__name__)) | set(_SUBMODULES))
