"""neurenix backend for the Google Coral Edge TPU (LiteRT + libedgetpu) with an int8 TFLite writer.

Importing this package imports nothing heavy: LiteRT loads in the backend factory.
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__"]
