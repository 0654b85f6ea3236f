"""Shared fixtures for the core tests.

``plugin_site`` writes real distributions (a ``*.dist-info`` folder with METADATA and
``entry_points.txt`` beside a plugin module) into a temporary directory; ``run_neurenix`` runs
Python code in a fresh interpreter with that directory on ``sys.path``, so discovery, isolation
and ``sys.modules`` are observed exactly as a user's process would see them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from distributions import write_distribution


@pytest.fixture
def plugin_site(tmp_path: Path) -> Callable[..., Path]:
    site = tmp_path / "site"
    site.mkdir()

    def add(name: str, source: str, module: str | None = None) -> Path:
        write_distribution(site, name=name, module=module or f"nx_plugin_{name.replace('-', '_')}", source=source)
        return site

    add.site = site  # type: ignore[attr-defined]
    return add


def _clean_env(extra: dict[str, str] | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")}
    env.update(extra or {})
    return env


@pytest.fixture
def run_neurenix(tmp_path: Path) -> Callable[..., Any]:
    """Run ``code`` in a fresh interpreter; the code's last stdout line must be JSON."""

    def run(code: str, *, site: Path | None = None, env: dict[str, str] | None = None, expect_ok: bool = True, timeout: float = 120) -> Any:
        full_env = _clean_env(env)
        if site is not None:
            full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), full_env.get("PYTHONPATH", "")]))
        proc = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=full_env, timeout=timeout, check=False
        )
        if not expect_ok:
            return proc
        assert proc.returncode == 0, f"subprocess failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        return json.loads(proc.stdout.strip().splitlines()[-1])

    return run
