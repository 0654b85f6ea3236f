"""``neurenix.hardware.tpu``: Cloud TPU names (is_tpu_available, TPUBackend) from the neurenix-tpu plugin."""

from __future__ import annotations

from typing import Any

from neurenix._exports import names, resolve


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    return resolve(__name__, name)


def __dir__() -> list[str]:
    return names(__name__)
