"""``neurenix.device``: ``Device`` and ``DeviceType``.

The module is also callable, so ``with nx.device("npu:0"):`` (neurenix_core's context manager)
keeps working after ``from neurenix.device import Device`` has made ``nx.device`` this module.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from neurenix_core.device import Device, DeviceLike, DeviceType

__all__ = ["Device", "DeviceLike", "DeviceType"]


class _CallableModule(types.ModuleType):
    def __call__(self, value: Any) -> Any:
        from neurenix_core.plugins.state import device

        return device(value)


sys.modules[__name__].__class__ = _CallableModule
