"""Warnings point at the user's line, not at the neurenix frame that noticed the problem.

A fixed ``stacklevel`` is right for one call path only: a fallback is recorded under an operator
(``x.sort()``), a generated namespace function (``nx.sort(x)``), the facade (``neurenix.*``) or a
plugin's kernel, each a different depth below the user. :func:`user_stacklevel` walks the stack
instead and counts the frames of neurenix's own packages (the core, the facade, the plugins,
whose modules all start with ``neurenix``), so the warning names the first frame outside them.
PyTorch's frames are skipped too: they lie between the user and neurenix when PyTorch calls it on
the user's behalf (``torch.compile(backend="neurenix")``'s dynamo and ``nn.Module.__call__``,
``torch.from_dlpack`` of a Tensor), and a warning there named ``torch/_dynamo/eval_frame.py``.
"""

from __future__ import annotations

import sys
from types import FrameType

__all__ = ["user_stacklevel"]


def _ours(frame: FrameType) -> bool:
    # Module names rather than file paths: editable installs, wheels and zipapps all agree on them.
    name = frame.f_globals.get("__name__", "")
    return isinstance(name, str) and (name.startswith(("neurenix", "torch.")) or name == "torch")


def _importlib_internal(frame: FrameType) -> bool:
    # warnings.warn does not count importlib's bootstrap frames towards stacklevel (a warning
    # raised while a module is imported lands on the import statement), so neither may we.
    filename = frame.f_code.co_filename
    return "importlib" in filename and "_bootstrap" in filename


def user_stacklevel() -> int:
    """The ``stacklevel`` for a ``warnings.warn`` made by the caller of this function that
    attributes the warning to the first frame outside neurenix and PyTorch (the outermost frame
    if all are)."""
    frame, level = sys._getframe(1), 1  # the function that warns is stacklevel 1
    while True:
        outer = frame.f_back
        while outer is not None and _importlib_internal(outer):
            outer = outer.f_back
        if outer is None:
            return level
        frame, level = outer, level + 1
        if not _ours(frame):
            return level
