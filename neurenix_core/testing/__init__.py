"""The neurenix conformance kit for backend authors (ours and third parties').

Run the device-generic suite against an installed backend::

    pytest --neurenix-backend=NAME --neurenix-report=report.json

(``python -m pytest -p neurenix_core.testing.plugin --pyargs neurenix_core.testing.suite
--neurenix-backend=NAME`` is the explicit form.)

or from Python: ``neurenix_core.testing.run_conformance("NAME")``. The suite checks results
against float64 NumPy with a tolerance per dtype (``reference.TOLERANCES``) and reports, per
capability, what passed, failed and was skipped (with the reason). See docs/conformance.md.
"""

from __future__ import annotations

from neurenix_core.testing.reference import TOLERANCES, assert_close, on_device, require_dtype, rounded, tolerance
from neurenix_core.testing.runner import pytest_command, run_conformance

__all__ = ["TOLERANCES", "assert_close", "on_device", "pytest_command", "require_dtype", "rounded", "run_conformance", "tolerance"]
