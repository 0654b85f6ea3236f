"""Environment variables that steer discovery and selection, parsed once and validated.

NEURENIX_DEVICE                   default device ("npu:0")
NEURENIX_BACKENDS                 ordered allow list of plugin names or aliases; "-name" denies ("cuda,cpu", "-edgetpu")
NEURENIX_DISABLE_PLUGIN_AUTOLOAD  "1": only the built-in CPU backend is loaded
NEURENIX_EMULATE                  emulation tokens or plugin names ("tpu,npu"): plugins run their stack on the host CPU
NEURENIX_STRICT                   "1": any plugin failure at discovery raises StrictModeError, and
                                  every configuration warning becomes a ConfigurationError
NEURENIX_PROBE_TIMEOUT            seconds a probe may take (default 2)
NEURENIX_NATIVE_PROBE_TIMEOUT     seconds a native probe subprocess may take (default 10: driver init is slow)
NEURENIX_FALLBACK                 error | warn | allow (default warn)
NEURENIX_BACKEND_TIMEOUT          seconds a backend factory may take on first use (default 120: importing a framework is slow)
NEURENIX_CPU_RUNTIME              the runtime of cpu:0 models ("auto", "numpy", "openvino" ...; read at compile time)
NEURENIX_STATE_DIR                where the crash journal, quarantine list and entry point cache live
                                  (default $XDG_STATE_HOME/neurenix, else ~/.local/state/neurenix)
NEURENIX_COMPILE_CACHE            "0": no persistent compile cache (default on; read at compile time)
NEURENIX_COMPILE_CACHE_MAX_BYTES  size limit of the compile cache: bytes, or with K/M/G suffix ("512M";
                                  default 2G, at least 1M); least recently used entries are evicted

Every NEURENIX_* value the core reads is parsed here, and nowhere else. ``inspect_config`` never
raises: it returns the effective configuration (a safe value in place of each unusable one), where
each value came from, and every :class:`Problem`. A problem is an *error* when no reading of the
value is safe (``NEURENIX_PROBE_TIMEOUT=nan``, ``NEURENIX_FALLBACK=wran``): ``read_config`` and
``import neurenix_core`` raise ``ConfigurationError``. It is a *warning* when the intent is clear
and the job can go on (an unknown plugin name, a timeout above its bound, which is clamped):
``ConfigurationWarning``, unless ``NEURENIX_STRICT=1`` asks for errors. docs/errors.md lists them.

Read once, before any plugin is imported (``state.initialize``): a plugin that changes these
variables at import does not change this process's configuration (discovery records such changes).
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Final, Literal, final

from neurenix_core.errors import ConfigurationError, ConfigurationWarning

__all__ = [
    "FALLBACK_POLICIES",
    "MAX_DEVICE_INDEX",
    "MAX_TIMEOUT",
    "MIN_TIMEOUT",
    "VARIABLES",
    "Config",
    "ConfigReport",
    "Problem",
    "Setting",
    "compile_cache_enabled",
    "compile_cache_limit",
    "cpu_runtime",
    "enforce",
    "inspect_config",
    "plugin_problems",
    "read_config",
]

FALLBACK_POLICIES: Final = ("error", "warn", "allow")
_TRUE: Final = {"1", "true", "yes", "on"}
_FALSE: Final = {"", "0", "false", "no", "off"}

#: Bounds of every timeout, in seconds. Below 50 ms even a healthy probe of a local device can
#: miss its deadline on a loaded host; above an hour a hang is no longer told apart from a start.
#: The upper bound also keeps the value far below threading.TIMEOUT_MAX (locks raise OverflowError).
MIN_TIMEOUT: Final = 0.05
MAX_TIMEOUT: Final = 3600.0
#: No host has this many devices of one type: a larger index is a typo (a pasted serial number).
MAX_DEVICE_INDEX: Final = 65535
#: Longest runtime name accepted in NEURENIX_CPU_RUNTIME (runtime names are short identifiers).
_MAX_NAME: Final = 64
_NAME_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")

#: Every variable the core reads, in the order ``neurenix doctor`` lists them.
VARIABLES: Final = (
    "NEURENIX_DEVICE", "NEURENIX_BACKENDS", "NEURENIX_DISABLE_PLUGIN_AUTOLOAD", "NEURENIX_EMULATE", "NEURENIX_STRICT",
    "NEURENIX_FALLBACK", "NEURENIX_PROBE_TIMEOUT", "NEURENIX_NATIVE_PROBE_TIMEOUT", "NEURENIX_BACKEND_TIMEOUT",
    "NEURENIX_CPU_RUNTIME", "NEURENIX_STATE_DIR", "NEURENIX_COMPILE_CACHE", "NEURENIX_COMPILE_CACHE_MAX_BYTES",
)

#: NEURENIX_COMPILE_CACHE_MAX_BYTES: the default, the smallest accepted (below it one BERT-sized
#: entry would evict everything else at each store) and the suffixes.
COMPILE_CACHE_DEFAULT_BYTES: Final = 2 << 30
COMPILE_CACHE_MIN_BYTES: Final = 1 << 20
_SIZE_SUFFIXES: Final = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}

Level = Literal["error", "warning"]
Source = Literal["environment", "default", "default (value rejected)"]


@final
class Problem:
    """One unusable or suspicious value: the variable, its raw value, the level and the message
    (which names the variable, the value and the remedy)."""

    __slots__ = ("level", "message", "value", "variable")

    def __init__(self, variable: str, value: str | None, level: Level, message: str) -> None:
        self.variable = variable
        self.value = value
        self.level = level
        self.message = message

    def as_dict(self) -> dict[str, str | None]:
        return {"variable": self.variable, "value": self.value, "level": self.level, "message": self.message}

    def __repr__(self) -> str:
        return f"Problem({self.variable!r}, {self.value!r}, {self.level!r}, {self.message!r})"


@final
class Setting:
    """What ``neurenix doctor`` shows per variable: the raw value, the value in effect, its source."""

    __slots__ = ("effective", "raw", "source", "variable")

    def __init__(self, variable: str, raw: str | None, effective: str, source: Source) -> None:
        self.variable = variable
        self.raw = raw
        self.effective = effective
        self.source = source

    def as_dict(self) -> dict[str, str | None]:
        return {"variable": self.variable, "value": self.raw, "effective": self.effective, "source": self.source}


@final
class Config:
    """The parsed NEURENIX_* variables (a plain slotted class: built at every import)."""

    __slots__ = (
        "allow",
        "autoload",
        "backend_timeout",
        "cpu_runtime",
        "deny",
        "device",
        "emulate",
        "fallback",
        "native_probe_timeout",
        "probe_timeout",
        "state_dir",
        "strict",
    )

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
        cpu_runtime: str | None = None,
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
        self.cpu_runtime = cpu_runtime

    def is_denied(self, name: str, builtin: bool, alias: str | None = None) -> str | None:
        """Why plugin ``name`` (also called ``alias``) must not be imported, or None when it may be.

        The reason completes "plugin NAME is ..." (registry messages) and stands alone (doctor).
        """
        if builtin:
            return None
        if not self.autoload:
            return "not loaded because plugin autoload is disabled (unset NEURENIX_DISABLE_PLUGIN_AUTOLOAD to load it)"
        called = (name, alias) if alias else (name,)
        denied = next((n for n in called if n in self.deny), None)
        if denied is not None:
            return f"denied by NEURENIX_BACKENDS (-{denied})"
        if self.allow and not any(n in self.allow for n in called):
            return f"not in the allow list NEURENIX_BACKENDS={','.join(self.allow)}"
        return None


@final
class ConfigReport:
    """The effective configuration, the source of each value, and the problems found."""

    __slots__ = ("config", "problems", "settings")

    def __init__(self, config: Config, settings: tuple[Setting, ...], problems: list[Problem]) -> None:
        self.config = config
        self.settings = settings
        self.problems = problems

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.level == "error"]


# ---------------------------------------------------------------------------- one parser per kind


class _Reader:
    """Reads variables from ``env``, recording problems and where each value came from."""

    __slots__ = ("env", "problems", "settings")

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        self.problems: list[Problem] = []
        self.settings: list[Setting] = []

    def raw(self, key: str) -> str | None:
        value = self.env.get(key)
        return value if isinstance(value, str) else None

    def note(self, key: str, effective: object) -> None:
        raw = self.raw(key)
        source: Source = "environment" if raw is not None and raw.strip() else "default"
        if any(p.variable == key and p.level == "error" for p in self.problems):
            source = "default (value rejected)"  # the doctor shows what discovery ran with
        self.settings.append(Setting(key, raw, "unset" if effective is None else str(effective), source))

    def error(self, key: str, message: str) -> None:
        self.problems.append(Problem(key, self.raw(key), "error", message))

    def warn(self, key: str, message: str) -> None:
        self.problems.append(Problem(key, self.raw(key), "warning", message))


def _flag(r: _Reader, key: str) -> bool:
    raw = (r.raw(key) or "").strip().lower()
    value = raw in _TRUE
    if not value and raw not in _FALSE:
        r.error(key, f"{key}={r.raw(key)!r} is not a boolean: set it to 1 or 0 (or unset it)")
    r.note(key, int(value))
    return value


def _split(raw: str) -> list[str]:
    return [part.strip().lower() for part in raw.split(",") if part.strip()]


def _seconds(r: _Reader, key: str, default: float) -> float:
    """A timeout in [MIN_TIMEOUT, MAX_TIMEOUT]: unusable values are errors, out-of-range ones are clamped."""
    raw = (r.raw(key) or "").strip()
    value = default
    if raw:
        bounds = f"a number of seconds from {MIN_TIMEOUT:g} to {MAX_TIMEOUT:g} (default {default:g})"
        try:
            parsed = float(raw)
        except ValueError:
            r.error(key, f"{key}={raw!r} is not a number: set {bounds}")
        else:
            if not math.isfinite(parsed) or parsed <= 0:
                r.error(key, f"{key}={raw!r} is not a finite positive number: set {bounds}")
            elif parsed < MIN_TIMEOUT or parsed > MAX_TIMEOUT:
                value = min(max(parsed, MIN_TIMEOUT), MAX_TIMEOUT)
                r.warn(key, f"{key}={raw!r} is outside {MIN_TIMEOUT:g}..{MAX_TIMEOUT:g} seconds and was clamped to {value:g}: set {bounds}")
            else:
                value = parsed
    r.note(key, f"{value:g}s")
    return value


def _device(r: _Reader) -> str | None:
    """``type[:index]`` with an ASCII type name and an index up to MAX_DEVICE_INDEX, or None."""
    key = "NEURENIX_DEVICE"
    raw = (r.raw(key) or "").strip()
    value: str | None = None
    if raw:
        kind, colon, index = raw.lower().partition(":")
        good_kind = kind[:1].isascii() and kind[:1].isalpha() and kind.isascii() and kind.replace("_", "").isalnum()
        good_index = not colon or (index.isascii() and index.isdigit())
        if not (good_kind and good_index):
            r.error(key, f"{key}={raw!r} is not a device: use 'type:index' such as 'npu:0' (lower-case letters, digits and '_', then an index)")
        elif colon and int(index) > MAX_DEVICE_INDEX:
            r.error(key, f"{key}={raw!r} has index {index}, above {MAX_DEVICE_INDEX}: use the index `neurenix devices` lists, such as '{kind}:0'")
        else:
            value = f"{kind}:{int(index) if colon else 0}"
    r.note(key, value or "automatic")
    return value


def _backends(r: _Reader, autoload: bool) -> tuple[tuple[str, ...], frozenset[str]]:
    key = "NEURENIX_BACKENDS"
    entries = _split(r.raw(key) or "")
    allow = tuple(dict.fromkeys(e for e in entries if not e.startswith("-")))
    deny = frozenset(e[1:].strip() for e in entries if e.startswith("-"))
    if "cpu" in deny:
        r.error(key, f"{key}={r.raw(key)!r}: NEURENIX_BACKENDS cannot deny 'cpu', the host backend needed for transfers and "
                     "fallbacks: remove '-cpu'; to keep work off the CPU, set NEURENIX_DEVICE or NEURENIX_FALLBACK=error")
        deny = deny - {"cpu"}
    both = sorted(deny.intersection(allow))
    if both:
        # No reading is safe: allowing may run a plugin the user meant to keep out, denying may
        # drop the device the job needs.
        r.error(key, f"{key}={r.raw(key)!r} both allows and denies {', '.join(both)}: keep either the name or '-name'")
        allow = tuple(a for a in allow if a not in both)
    if not autoload and any(a != "cpu" for a in allow):
        r.warn(key, f"{key}={r.raw(key)!r} allows plugins, but NEURENIX_DISABLE_PLUGIN_AUTOLOAD=1 loads only the built-in CPU backend: "
                    "unset NEURENIX_DISABLE_PLUGIN_AUTOLOAD to use the allow list, or unset NEURENIX_BACKENDS")
    r.note(key, ",".join([*allow, *sorted(f"-{d}" for d in deny)]) or "every installed plugin")
    return allow, deny


def _fallback(r: _Reader) -> str:
    key = "NEURENIX_FALLBACK"
    raw = (r.raw(key) or "").strip()
    value = raw.lower() or "warn"
    if value not in FALLBACK_POLICIES:
        r.error(key, f"{key}={raw!r} is not a fallback policy: use one of {', '.join(FALLBACK_POLICIES)}")
        value = "warn"
    r.note(key, value)
    return value


def _runtime_problem(raw: str) -> str | None:
    """Why ``raw`` (stripped) cannot name a cpu:0 runtime, or None. Whether the named runtime is
    installed is checked by graph/compile/host_select.py when a model is compiled (it lists them)."""
    if len(raw) > _MAX_NAME or not _NAME_CHARS.issuperset(raw) or not raw[:1].isalnum():
        return (f"NEURENIX_CPU_RUNTIME={raw!r} is not a runtime name: use 'auto' (the default), 'numpy' or a runtime's name "
                "such as 'openvino', 'litert', 'xla', 'torch' (letters, digits, '_', '.', '-')")
    return None


def _cpu_runtime_setting(r: _Reader) -> str | None:
    key = "NEURENIX_CPU_RUNTIME"
    raw = (r.raw(key) or "").strip()
    problem = _runtime_problem(raw) if raw else None
    if problem is not None:
        r.error(key, problem)
    value = raw if raw and problem is None else None
    r.note(key, value or "auto")
    return value


def _state_dir(r: _Reader) -> str | None:
    """The per-user state folder (the path only: nothing is created unless a journal is needed)."""
    key = "NEURENIX_STATE_DIR"
    raw = (r.raw(key) or "").strip()
    explicit = os.path.expanduser(raw) if raw and "\0" not in raw else ""
    if raw and not os.path.isabs(explicit):
        # A relative folder would move with the working directory and split the crash journal
        # and quarantine list; the state is a cache, so the job goes on with the default folder.
        r.warn(key, f"{key}={raw!r} is not an absolute path; the default state folder is used: set an absolute path such as ~/.local/state/neurenix")
        explicit = ""
    if explicit:
        value: str | None = explicit
    else:
        base = (r.raw("XDG_STATE_HOME") or "").strip() or os.path.join(os.path.expanduser("~"), ".local", "state")
        value = os.path.join(base, "neurenix") if os.path.isabs(base) and "\0" not in base else None
    r.note(key, value or "none (no journal)")
    return value


# ---------------------------------------------------------------------------- the public entry points


def inspect_config(env: Mapping[str, str] | None = None) -> ConfigReport:
    """Parse the NEURENIX_* variables of ``env`` (default ``os.environ``); never raises."""
    r = _Reader(os.environ if env is None else env)
    device = _device(r)
    autoload = not _flag(r, "NEURENIX_DISABLE_PLUGIN_AUTOLOAD")
    allow, deny = _backends(r, autoload)
    emulate = frozenset(_split(r.raw("NEURENIX_EMULATE") or ""))
    r.note("NEURENIX_EMULATE", ",".join(sorted(emulate)) or "none")
    strict = _flag(r, "NEURENIX_STRICT")
    config = Config(
        device=device,
        allow=allow,
        deny=deny,
        autoload=autoload,
        emulate=emulate,
        strict=strict,
        fallback=_fallback(r),
        probe_timeout=_seconds(r, "NEURENIX_PROBE_TIMEOUT", 2.0),
        native_probe_timeout=_seconds(r, "NEURENIX_NATIVE_PROBE_TIMEOUT", 10.0),
        backend_timeout=_seconds(r, "NEURENIX_BACKEND_TIMEOUT", 120.0),
        cpu_runtime=_cpu_runtime_setting(r),
        state_dir=_state_dir(r),
    )
    _compile_cache_settings(r)
    order = {k: i for i, k in enumerate(VARIABLES)}
    settings = tuple(sorted(r.settings, key=lambda s: order[s.variable]))
    return ConfigReport(config, settings, r.problems)


def read_config(env: Mapping[str, str] | None = None) -> Config:
    """The configuration of ``env`` (default ``os.environ``); ConfigurationError on any error-level
    problem (warnings are emitted by ``enforce`` where discovery runs, once per process)."""
    report = inspect_config(env)
    enforce(report.errors, strict=False)
    return report.config


def enforce(problems: Sequence[Problem], *, strict: bool) -> None:
    """Raise one ConfigurationError for the errors (every warning too when ``strict``); else warn."""
    fatal = [p for p in problems if p.level == "error" or strict]
    if fatal:
        lines = "; ".join(p.message for p in fatal)
        tail = " (NEURENIX_STRICT=1 makes configuration warnings errors)" if strict and any(p.level == "warning" for p in fatal) else ""
        raise ConfigurationError(f"invalid neurenix configuration: {lines}{tail}")
    from neurenix_core.user_frame import user_stacklevel

    for p in problems:  # on the user's `import neurenix_core` line (or call), not inside neurenix
        warnings.warn(ConfigurationWarning(p.message), stacklevel=user_stacklevel())


def plugin_problems(config: Config, installed: Iterable[str], emulation_tokens: Iterable[str],
                    aliases: Mapping[str, str] | None = None) -> list[Problem]:
    """Names in NEURENIX_BACKENDS and NEURENIX_EMULATE that match nothing installed (warnings:
    a typo must not stop a production job, but the job must hear that the setting did nothing).
    ``aliases`` maps each alias to its plugin's name (``{"npu-openvino": "npu"}``): accepted too."""
    aliases = aliases or {}
    names = sorted(set(installed))
    known = sorted({*names, *aliases})
    listed = ", ".join(names) + (f" (aliases: {', '.join(f'{a} for {n}' for a, n in sorted(aliases.items()))})" if aliases else "")
    problems: list[Problem] = []
    for name in [*config.allow, *sorted(config.deny)]:
        if name not in known:
            effect = "it allows nothing" if name in config.allow else "it denies nothing"
            problems.append(Problem("NEURENIX_BACKENDS", name, "warning",
                                    f"NEURENIX_BACKENDS names {name!r}, which is not an installed plugin, so {effect}{_did_you_mean(name, known)}; "
                                    f"installed plugins: {listed}"))
    tokens = sorted(set(emulation_tokens))
    for token in sorted(config.emulate - set(tokens)):
        problems.append(Problem("NEURENIX_EMULATE", token, "warning",
                                f"NEURENIX_EMULATE lists {token!r}, which no installed plugin emulates{_did_you_mean(token, tokens)}; "
                                f"known tokens: {', '.join(tokens) or 'none'}"))
    return problems


def _did_you_mean(name: str, known: Sequence[str]) -> str:
    import difflib  # only when a name is unknown: ~1 ms that a correct configuration never pays

    close = difflib.get_close_matches(name, known, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def cpu_runtime(env: Mapping[str, str] | None = None) -> str | None:
    """NEURENIX_CPU_RUNTIME of ``env`` now (default ``os.environ``), stripped; None when unset.

    Read at each compile (not at import), so a job may set it between models; a malformed value
    raises ConfigurationError here, where it is used. Unknown names are host_select's to refuse.
    """
    raw = ((os.environ if env is None else env).get("NEURENIX_CPU_RUNTIME") or "").strip()
    if not raw:
        return None
    problem = _runtime_problem(raw)
    if problem is not None:
        raise ConfigurationError(problem)
    return raw


# ---------------------------------------------------------------------------- the compile cache (read at compile time)


def _size_problem(raw: str) -> tuple[int | None, str | None]:
    """(bytes, None) for a valid NEURENIX_COMPILE_CACHE_MAX_BYTES, else (None, why)."""
    text = raw.strip().upper().removesuffix("B").removesuffix("I")  # "2G", "2GB", "2GiB"
    unit = text[-1:] if text[-1:] in _SIZE_SUFFIXES and text[-1:] else ""
    digits = text[: len(text) - len(unit)].strip()
    if not digits.isdigit() or len(digits) > 15:
        return None, (f"NEURENIX_COMPILE_CACHE_MAX_BYTES={raw!r} is not a size: give bytes or a number with K, M or G "
                      "(e.g. 512M, 2G)")
    value = int(digits) * _SIZE_SUFFIXES[unit]
    if value < COMPILE_CACHE_MIN_BYTES:
        return None, f"NEURENIX_COMPILE_CACHE_MAX_BYTES={raw!r} is below the 1M minimum: give at least 1M (or NEURENIX_COMPILE_CACHE=0 to turn the cache off)"
    return value, None


def _compile_cache_settings(r: _Reader) -> None:
    """For the doctor and import-time validation; the values are read again at each compile."""
    enabled = _flag(r, "NEURENIX_COMPILE_CACHE") if (r.raw("NEURENIX_COMPILE_CACHE") or "").strip() else True
    if not (r.raw("NEURENIX_COMPILE_CACHE") or "").strip():
        r.note("NEURENIX_COMPILE_CACHE", int(enabled))
    key = "NEURENIX_COMPILE_CACHE_MAX_BYTES"
    raw = (r.raw(key) or "").strip()
    value, problem = _size_problem(raw) if raw else (COMPILE_CACHE_DEFAULT_BYTES, None)
    if problem is not None:
        r.error(key, problem)
    r.note(key, value or COMPILE_CACHE_DEFAULT_BYTES)


def compile_cache_enabled(env: Mapping[str, str] | None = None) -> bool:
    """NEURENIX_COMPILE_CACHE of ``env`` now (default on); ConfigurationError on a non-boolean."""
    raw = ((os.environ if env is None else env).get("NEURENIX_COMPILE_CACHE") or "").strip().lower()
    if raw in _TRUE or not raw:
        return True
    if raw in _FALSE:
        return False
    raise ConfigurationError(f"NEURENIX_COMPILE_CACHE={raw!r} is not a boolean: set it to 0 (off) or 1 (on), or unset it")


def compile_cache_limit(env: Mapping[str, str] | None = None) -> int:
    """NEURENIX_COMPILE_CACHE_MAX_BYTES of ``env`` now, in bytes (default 2 GiB); ConfigurationError
    on a malformed or too small value."""
    raw = ((os.environ if env is None else env).get("NEURENIX_COMPILE_CACHE_MAX_BYTES") or "").strip()
    if not raw:
        return COMPILE_CACHE_DEFAULT_BYTES
    value, problem = _size_problem(raw)
    if value is None:
        raise ConfigurationError(str(problem))
    return value
