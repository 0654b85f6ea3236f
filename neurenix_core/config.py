"""Environment variables that steer discovery and selection, parsed once and validated.

NEURENIX_DEVICE                   default device ("npu:0")
NEURENIX_BACKENDS                 ordered allow list of plugin names; "-name" denies ("cuda-tc,cpu", "-edgetpu")
NEURENIX_DISABLE_PLUGIN_AUTOLOAD  "1": only the built-in CPU backend is loaded
NEURENIX_EMULATE                  emulation tokens ("tpu,npu"): plugins run their stack on the host CPU
NEURENIX_STRICT                   "1": any plugin failure at discovery raises StrictModeError
NEURENIX_PROBE_TIMEOUT            seconds a probe may take (default 2)
NEURENIX_NATIVE_PROBE_TIMEOUT     seconds a native probe subprocess may take (default 10: driver init is slow)
NEURENIX_FALLBACK                 error | warn | allow (default warn)
NEURENIX_BACKEND_TIMEOUT          seconds a backend factory may take on first use (default 120: importing a framework is slow)
NEURENIX_STATE_DIR                where the crash journal, quarantine list and entry point cache live
                                  (default $XDG_STATE_HOME/neurenix, else ~/.local/state/neurenix)

Read once, before any plugin is imported (``state.initialize``): a plugin that changes these
variables at import does not change this process's configuration (discovery records such changes).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final, final

from neurenix_core.errors import ConfigurationError

__all__ = ["Config", "read_config", "FALLBACK_POLICIES"]

FALLBACK_POLICIES: Final = ("error", "warn", "allow")
_TRUE: Final = {"1", "true", "yes", "on"}
_FALSE: Final = {"", "0", "false", "no", "off"}


@final
class Config:
    """The parsed NEURENIX_* variables (a plain slotted class: built at every import)."""

    __slots__ = ("device", "allow", "deny", "autoload", "emulate", "strict", "probe_timeout", "native_probe_timeout", "backend_timeout", "fallback", "state_dir")

    def __init__(
        self,
        *,
        device: str | None,
        allow: tuple[str, ...],
        deny: frozenset[str],
        autoload: bool,
        emulate: frozenset[str],
        strict: bool,
        probe_timeout: float,
        native_probe_timeout: float,
        fallback: str,
        backend_timeout: float = 120.0,
        state_dir: str | None = None,
    ) -> None:
        self.device = device
        self.allow = allow
        self.deny = deny
        self.autoload = autoload
        self.emulate = emulate
        self.strict = strict
        self.probe_timeout = probe_timeout
        self.native_probe_timeout = native_probe_timeout
        self.fallback = fallback
        self.backend_timeout = backend_timeout
        self.state_dir = state_dir

    def is_denied(self, name: str, builtin: bool) -> str | None:
        """Why plugin ``name`` must not be imported, or None when it may be."""
        if builtin:
            return None
        if not self.autoload:
            return "plugin autoload is disabled (NEURENIX_DISABLE_PLUGIN_AUTOLOAD=1)"
        if name in self.deny:
            return f"denied by NEURENIX_BACKENDS (-{name})"
        if self.allow and name not in self.allow:
            return f"not in the allow list NEURENIX_BACKENDS={','.join(self.allow)}"
        return None


def _flag(env: Mapping[str, str], key: str) -> bool:
    raw = env.get(key, "").strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ConfigurationError(f"{key}={env[key]!r} is not a boolean: use 1 or 0")


def _split(raw: str) -> list[str]:
    return [part.strip().lower() for part in raw.split(",") if part.strip()]


def _seconds(env: Mapping[str, str], key: str, default: float) -> float:
    raw = env.get(key, "").strip()
    try:
        value = float(raw) if raw else default
    except ValueError:
        raise ConfigurationError(f"{key}={raw!r} is not a number of seconds") from None
    if value <= 0:
        raise ConfigurationError(f"{key}={raw!r} must be a positive number of seconds")
    return value


def read_config(env: Mapping[str, str] | None = None) -> Config:
    """Parse the NEURENIX_* variables of ``env`` (default ``os.environ``)."""
    env = os.environ if env is None else env
    entries = _split(env.get("NEURENIX_BACKENDS", ""))
    allow = tuple(e for e in entries if not e.startswith("-"))
    deny = frozenset(e[1:] for e in entries if e.startswith("-"))
    if "cpu" in deny:
        raise ConfigurationError(
            "NEURENIX_BACKENDS cannot deny 'cpu': the host backend is needed for transfers and "
            "fallbacks. To keep work off the CPU, set NEURENIX_DEVICE or NEURENIX_FALLBACK=error."
        )
    fallback = env.get("NEURENIX_FALLBACK", "warn").strip().lower() or "warn"
    if fallback not in FALLBACK_POLICIES:
        raise ConfigurationError(f"NEURENIX_FALLBACK={fallback!r}: use one of {', '.join(FALLBACK_POLICIES)}")
    timeout = _seconds(env, "NEURENIX_PROBE_TIMEOUT", 2.0)
    native_timeout = _seconds(env, "NEURENIX_NATIVE_PROBE_TIMEOUT", 10.0)
    return Config(
        device=env.get("NEURENIX_DEVICE", "").strip() or None,
        allow=allow,
        deny=deny,
        autoload=not _flag(env, "NEURENIX_DISABLE_PLUGIN_AUTOLOAD"),
        emulate=frozenset(_split(env.get("NEURENIX_EMULATE", ""))),
        strict=_flag(env, "NEURENIX_STRICT"),
        probe_timeout=timeout,
        native_probe_timeout=native_timeout,
        fallback=fallback,
        backend_timeout=_seconds(env, "NEURENIX_BACKEND_TIMEOUT", 120.0),
        state_dir=_state_dir(env),
    )


def _state_dir(env: Mapping[str, str]) -> str | None:
    """The per-user state folder (the path only: nothing is created unless a journal is needed)."""
    explicit = env.get("NEURENIX_STATE_DIR", "").strip()
    if explicit:
        return explicit
    base = env.get("XDG_STATE_HOME", "").strip() or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "neurenix") if os.path.isabs(base) else None
