"""The one place where text a plugin hands the core is bounded and made printable.

Plugin names, distributions and versions (from dist-info), manifest fields, probe reasons and the
texts of the exceptions recorded as causes all end up in ``neurenix doctor``'s table, its
``--json`` document and error messages. A plugin is third-party code: its text may be 10 MB long,
carry terminal escapes (``ESC[2J`` clears the user's screen, OSC 8 forges links) or bidi controls
that make a line read differently from what it says. Everything passes through :func:`clean`
on its way in, so no other module has to think about it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any, Final

from neurenix_core.plugins.manifest import Capabilities, Manifest, ProbeResult

__all__ = ["CAUSE_LIMIT", "NAME_LIMIT", "TEXT_LIMIT", "clean", "clean_manifest", "clean_probe", "describe"]

#: Plugin names, distributions, versions, device types, tokens.
NAME_LIMIT: Final = 100
#: One sentence a user reads: probe reasons, install hints, descriptions.
TEXT_LIMIT: Final = 500
#: A failure's cause: the core's own sentence around a plugin's exception text.
CAUSE_LIMIT: Final = 1000


@functools.cache
def _patterns() -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    """Compiled on the first text that needs cleaning (compiling costs ~0.5 ms of import time,
    and plain plugin text never needs them).

    Whole escape sequences go first (CSI ``ESC [ ... final``, OSC/DCS/PM/APC ``ESC ] ... BEL|ST``,
    two-byte ``ESC x``), so that no visible debris such as ``[31m`` is left behind; then any
    remaining C0/C1 control (newline and tab included: a cause is one line) becomes a space, and
    bidi/zero-width format characters are dropped.
    """
    escapes = re.compile(
        r"\x1b\[[0-?]*[ -/]*[@-~]?"
        r"|\x1b[\]PX^_].*?(?:\x07|\x1b\\|$)"
        r"|\x1b[@-Z\\-_]?"
        r"|\x9b[0-?]*[ -/]*[@-~]?"
        r"|[\x90\x98\x9d\x9e\x9f].*?(?:\x07|\x9c|$)",
        re.DOTALL,
    )
    controls = re.compile(r"[\x00-\x1f\x7f-\x9f]+")
    invisible = re.compile("[\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")
    return escapes, controls, invisible

#: Entries kept of a plugin-declared list or mapping (capabilities, ``extra``): enough for any real one.
ITEMS_LIMIT: Final = 1000
# Only this many characters of an over-long text are scanned at all: a 10 MB reason costs a slice.
_SCAN_FACTOR: Final = 4


def clean(value: object, limit: int = TEXT_LIMIT) -> str:
    """``value`` as one printable line of at most ``limit`` characters (plus a truncation note).

    Never raises: a value whose ``str()`` raises is described by its type instead.
    """
    text = value if type(value) is str else _safe_str(value)
    if text.isprintable() and len(text) <= limit:
        return text  # the common case: plain ASCII/Unicode text, one C-level scan
    size, scanned = len(text), limit * _SCAN_FACTOR
    escapes, controls, invisible = _patterns()
    text = invisible.sub("", controls.sub(" ", escapes.sub("", text[:scanned]))).strip()
    if len(text) > limit or size > scanned:
        return f"{text[:limit].rstrip()}... [truncated: {size} characters]"
    return text


def describe(exc: BaseException, limit: int = CAUSE_LIMIT) -> str:
    """``"TypeName: message"`` of a plugin's exception, bounded and printable.

    ``str(exc)`` runs the plugin's own ``__str__``, which may raise or return anything.
    """
    return clean(f"{clean(type(exc).__name__, NAME_LIMIT)}: {_safe_str(exc)}", limit)


def _safe_str(value: object) -> str:
    try:
        text = str(value)
    except Exception as exc:  # noqa: BLE001 - a hostile __str__ must not break discovery
        return f"<unprintable {type(value).__name__}: str() raised {type(exc).__name__}>"
    return text if type(text) is str else f"<unprintable {type(value).__name__}>"


def clean_manifest(m: Manifest) -> Manifest:
    """The validated manifest with every free-text field cleaned (the same object when all are clean).

    ``name`` and ``device_types`` are already restricted to ``[a-z0-9_-]`` by validation; ``exports``
    are module names the facade imports, never printed, and are left exactly as declared.
    """
    changes: dict[str, Any] = {}
    for field, limit in (("distribution", NAME_LIMIT), ("version", NAME_LIMIT), ("api", NAME_LIMIT),
                         ("install_hint", TEXT_LIMIT), ("description", TEXT_LIMIT)):
        _changed(changes, field, getattr(m, field), clean(getattr(m, field), limit))
    if m.emulation is not None:
        _changed(changes, "emulation", m.emulation, clean(m.emulation, NAME_LIMIT))
    caps = _clean_capabilities(m.capabilities)
    if caps is not m.capabilities:
        changes["capabilities"] = caps
    return m.replace(**changes) if changes else m


def clean_probe(result: ProbeResult) -> ProbeResult:
    """The probe's answer with its reason cleaned; ``details`` go back to the plugin's own factory
    unchanged and are never printed by the core."""
    reason = clean(result.reason, TEXT_LIMIT)
    return result if reason == result.reason else result.replace(reason=reason)


def _changed(changes: dict[str, Any], field: str, old: object, new: object) -> None:
    if new != old:
        changes[field] = new


def _clean_capabilities(c: Capabilities) -> Capabilities:
    changes: dict[str, Any] = {}
    for field in ("dtypes", "precisions", "native_ops", "quantization"):
        _changed(changes, field, getattr(c, field), _clean_data(getattr(c, field), 2))
    _changed(changes, "extra", c.extra, _clean_data(c.extra, 4))
    if c.compile_options is not None:  # names and values are restricted by validation; the one-line docs are free text
        docs = tuple(o if clean(o.doc, TEXT_LIMIT) == o.doc else o.replace(doc=clean(o.doc, TEXT_LIMIT)) for o in c.compile_options)
        _changed(changes, "compile_options", c.compile_options, docs)
    return c.replace(**changes) if changes else c


def _clean_data(value: Any, depth: int) -> Any:
    """JSON-like plugin data (it reaches ``doctor --json``) with strings cleaned and sizes bounded."""
    if isinstance(value, str):
        return clean(value, TEXT_LIMIT)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if depth <= 0:
        return clean(value, NAME_LIMIT)
    if isinstance(value, Mapping):
        if _plain_strings(value.keys(), NAME_LIMIT):
            values = {k: _clean_data(v, depth - 1) for k, v in value.items()}
            return value if all(values[k] is v for k, v in value.items()) else values
        items = list(value.items())[:ITEMS_LIMIT]
        return {clean(k, NAME_LIMIT): _clean_data(v, depth - 1) for k, v in items}
    if isinstance(value, (list, tuple)):
        if _plain_strings(value, TEXT_LIMIT):
            return value
        return (list if isinstance(value, list) else tuple)(_clean_data(v, depth - 1) for v in value[:ITEMS_LIMIT])
    return clean(value, NAME_LIMIT)


def _plain_strings(items: Any, limit: int) -> bool:
    """True when ``items`` are few enough, all strings, printable and short: checked at C speed
    (a first-party manifest lists a hundred op names; cleaning each one cost ~0.3 ms per import)."""
    if len(items) > ITEMS_LIMIT:
        return False
    try:
        joined = "".join(items)
    except TypeError:  # not all strings
        return False
    return joined.isprintable() and max(map(len, items), default=0) <= limit
