"""``run_conformance``: the conformance suite against one installed backend, from Python."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from neurenix_core.errors import BackendUnavailableError

__all__ = ["pytest_command", "run_conformance"]


def pytest_command(backend_name: str, report: str | os.PathLike[str], extra_args: Sequence[str] = ()) -> list[str]:
    """The exact command line the kit runs (also what vendors type)."""
    return [
        sys.executable, "-m", "pytest", "-p", "neurenix_core.testing.plugin", "-p", "no:cacheprovider",
        "--pyargs", "neurenix_core.testing.suite", f"--neurenix-backend={backend_name}",
        f"--neurenix-report={report}", "-q", *extra_args,
    ]


def run_conformance(
    backend_name: str,
    *,
    report_path: str | os.PathLike[str] | None = None,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = 1800,
) -> dict[str, Any]:
    """Run the suite against ``backend_name`` in a fresh interpreter and return its report row.

    The result holds ``totals``, ``capabilities`` (passed/failed/skipped/xfailed with skip reasons
    and failed test ids per capability), ``fallbacks``, ``conformant`` and pytest's ``returncode``.
    ``env`` adds variables such as ``NEURENIX_EMULATE`` for the run. Raises
    BackendUnavailableError when pytest could not run the suite against that backend at all.
    """
    with tempfile.TemporaryDirectory(prefix="neurenix-conformance-") as tmp:
        report = Path(report_path) if report_path is not None else Path(tmp) / "report.json"
        full_env = {**os.environ, **(env or {})}
        proc = subprocess.run(
            pytest_command(backend_name, report, extra_args), capture_output=True, text=True,
            env=full_env, timeout=timeout, check=False, cwd=tmp,
        )
        if not report.exists():
            raise BackendUnavailableError(
                f"the conformance suite could not run against backend {backend_name!r} (pytest exit {proc.returncode}):\n"
                f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
            )
        data = json.loads(report.read_text())
    row = data["backends"].get(backend_name)
    if row is None:
        raise BackendUnavailableError(f"the conformance report has no entry for backend {backend_name!r}: {sorted(data['backends'])}")
    row["returncode"] = proc.returncode
    row["output_tail"] = proc.stdout[-4000:]
    return dict(row)
