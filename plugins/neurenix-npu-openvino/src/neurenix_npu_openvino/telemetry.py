"""OpenVINO's usage telemetry is kept out of the processes this plugin starts OpenVINO in.

``import openvino`` (through ``openvino.tools.ovc``) and every ``openvino.convert_model`` call
send a usage event. On Linux the ``openvino_telemetry`` package sends it from a *forked* child
process (multiprocessing's default start method), started from a background thread. Forking a
process that runs JAX/XLA, OpenVINO or PyTorch thread pools can deadlock the child, and JAX says
so when the npu and tpu plugins share a process (``RuntimeWarning: os.fork() was called ...
JAX is multithreaded``), however the two are ordered: the fork happens in a thread, at a moment
nobody controls. So the fork is stopped, not moved.

OpenVINO is written to run without that package: each of its ``import openvino_telemetry``
sites falls back to ``openvino.tools.ovc.telemetry_stub`` (no-op methods). A ``None`` entry in
``sys.modules`` is Python's documented way to make an import fail, so the plugin sets one
before its first ``import openvino``. Nothing is written to the user's consent file.

A program that imported ``openvino`` or ``openvino_telemetry`` itself before neurenix started
the npu backend keeps OpenVINO's own behaviour: a choice made before us is not undone.
"""

from __future__ import annotations

import sys

__all__ = ["TELEMETRY_MODULE", "keep_telemetry_out", "telemetry_blocked"]

TELEMETRY_MODULE = "openvino_telemetry"


def keep_telemetry_out() -> bool:
    """Make ``import openvino_telemetry`` fail in this process unless OpenVINO is already loaded.

    Returns True when the block is in place (set now or earlier), False when OpenVINO or its
    telemetry package had been imported before (their behaviour is then left unchanged).
    """
    if TELEMETRY_MODULE in sys.modules:
        return sys.modules[TELEMETRY_MODULE] is None
    if "openvino" in sys.modules:
        return False
    sys.modules[TELEMETRY_MODULE] = None  # type: ignore[assignment]
    return True


def telemetry_blocked() -> bool:
    """Whether OpenVINO runs with its no-op telemetry stub in this process."""
    return TELEMETRY_MODULE in sys.modules and sys.modules[TELEMETRY_MODULE] is None
