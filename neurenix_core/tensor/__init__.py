"""The tensor layer: ``Tensor``, creation, the array-API functions, indexing, transfers, dtypes,
the fallback policy and the namespace inspection object.

Built on ``neurenix_core.plugins`` (a tensor's backend comes from the registry); knows nothing of
models. Its ``__init__`` stays empty so that importing one module does not import the others.
"""

from typing import Any


def __getattr__(name: str) -> Any:
    # 0.1 had one module ``neurenix_core.tensor``; ``from neurenix_core.tensor import Tensor`` keeps
    # working for one release by forwarding to ``neurenix_core.tensor.tensor``.
    import importlib

    return getattr(importlib.import_module("neurenix_core.tensor.tensor"), name)
