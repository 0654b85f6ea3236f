"""PyTorch's process-global Tensor Core switches, changed on request and restored on release.

``torch.backends.cuda.matmul.allow_tf32``, ``torch.backends.cudnn.allow_tf32`` and
``torch.backends.cudnn.benchmark`` belong to the whole process: a backend that flips them must
put them back, or unrelated code in the same process silently loses fp32 accuracy.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["SWITCHES", "SwitchState", "read_switch"]


def _targets() -> dict[str, tuple[Any, str]]:
    import torch

    return {
        "torch.backends.cuda.matmul.allow_tf32": (torch.backends.cuda.matmul, "allow_tf32"),
        "torch.backends.cudnn.allow_tf32": (torch.backends.cudnn, "allow_tf32"),
        "torch.backends.cudnn.benchmark": (torch.backends.cudnn, "benchmark"),
    }


SWITCHES: Final = ("torch.backends.cuda.matmul.allow_tf32", "torch.backends.cudnn.allow_tf32", "torch.backends.cudnn.benchmark")


def read_switch(name: str) -> bool:
    obj, attr = _targets()[name]
    return bool(getattr(obj, attr))


class SwitchState:
    """Remembers the first value seen of each switch it changes; :meth:`restore` puts them back."""

    def __init__(self) -> None:
        self._saved: dict[str, bool] = {}

    def set(self, name: str, value: bool) -> tuple[bool, bool]:
        """Set ``name`` to ``value``; return (old, new). The first old value is what restore() brings back."""
        obj, attr = _targets()[name]
        old = bool(getattr(obj, attr))
        self._saved.setdefault(name, old)
        setattr(obj, attr, bool(value))
        return old, bool(value)

    @property
    def changed(self) -> dict[str, bool]:
        """Switches this state has touched, with the values they had before."""
        return dict(self._saved)

    def restore(self) -> dict[str, bool]:
        """Put every touched switch back; return what was restored."""
        targets = _targets() if self._saved else {}
        for name, value in self._saved.items():
            obj, attr = targets[name]
            setattr(obj, attr, value)
        restored, self._saved = self._saved, {}
        return restored
