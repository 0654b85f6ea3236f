"""The model path below ``nn``: the graph IR, shape inference, the eager executor, ``nx.compile``,
quantization plans and the float64/integer reference interpreters.

``nn`` builds graphs from layers; plugins lower them. Empty on purpose: import the module you need.
"""

from typing import Any


def __getattr__(name: str) -> Any:
    # 0.1 had one module ``neurenix_core.graph``; ``neurenix_core.graph.Graph`` keeps working for
    # one release by forwarding to the IR module (attribute access only: nothing loads eagerly).
    import importlib

    return getattr(importlib.import_module("neurenix_core.graph.ir"), name)
