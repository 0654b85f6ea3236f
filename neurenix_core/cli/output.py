"""What the ``neurenix`` command shows besides its own output: the log and Python warnings.

Default: what a script gets (neurenix_core/_log.py): notices on a terminal, warnings shown.
``--verbose``: every record of the ``"neurenix"`` logger, DEBUG up, on stderr as
``<logger>: <message>``, piped or not. ``--quiet``: errors only; the ``"neurenix"`` logger is
set to ERROR (no notice, no progress bar) and warnings are not shown.
Warnings read ``neurenix: warning: <Category>: <message>``, one line each, not Python's
``file:line`` form, which names the ``neurenix`` script rather than anything the user wrote.
Everything is restored on the way out: ``main()`` may run inside another program (the tests).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

__all__ = ["configured", "show_warning"]


def show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 file: TextIO | None = None, line: str | None = None) -> None:
    """``warnings.showwarning`` for the command: one ``neurenix: warning: <Category>: <message>`` line."""
    del filename, lineno, line  # the location is inside neurenix or the neurenix script: no use to the user
    print(f"neurenix: warning: {category.__name__}: {message}", file=file or sys.stderr, flush=True)


@contextmanager
def configured(*, verbose: bool, quiet: bool) -> Iterator[None]:
    """The command's logging and warnings for the duration of one ``main()``."""
    with warnings.catch_warnings():  # restores the filters and showwarning afterwards
        if quiet:
            warnings.simplefilter("ignore")
        warnings.showwarning = show_warning
        if not (verbose or quiet):
            yield
            return
        with _logging(verbose):
            yield


@contextmanager
def _logging(verbose: bool) -> Iterator[None]:
    import logging

    from neurenix_core._log import logger

    log = logger()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    level = logging.DEBUG if verbose else logging.ERROR
    handler.setLevel(level)
    before: Any = log.level
    log.setLevel(level)
    log.addHandler(handler)
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.setLevel(before)
