"""Plugin tests run alone or inside the whole suite: the suite's environment is set before
neurenix_core is imported (setdefault keeps what scripts/test.sh already set)."""

from __future__ import annotations

import os

os.environ.setdefault("NEURENIX_EMULATE", "cuda,tpu,npu,edgetpu,acme")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
