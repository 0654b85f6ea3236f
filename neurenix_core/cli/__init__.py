"""The ``neurenix`` command (``neurenix doctor``, ``neurenix devices`` and plugin subcommands)."""

from typing import Any


def __getattr__(name: str) -> Any:
    # Installs made from 0.1 metadata name ``neurenix_core.cli:main``.
    import importlib

    return getattr(importlib.import_module("neurenix_core.cli.main"), name)
