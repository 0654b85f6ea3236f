"""pytest entry point of the neurenix conformance kit: ``pytest --neurenix-backend=NAME``.

A top-level module on purpose: anything inside ``neurenix_core`` imports the package, and that
runs plugin discovery when pytest starts, before a project's conftest could set NEURENIX_*.
This shim only defines the options; when ``--neurenix-backend`` is given it loads the real kit
(``neurenix_core.testing.plugin``) and, if no test path was named, collects the kit's suite.
Every other pytest run is left alone.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import pytest

KIT = "neurenix_core.testing.plugin"


def add_options(parser: Any) -> None:
    """Define the kit's options once (the shim and ``-p neurenix_core.testing.plugin`` both call this)."""
    group = parser.getgroup("neurenix", "neurenix conformance kit")
    if any("--neurenix-backend" in opt.names() for opt in group.options):
        return
    group.addoption(
        "--neurenix-backend", action="append", default=[], metavar="NAME",
        help="run the conformance suite against this installed backend (entry point name; repeatable; "
        "write --neurenix-backend=NAME). Default with the kit loaded: every usable backend, emulated ones included.",
    )
    group.addoption("--neurenix-report", default=None, metavar="PATH", help="write a JSON report (per backend, per capability)")


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def _suite_dir() -> str | None:
    # find_spec of the top-level package locates it without importing (and discovering) it.
    spec = importlib.util.find_spec("neurenix_core")
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.join(next(iter(spec.submodule_search_locations)), "testing", "suite")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    if not any(a.startswith("--neurenix-backend") for a in args):
        return
    named_paths = [a for a in args if not a.startswith("-") and (os.path.exists(a.split("::")[0]) or "::" in a)]
    suite = _suite_dir()
    if not named_paths and "--pyargs" not in args and suite is not None:
        args.append(suite)


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("neurenix_backend") and not config.pluginmanager.has_plugin(KIT):
        config.pluginmanager.import_plugin(KIT)
