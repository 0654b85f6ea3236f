"""The autograd engine loads when a tensor first needs it, not at ``import neurenix_core``.

``Tensor.requires_grad`` / ``.grad`` / ``.backward()`` / ``.detach()`` delegate to the module
global ``autograd`` of tensor.py, which the engine sets to itself when it is imported. Until then
that global is this stand-in: the first attribute read imports the engine (which replaces the
stand-in) and answers from it, so the tensor layer behaves exactly as if the engine had been
loaded at import. Nothing records on a tape before a tensor requires grad, which needs the engine,
so deferring it changes no result; it saves about 1 ms of import. ``import neurenix_core`` loads
tensor.py on first use too: the stand-in waits for it in ``neurenix_core.tensor.autograd_slot``.
"""

from __future__ import annotations

import sys
from typing import Any

from neurenix_core.tensor.autograd_slot import leave_stand_in

__all__ = ["install"]


class _EngineOnFirstUse:
    """Stands in for ``neurenix_core.autograd.engine`` in tensor.py until it is loaded."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        from neurenix_core.autograd import engine  # sets tensor.autograd to itself

        return getattr(engine, name)

    def __repr__(self) -> str:
        return "<neurenix autograd engine, loaded on first use>"


def install() -> None:
    """Put the stand-in in place unless the engine is loaded already (``nx.rediscover``, reloads).

    ``import neurenix_core`` does not load tensor.py: the stand-in waits in autograd_slot.py, which
    tensor.py reads when it loads; a tensor.py already loaded without an engine gets it here.
    """
    stand_in = _EngineOnFirstUse()
    leave_stand_in(stand_in)
    tensor = sys.modules.get("neurenix_core.tensor.tensor")
    if tensor is not None and vars(tensor).get("autograd") is None:
        vars(tensor)["autograd"] = stand_in
