"""Process-wide state: the registry built at import, and the default device (global + context)."""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterator

from neurenix_core.config import ConfigReport, Problem, enforce, inspect_config, plugin_problems
from neurenix_core.device import Device, DeviceLike, as_device, use_directory
from neurenix_core.kwargs import strict_kwargs
from neurenix_core.plugins.registry import Registry, emulation_names

__all__ = ["check_configuration", "configuration", "default_device", "device", "initialize", "registry", "set_default_device"]

_registry: Registry | None = None
_report: ConfigReport | None = None
_problems: list[Problem] = []
_deferred = False  # the last initialize() kept its problems for check_configuration()
_explicit_default: Device | None = None
_context: contextvars.ContextVar[Device | None] = contextvars.ContextVar("neurenix_device", default=None)


def initialize(*, defer_errors: bool = False) -> Registry:
    """(Re)discover plugins from the current environment and ``sys.path``.

    An error-level NEURENIX_* problem raises ConfigurationError before any plugin is imported;
    warnings are emitted once discovery knows the installed plugin names (under NEURENIX_STRICT=1
    they raise too). ``defer_errors`` (the ``neurenix`` command only) keeps every problem for
    :func:`check_configuration` and the doctor, discovering with the safe value of each bad one.
    """
    global _registry, _explicit_default, _report, _problems, _deferred
    report = inspect_config()
    config = report.config
    if not defer_errors and (report.errors or (config.strict and report.problems)):
        enforce(report.problems, strict=config.strict)  # raises: nothing was imported yet
    if defer_errors and report.errors:
        # A broken configuration must not reach plugin code: the first-run and native-probe child
        # interpreters inherit it, would fail to import, and a failing child quarantines its plugin.
        config = inspect_config({**os.environ, "NEURENIX_DISABLE_PLUGIN_AUTOLOAD": "1"}).config
    reg = Registry(config)
    if defer_errors and report.errors:
        reg.notes.append("plugins were not loaded because the configuration has errors: fix them and run neurenix doctor again")
    reg.discover()
    problems = report.problems + _plugin_problems(reg)
    if not defer_errors:
        enforce(problems, strict=config.strict)
    _registry, _report, _problems, _deferred = reg, report, problems, defer_errors
    use_directory(reg)
    _explicit_default = as_device(config.device) if config.device else None
    return reg


def _plugin_problems(reg: Registry) -> list[Problem]:
    loaded = [r for r in reg.records if r.manifest is not None]
    tokens = [t for r in loaded for t in emulation_names(r)]
    # A denied plugin was never imported, so its emulation token is unknown: NEURENIX_EMULATE is
    # only judged when every plugin was loaded (the registry's note covers the other case).
    complete = all(r.denied is None for r in reg.records)
    aliases = {r.alias: r.name for r in reg.records if r.alias}
    problems = plugin_problems(reg.config, (r.name for r in reg.records), tokens, aliases)
    return [p for p in problems if complete or p.variable != "NEURENIX_EMULATE"]


def configuration() -> tuple[ConfigReport, list[Problem]]:
    """The configuration discovery ran with, and every problem found in it (for the doctor)."""
    registry()
    assert _report is not None
    return _report, list(_problems)


def check_configuration() -> None:
    """Raise (errors) or warn (warnings) the problems a deferred :func:`initialize` kept; a
    normal initialize already did, so nothing is repeated then."""
    report, problems = configuration()
    if _deferred:
        enforce(problems, strict=report.config.strict)


def registry() -> Registry:
    return _registry if _registry is not None else initialize()


def default_device() -> Device:
    """The device new tensors go to: ``with nx.device(...)``, then ``set_default_device`` /
    ``NEURENIX_DEVICE``, then the best-ranked available device. An explicit choice that is not
    available raises with the reason and the remedy."""
    chosen = _context.get() or _explicit_default
    if chosen is None:
        return registry().auto_default
    registry().plugin_for(chosen)  # raises DeviceNotFoundError / BackendUnavailableError
    return chosen


def is_auto() -> bool:
    return _context.get() is None and _explicit_default is None


@strict_kwargs("nx.set_default_device")
def set_default_device(value: DeviceLike | None) -> None:
    """Set the process default device (``None`` returns to automatic selection)."""
    global _explicit_default
    if value is None:
        _explicit_default = None
        return
    dev = as_device(value)
    registry().plugin_for(dev)
    _explicit_default = dev


@contextlib.contextmanager
@strict_kwargs("nx.device")
def device(value: DeviceLike) -> Iterator[Device]:
    """``with nx.device("npu:0"):`` new tensors in the block go to that device."""
    dev = as_device(value)
    registry().plugin_for(dev)
    token = _context.set(dev)
    try:
        yield dev
    finally:
        _context.reset(token)
