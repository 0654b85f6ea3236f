"""The fallback policy: error | warn (once per op and backend) | allow; counted; same device.

The device under test comes from a real plugin distribution written to a temporary folder and
discovered through its entry point: the CPU backend minus two ops, as a second device type. The
policy is exercised through the core's real dispatch, without mocks.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from distributions import write_distribution

import neurenix_core as nx

PARTIAL_PLUGIN = """
from __future__ import annotations
from neurenix_core import hookimpl, Manifest, Capabilities, PriorityBand, ProbeResult
from neurenix_core.backends.cpu import CPUBackend
from neurenix_core.plugins.memory import MemoryTracker
from neurenix_core.device import DeviceType

class PartialBackend(CPUBackend):
    # NumPy storage, but sort and cumulative_sum are not native: they must fall back.
    def __init__(self):
        super().__init__()
        self.device_type = DeviceType("partial")
        self.memory = MemoryTracker("partial", 1)
        for name in ("sort", "cumulative_sum"):
            del self.ops[name]

@hookimpl
def neurenix_manifest():
    return Manifest(name="partial", distribution="neurenix-partial", version="0.1", api=">=1.0,<2",
                    device_types=("partial",), band=PriorityBand.CPU, priority=1,
                    capabilities=Capabilities(dtypes=("float32", "int64", "bool")))

@hookimpl
def neurenix_probe(context):
    return ProbeResult.found(1)

@hookimpl
def neurenix_backend(manifest, probe):
    return PartialBackend()
"""


@pytest.fixture
def partial(tmp_path: Path) -> Iterator[nx.Device]:
    """A real plugin distribution (dist-info + entry point) on sys.path, discovered in-process."""
    write_distribution(tmp_path, name="partial", module="nx_partial_plugin", source=PARTIAL_PLUGIN)
    sys.path.insert(0, str(tmp_path))
    importlib.invalidate_caches()
    nx.rediscover()
    nx.reset_fallback_stats()
    try:
        assert nx.backend("partial:0").name == "partial"
        yield nx.Device("partial:0")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("nx_partial_plugin", None)
        importlib.invalidate_caches()
        nx.rediscover()
        nx.reset_fallback_stats()


def test_warn_once_per_op_and_backend_and_count_every_time(partial: nx.Device) -> None:
    x = nx.asarray([3.0, 1.0, 2.0], device=partial)
    with nx.fallback_policy("warn"):
        with pytest.warns(nx.fallback.FallbackWarning, match="sort is not native on partial:0"):
            out = nx.sort(x)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            out = nx.sort(x)  # second time: counted, not warned again
    assert out.device == partial, "a fallback result goes back to the device the user chose"
    np.testing.assert_array_equal(out.numpy(), [1.0, 2.0, 3.0])
    assert nx.fallback_stats() == {"partial": {"sort": 2}}
    assert nx.memory_stats(partial).in_use == 2 * 12


def test_error_policy_raises_before_running(partial: nx.Device) -> None:
    x = nx.asarray([3.0, 1.0], device=partial)
    with nx.fallback_policy("error"), pytest.raises(nx.FallbackError, match=r"cumulative_sum is not native on partial:0.*NEURENIX_FALLBACK=allow"):
        nx.cumulative_sum(x)
    assert nx.fallback_stats() == {}
    np.testing.assert_array_equal((x + 1.0).numpy(), [4.0, 2.0]), "native ops still run under 'error'"


def test_allow_policy_is_silent_and_global_setting_restores(partial: nx.Device) -> None:
    x = nx.asarray([3.0, 1.0], device=partial)
    before = nx.get_fallback_policy()
    nx.set_fallback_policy("allow")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert nx.cumulative_sum(x).device == partial
    finally:
        nx.set_fallback_policy(before)
    assert nx.fallback_stats()["partial"]["cumulative_sum"] == 1
    with pytest.raises(nx.ConfigurationError, match="unknown fallback policy"):
        nx.set_fallback_policy("sometimes")


def test_environment_variable_sets_the_policy() -> None:
    code = "import neurenix_core as nx; print(nx.get_fallback_policy())"
    env = {**os.environ, "NEURENIX_FALLBACK": "error", "NEURENIX_DISABLE_PLUGIN_AUTOLOAD": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True, timeout=120)
    assert out.stdout.strip() == "error"
    env["NEURENIX_FALLBACK"] = "bogus"
    bad = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False, timeout=120)
    assert bad.returncode != 0 and "NEURENIX_FALLBACK" in bad.stderr


def test_mixed_devices_never_combined(partial: nx.Device) -> None:
    a = nx.asarray([1.0, 2.0], device=partial)
    b = nx.asarray([1.0, 2.0], device="cpu")
    with pytest.raises(nx.DeviceMismatchError, match=r"partial:0 and cpu:0.*\.to\('partial:0'\)"):
        a + b
    with pytest.raises(nx.DeviceMismatchError):
        nx.where(a > 0.0, a, b)
    with pytest.raises(nx.DeviceMismatchError):
        a[nx.asarray([True, False], device="cpu")]
    moved = b.to(partial)
    np.testing.assert_array_equal((a + moved).numpy(), [2.0, 4.0])
    with pytest.raises(nx.UnsupportedDTypeError, match="partial:0"):
        nx.asarray([1, 2], dtype=nx.int8, device=partial)


def test_dlpack_import_checks_the_device_dtypes(partial: nx.Device) -> None:
    ok = nx.from_dlpack(np.arange(3, dtype=np.float32), device=partial)
    assert ok.device == partial
    with pytest.raises(nx.UnsupportedDTypeError, match="partial:0"):
        nx.from_dlpack(np.arange(3, dtype=np.int8), device=partial)
