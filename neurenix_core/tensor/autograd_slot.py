"""Where the autograd layer leaves tensor.py's engine stand-in before tensor.py is loaded.

tensor.py never imports the autograd engine (a higher layer); ``neurenix_core/__init__.py`` puts a
stand-in that loads it on first use (autograd/on_demand.py) in tensor.py's ``autograd``. Since
``import neurenix_core`` no longer loads tensor.py (it loads with the first tensor name, issue 43),
the stand-in waits here, and tensor.py takes it when it loads, whichever way it is first imported
(``nx.zeros``, ``neurenix_core.nn``, a plugin's ``contract.Tensor``).

Read and written through functions, imported as ``from neurenix_core.tensor.autograd_slot import``:
``from neurenix_core.tensor import autograd_slot`` would ask the package's ``__getattr__`` (which
forwards 0.1 names to tensor.py) first, loading tensor.py.
"""

from __future__ import annotations

from typing import Any

__all__ = ["leave_stand_in", "stand_in"]

_stand_in: Any = None


def leave_stand_in(value: Any) -> None:
    """Keep ``value`` for tensor.py's ``autograd`` (autograd/on_demand.py's ``install()``)."""
    global _stand_in
    _stand_in = value


def stand_in() -> Any:
    """The stand-in left by the autograd layer, or None when none was."""
    return _stand_in
