"""The core's conformance suite (neurenix_core.testing) against the tpu device, in a fresh
interpreter so its report is this backend's alone."""

from __future__ import annotations

import pytest

testing = pytest.importorskip("neurenix_core.testing", reason="needs the conformance kit neurenix_core.testing (issue 3)")


@pytest.mark.slow
def test_conformance_suite_passes_on_tpu() -> None:
    env = {"NEURENIX_EMULATE": "tpu", "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    row = testing.run_conformance("tpu", env=env, timeout=1500)
    failed = {cap: data.get("failed_tests", data.get("failed")) for cap, data in row["capabilities"].items() if data.get("failed")}
    assert row["returncode"] == 0 and not failed, f"{failed}\n{row['output_tail'][-3000:]}"
    assert row["totals"]["passed"] > 250
