"""neurenix-acme: the smallest complete neurenix backend, to copy and rename."""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__"]
