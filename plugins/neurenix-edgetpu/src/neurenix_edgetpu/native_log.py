"""LiteRT's C++ log lines (``INFO: Created TensorFlow Lite XNNPACK delegate for CPU.``) through ``logging``.

TFLite's minimal logger writes straight to file descriptor 2 when the first interpreter of a
process allocates its tensors, and LiteRT's Python API has no severity setting (the C symbol that
sets it is not exported by the wheel, and ``TF_CPP_MIN_LOG_LEVEL`` is not read by that logger).
So only around ``allocate_tensors`` fd 2 points at a temporary file; what LiteRT wrote there is
logged on the ``neurenix_edgetpu.litert`` logger at the level its prefix names (INFO, WARNING,
ERROR). Python's last-resort handler still prints WARNING and above when the application
configured no logging, so LiteRT's errors stay visible and only its INFO chatter goes quiet.

A lock serialises the redirections: two threads allocating at once would otherwise restore fd 2
in the wrong order.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from typing import Final

__all__ = ["LOGGER", "native_stderr_to_logging"]

LOGGER: Final = "neurenix_edgetpu.litert"
_LEVELS: Final = {"INFO": logging.INFO, "WARNING": logging.WARNING, "ERROR": logging.ERROR, "VERBOSE": logging.DEBUG}
_lock = threading.Lock()


def _level(line: str) -> tuple[int, str]:
    prefix, sep, rest = line.partition(": ")
    level = _LEVELS.get(prefix.strip()) if sep else None
    # A line without a known prefix is not LiteRT's minimal logger: kept at WARNING, so it is seen.
    return (level, rest) if level is not None else (logging.WARNING, line)


def _log(text: str) -> None:
    logger = logging.getLogger(LOGGER)
    for line in text.splitlines():
        if line.strip():
            level, message = _level(line)
            logger.log(level, "LiteRT: %s", message)


@contextlib.contextmanager
def native_stderr_to_logging() -> Iterator[None]:
    """Inside the block, what native code writes to fd 2 goes to the ``neurenix_edgetpu.litert`` logger."""
    with _lock, tempfile.TemporaryFile(mode="w+b") as capture:
        sys.stderr.flush()  # Python's buffered text written before the block goes to the real stderr
        saved = os.dup(2)
        try:
            os.dup2(capture.fileno(), 2)
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            _log(capture.read().decode("utf-8", "replace"))
