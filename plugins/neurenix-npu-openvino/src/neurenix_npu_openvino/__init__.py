"""neurenix-npu-openvino: the Intel NPU backend of neurenix, on OpenVINO.

Importing this package imports nothing heavy; OpenVINO loads when an npu device is first used.
The seed-style API (``NPUBackend``, ``is_npu_available``) lives in ``neurenix_npu_openvino.api``
and is served by the facade as ``neurenix.hardware.npu``.
"""

from __future__ import annotations

__version__ = "0.1.0"
