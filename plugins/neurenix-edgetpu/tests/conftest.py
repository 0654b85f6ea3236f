"""Emulation settings for the whole-suite process and for this folder alone (before any import)."""

from __future__ import annotations

import os
import sys

os.environ.setdefault("NEURENIX_EMULATE", "cuda,tpu,npu,edgetpu")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
if "edgetpu" not in os.environ["NEURENIX_EMULATE"].split(","):
    os.environ["NEURENIX_EMULATE"] += ",edgetpu"

# The helpers module sits next to this file; --import-mode=importlib does not put it on sys.path.
sys.path.insert(0, os.path.dirname(__file__))

import pytest


@pytest.fixture(scope="session")
def edgetpu():
    """The (emulated) edgetpu backend through the real registry."""
    import neurenix_core as nx

    return nx.backend("edgetpu:0")
