"""pytest plugin of the neurenix conformance kit.

    python -m pytest -p neurenix_core.testing.plugin --pyargs neurenix_core.testing.suite \\
        --neurenix-backend npu --neurenix-report report.json

Every suite test takes one fixture, ``nx_device``: the device under test, one per backend
(``--neurenix-backend NAME``, repeatable; default: one device of every usable backend, emulated
ones included). The fixture first asserts that the device really is served by that backend.
The JSON report counts passed / failed / skipped / xfailed per capability (the suite module:
elementwise, linalg, ...) with every skip reason, and the host fallbacks each backend needed.

Known failures are declared by the backend, reviewed with its code, never hidden:
``Capabilities(extra={"conformance_xfail": {"test_unary[expm1-bfloat16]": "why"}})`` marks
those tests strict-xfail (a fixed bug then fails the run until the entry is removed).

This module imports neurenix only inside hooks, so loading the plugin costs nothing until a
test asks for ``nx_device``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

__all__ = ["SUITE_PACKAGE", "DeviceUnderTest", "devices_under_test", "nx_device"]

SUITE_PACKAGE = "neurenix_core.testing.suite"
_RESULTS = pytest.StashKey["_Results"]()


@dataclass(frozen=True, slots=True)
class DeviceUnderTest:
    """One backend's device as a test parameter (its id is the backend name)."""

    backend: str
    device: str
    emulated: bool

    def __str__(self) -> str:
        return self.backend


@dataclass(slots=True)
class _Results:
    devices: dict[str, DeviceUnderTest] = field(default_factory=dict)
    items: dict[str, tuple[str, str]] = field(default_factory=dict)  # nodeid -> (backend, capability)
    rows: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    fallbacks: dict[str, dict[str, int]] = field(default_factory=dict)


# --------------------------------------------------------------------------- options
def pytest_addoption(parser: pytest.Parser) -> None:
    # The options live in the top-level shim (the pytest11 entry point) so both ways of loading
    # the kit define them once.
    from neurenix_pytest import add_options

    add_options(parser)


def _option(config: pytest.Config, name: str, default: Any) -> Any:
    # Options exist only when this module was loaded as a plugin at startup (-p); a conftest that
    # re-exports the hooks later still works, with the defaults.
    try:
        return config.getoption(name)
    except ValueError:
        return default


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_RESULTS] = _Results()
    config.addinivalue_line("markers", "neurenix_capability(name): the conformance capability a test belongs to")
    names = _option(config, "neurenix_backend", [])
    if names:
        devices_under_test(names)  # a backend that is not installed or not usable stops the run here


# --------------------------------------------------------------------------- devices
def devices_under_test(names: list[str] | tuple[str, ...] = ()) -> list[DeviceUnderTest]:
    """Device 0 of each named backend (UsageError naming the reason when one is not usable),
    or of every usable backend in rank order when ``names`` is empty."""
    from neurenix_core.plugins.state import registry

    reg = registry()
    if not names:
        return [_dut(r) for r in reg.ranked]
    out = []
    for name in names:
        record = reg.record_named(name)
        if record is None:
            raise pytest.UsageError(f"--neurenix-backend {name}: no installed backend has that name (installed: {reg.plugin_names()}); "
                                    "pip install the plugin first")
        if not record.usable or record not in reg.ranked:
            raise pytest.UsageError(f"--neurenix-backend {name}: {reg._why_unusable(record)}")
        out.append(_dut(record))
    return out


def _dut(record: Any) -> DeviceUnderTest:
    device_type = record.manifest.device_types[0]
    return DeviceUnderTest(backend=record.name, device=f"{device_type}:0", emulated=record.emulated)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "nx_device" not in metafunc.fixturenames:
        return
    duts = devices_under_test(_option(metafunc.config, "neurenix_backend", []))
    results = metafunc.config.stash.get(_RESULTS, None)
    if results is not None:
        results.devices.update({d.backend: d for d in duts})
    metafunc.parametrize("nx_device", duts, ids=[d.backend for d in duts], indirect=True)


@pytest.fixture
def nx_device(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The device under test. Inside a test the fallback policy is ``allow``; fallbacks are counted."""
    import neurenix_core as nx

    dut: DeviceUnderTest = request.param
    # Where the report files this test; carried by the test reports themselves, so it also
    # reaches the controller when pytest-xdist collected the tests in workers.
    request.node.user_properties.append(
        ("neurenix", {"backend": dut.backend, "device": dut.device, "emulated": dut.emulated, "capability": capability_of(request.node)})
    )
    device = nx.Device(dut.device)
    backend = nx.backend(device)
    assert backend.name == dut.backend, f"{device} is served by backend {backend.name}, not by {dut.backend} under test"
    assert device in nx.devices(), f"{device} is not among the available devices {nx.devices()}"
    before = dict(nx.fallback_stats().get(backend.name, {}))
    with nx.fallback_policy("allow"):
        yield device
    after = nx.fallback_stats().get(backend.name, {})
    used = {op: n - before.get(op, 0) for op, n in after.items() if n > before.get(op, 0)}
    if used:
        request.node.user_properties.append(("neurenix_fallbacks", used))


# --------------------------------------------------------------------------- known failures
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    results = config.stash.get(_RESULTS, None)
    for item in items:
        dut = _param(item)
        if dut is None:
            continue
        if results is not None:
            results.items[item.nodeid] = (dut.backend, capability_of(item))
        reason = _known_failure(dut, item.name)
        if reason is not None:
            item.add_marker(pytest.mark.xfail(reason=f"declared by backend {dut.backend}: {reason}", strict=True))


def _param(item: pytest.Item) -> DeviceUnderTest | None:
    callspec = getattr(item, "callspec", None)
    value = callspec.params.get("nx_device") if callspec is not None else None
    return value if isinstance(value, DeviceUnderTest) else None


def capability_of(item: pytest.Item) -> str:
    """The capability a test checks: its ``neurenix_capability`` mark, else its suite module name."""
    mark = item.get_closest_marker("neurenix_capability")
    if mark is not None:
        return str(mark.args[0])
    module = getattr(getattr(item, "function", None), "__module__", "") or ""
    return module.rsplit(".", 1)[-1].removeprefix("test_") or "other"


def _known_failure(dut: DeviceUnderTest, name: str) -> str | None:
    from neurenix_core.plugins.state import registry

    record = registry().record_named(dut.backend)
    if record is None or record.manifest is None:
        return None
    declared = record.manifest.capabilities.extra.get("conformance_xfail", {})
    bare = name.replace(f"-{dut.backend}]", "]").replace(f"[{dut.backend}-", "[").replace(f"[{dut.backend}]", "")
    for pattern, reason in declared.items():
        if _matches(pattern, bare) or _matches(pattern, name):
            return str(reason)
    return None


def _matches(pattern: str, name: str) -> bool:
    # Test ids contain brackets, so only ``*`` and ``?`` are wildcards (fnmatch reads ``[..]`` as a set).
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, name) is not None


# --------------------------------------------------------------------------- report
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # Outcome from the call phase (or a setup that skipped/failed); the fallbacks the fixture
    # recorded at teardown come with the teardown report.
    if report.when == "call" or (report.when == "setup" and not report.passed) or report.when == "teardown":
        _RUNTIME_REPORTS.append(report)


_RUNTIME_REPORTS: list[pytest.TestReport] = []


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    results = config.stash.get(_RESULTS, None)
    path = _option(config, "neurenix_report", None)
    if results is None:
        return
    for report in _RUNTIME_REPORTS:
        _count(results, report)
    _RUNTIME_REPORTS.clear()
    if path:
        Path(path).write_text(json.dumps(build_report(results), indent=2, sort_keys=True))


def _outcome(report: pytest.TestReport) -> str:
    if hasattr(report, "wasxfail"):
        return "xfailed" if report.skipped else "failed"  # strict xfail that passed is a failure
    return report.outcome


def _where(results: _Results, report: pytest.TestReport) -> tuple[str, str] | None:
    for key, value in report.user_properties:
        if key == "neurenix" and isinstance(value, dict):
            backend = value["backend"]
            if backend not in results.devices:
                results.devices[backend] = DeviceUnderTest(backend=backend, device=value["device"], emulated=value["emulated"])
            return backend, value["capability"]
    return results.items.get(report.nodeid)  # e.g. the fixture's setup failed before recording


def _count(results: _Results, report: pytest.TestReport) -> None:
    where = _where(results, report)
    if where is None:
        return
    backend, capability = where
    row = results.rows.setdefault(backend, {}).setdefault(
        capability, {"passed": 0, "failed": 0, "skipped": 0, "xfailed": 0, "skip_reasons": {}, "failed_tests": []}
    )
    outcome = _outcome(report)
    _count_fallbacks(results, backend, report)
    if report.when == "teardown" and (outcome != "failed" or report.nodeid in row["failed_tests"]):
        return
    row[outcome] += 1
    if outcome == "skipped":
        reason = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        row["skip_reasons"][reason] = row["skip_reasons"].get(reason, 0) + 1
    elif outcome == "failed":
        row["failed_tests"].append(report.nodeid)


def _count_fallbacks(results: _Results, backend: str, report: pytest.TestReport) -> None:
    if report.when != "teardown":
        return
    for key, value in report.user_properties:
        if key == "neurenix_fallbacks" and isinstance(value, dict):
            bucket = results.fallbacks.setdefault(backend, {})
            for op, n in value.items():
                bucket[op] = bucket.get(op, 0) + n


def build_report(results: _Results) -> dict[str, Any]:
    """The JSON document: per backend, totals and per-capability rows."""
    from neurenix_core import __array_api_version__
    from neurenix_core.plugins.manifest import NEURENIX_API_VERSION

    backends: dict[str, Any] = {}
    for name, dut in results.devices.items():
        caps = results.rows.get(name, {})
        totals = {k: sum(c[k] for c in caps.values()) for k in ("passed", "failed", "skipped", "xfailed")}
        backends[name] = {
            "device": dut.device,
            "emulated": dut.emulated,
            "totals": totals,
            "conformant": totals["failed"] == 0 and totals["passed"] > 0,
            "capabilities": caps,
            "fallbacks": results.fallbacks.get(name, {}),
        }
    return {
        "neurenix_api": ".".join(map(str, NEURENIX_API_VERSION)),
        "array_api": __array_api_version__,
        "backends": backends,
    }
