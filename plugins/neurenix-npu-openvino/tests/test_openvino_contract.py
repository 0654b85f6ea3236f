"""The core's conformance suite (neurenix_core.testing) against the npu device, in a fresh
interpreter so its report is this backend's alone."""

from __future__ import annotations

import pytest

testing = pytest.importorskip("neurenix_core.testing", reason="needs the conformance kit neurenix_core.testing (issue 3)")


@pytest.mark.slow
def test_conformance_suite_passes_on_npu() -> None:
    row = testing.run_conformance("npu", env={"NEURENIX_EMULATE": "npu"}, timeout=1200)
    failed = {cap: data.get("failed_tests", data.get("failed")) for cap, data in row["capabilities"].items() if data.get("failed")}
    assert row["returncode"] == 0 and not failed, f"{failed}\n{row['output_tail'][-3000:]}"
    assert row["totals"]["passed"] > 0
