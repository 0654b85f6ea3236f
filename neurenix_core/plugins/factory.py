"""Starting a plugin's backend under a deadline, with a progress line when it is slow.

``neurenix_backend`` is plugin code called on first use of a device (``nx.ones(..., device=
"tpu:0")``); it imports a framework, which takes seconds, and a broken driver can make it block
forever. The factory therefore runs in a daemon thread while the caller waits, at most
``NEURENIX_BACKEND_TIMEOUT`` seconds (default 120: generous, since ``import torch`` on a cold
disk takes tens of seconds). After a few seconds one line on stderr says what it is doing
("starting backend tpu (importing jax)..."), so a slow start is not mistaken for a hang.

A thread cannot be killed: a factory that overruns is abandoned, still running, and the registry
remembers it so that no second one is started. The thread costs ~0.1 ms once per backend per
process; the hot path (a backend already started) never comes here.
"""

from __future__ import annotations

import contextvars
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any, Final, TextIO

__all__ = ["NOTICE_AFTER", "FactoryTimeout", "run_with_deadline"]

#: Seconds before the first progress line: a normal start (numpy, a warm import) never prints.
NOTICE_AFTER: Final = 3.0
#: Seconds between later progress lines.
NOTICE_EVERY: Final = 20.0


class FactoryTimeout(Exception):
    """The factory did not return in time; ``doing`` says what it was doing when abandoned."""

    def __init__(self, doing: str) -> None:
        super().__init__(doing)
        self.doing = doing


class _Run:
    __slots__ = ("done", "ok", "thread", "value")

    def __init__(self, call: Callable[[], Any], name: str) -> None:
        self.done = threading.Event()
        self.ok = False
        self.value: Any = None
        # The caller's context variables (default device, fallback policy) apply inside the factory.
        ctx = contextvars.copy_context()
        self.thread = threading.Thread(target=ctx.run, args=(self._run, call), name=f"neurenix-backend-{name}", daemon=True)
        self.thread.start()

    def _run(self, call: Callable[[], Any]) -> None:
        try:
            self.value, self.ok = call(), True
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            self.value = exc
        finally:
            self.done.set()


def run_with_deadline(
    call: Callable[[], Any], *, name: str, package: str, timeout: float, stream: TextIO | None = None
) -> Any:
    """``call()`` in a worker thread; its result, its exception, or FactoryTimeout after ``timeout`` s.

    A caller that is itself in the middle of an import (a module that creates tensors at import
    time) runs the factory inline, without the deadline: it holds that module's import lock, and
    a worker importing the same module would wait for it while the caller waits for the worker.
    """
    if _inside_import(sys._getframe(1)):
        return call()
    run = _Run(call, name)
    start = time.monotonic()
    wait = min(NOTICE_AFTER, timeout)
    while not run.done.wait(wait):
        elapsed = time.monotonic() - start
        doing = _doing(run.thread, package)
        if elapsed >= timeout:
            raise FactoryTimeout(doing)
        when = "" if elapsed < NOTICE_AFTER + NOTICE_EVERY / 2 else f" ({elapsed:.0f}s of NEURENIX_BACKEND_TIMEOUT={timeout:g})"
        _notice(f"starting backend {name} ({doing}){when}...", stream)
        wait = min(NOTICE_EVERY, timeout - elapsed)
    if run.ok:
        return run.value
    raise run.value


def _notice(text: str, stream: TextIO | None) -> None:
    """To ``stream`` when one is given; else an INFO record of neurenix.plugins, on stderr (piped
    too: a CI log must not look hung) where no handler is configured (neurenix_core/_log.py)."""
    if stream is not None:
        print(f"neurenix: {text}", file=stream, flush=True)
        return
    from neurenix_core._log import notice

    notice("plugins", text, terminal_only=False)


def _inside_import(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code.co_name == "_find_and_load" and "importlib" in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False


def _doing(thread: threading.Thread, package: str) -> str:
    """"importing jax" when the factory is inside an import, else the function it is running."""
    frames: dict[int, FrameType] = getattr(sys, "_current_frames", dict)()
    frame: FrameType | None = frames.get(thread.ident) if thread.ident is not None else None
    importing: str | None = None
    innermost = frame
    while frame is not None:
        if frame.f_code.co_name == "_find_and_load" and "importlib" in frame.f_code.co_filename:
            module = frame.f_locals.get("name")
            # The outermost import of somebody else's package is the framework being loaded.
            if isinstance(module, str) and module.split(".")[0] not in (package, "neurenix_core"):
                importing = module
        frame = frame.f_back
    if importing is not None:
        return f"importing {importing}"
    if innermost is None:
        return "finishing"
    return f"running {innermost.f_code.co_name} in {innermost.f_globals.get('__name__', '?')}"
