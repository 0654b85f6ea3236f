"""neurenix-tpu: Cloud TPUs for neurenix through JAX/PJRT, with whole-model fusion by XLA.

Importing this package imports nothing heavy; JAX starts when a ``tpu`` device is first used.
The seed-style API lives in :mod:`neurenix_tpu.api` (also served as ``neurenix.hardware.tpu``).
"""

from __future__ import annotations

__version__ = "0.1.0"
