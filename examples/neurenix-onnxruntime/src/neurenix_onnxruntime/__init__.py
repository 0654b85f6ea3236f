"""neurenix-onnxruntime: a third-party neurenix backend on ONNX Runtime.

Importing this package imports nothing heavy: ONNX Runtime and onnx load in the backend factory
(``backend.py``) the first time an ``ort`` device is used. The public seed-style API is in
:mod:`neurenix_onnxruntime.api` (also served as ``neurenix.hardware.ort``).
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__"]
