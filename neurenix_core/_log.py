"""What neurenix reports, through one :mod:`logging` hierarchy rooted at ``"neurenix"``.

``logging.getLogger("neurenix")`` is the whole of it for a user: its children name the concern
(``neurenix.compile``: compile progress and the host runtime chosen for cpu:0;
``neurenix.plugins``: a backend that is slow to start; ``neurenix.quantization``: calibration;
``neurenix.generation``: text generation; ``neurenix.importers.torch``: torch.export's lines that
neurenix says better, at DEBUG). Problems stay Python warnings (``FallbackWarning``,
``NeurenixWarning``) and errors stay exceptions; the log carries what neurenix says while it works.

As a library should, neurenix gives ``"neurenix"`` a ``NullHandler`` and nothing else; the
``neurenix`` command configures handlers (``--verbose``, ``--quiet``). One thing on top: where
nothing configures logging for neurenix, a notice a newcomer needs (a first compile measuring
runtimes for seconds looks hung without it) is still written to stderr as ``neurenix: <text>``,
on a terminal only where it says so. Setting the ``"neurenix"`` logger's level above INFO
silences those notices and the progress bars too; configuring a handler hands them to logging.
The edgetpu plugin's relay of LiteRT's C++ lines stays on its own ``neurenix_edgetpu.litert``
logger: its WARNING and ERROR lines rely on Python's last-resort handler, which the NullHandler
would turn off below ``"neurenix"``.

:mod:`logging` is imported on first use, never at ``import neurenix_core`` (it costs a few
milliseconds that numpy does not pay either), so nothing imported by ``neurenix_core`` may import
it at module level: call :func:`logger`.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import logging

__all__ = ["ROOT", "logger", "notice", "progress", "shows_progress"]

#: The root of neurenix's logger hierarchy.
ROOT = "neurenix"

_INFO = 20  # logging.INFO, without importing logging to compare with it


def logger(concern: str = "") -> logging.Logger:
    """``logging.getLogger("neurenix")`` (with its NullHandler), or its child ``concern``."""
    import logging

    root = logging.getLogger(ROOT)
    if not any(isinstance(h, logging.NullHandler) for h in root.handlers):
        root.addHandler(logging.NullHandler())
    return root.getChild(concern) if concern else root


def notice(concern: str, message: str, *, terminal_only: bool = True) -> None:
    """``message`` as an INFO record of ``neurenix.<concern>``; where no handler is configured
    for it, also ``neurenix: <message>`` on stderr (on a terminal only, by default), unless the
    neurenix logger's level was set above INFO."""
    log = logger(concern)
    log.info(message)
    if _handled(log) or not _allows_info(log) or sys.stderr is None:  # None: pythonw, print would pick stdout
        return
    if terminal_only and not _terminal():
        return
    print(f"neurenix: {message}", file=sys.stderr, flush=True)


def shows_progress(concern: str) -> bool:
    """Whether a progress bar may be drawn: stderr is a terminal and neurenix's logger level,
    where one is set, lets INFO through (``neurenix --quiet`` sets ERROR)."""
    return _terminal() and _allows_info(logger(concern))


def progress(concern: str, *columns: Any) -> Any:
    """A transient rich ``Progress`` drawn on stderr, or None where :func:`shows_progress` says
    no: nothing is written to stdout, and nothing at all when stderr is piped."""
    if not shows_progress(concern):
        return None
    from rich.console import Console
    from rich.progress import Progress  # rich is a core dependency; imported only while a bar is drawn

    return Progress(*columns, console=Console(stderr=True), transient=True)


def _terminal() -> bool:
    isatty = getattr(sys.stderr, "isatty", None)  # a replaced sys.stderr may have none
    return bool(isatty is not None and isatty())


def _handled(log: logging.Logger) -> bool:
    """Whether a handler other than a NullHandler would see ``log``'s records (the user's own
    logging configuration, or the ``neurenix`` command's)."""
    import logging

    current: logging.Logger | None = log
    while current is not None:
        if any(not isinstance(h, logging.NullHandler) for h in current.handlers):
            return True
        if not current.propagate:
            return False
        current = current.parent
    return False


def _allows_info(log: logging.Logger) -> bool:
    """INFO passes the first level set between ``log`` and ``"neurenix"`` (none set: it does;
    the root logger's WARNING default is not a choice made for neurenix)."""
    current: logging.Logger | None = log
    while current is not None:
        if current.level:
            return current.level <= _INFO
        if current.name == ROOT:
            return True
        current = current.parent
    return True
