"""Running Coral's ``edgetpu_compiler`` on a written model, where it is installed.

The compiler is a closed-source x86-64 binary; we never require it. When it is on PATH the int8
writer's output goes through it and we report how many ops it mapped to the Edge TPU (the rest
run on the host CPU inside LiteRT).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from neurenix_core.errors import CompilationError

__all__ = ["CompilerReport", "parse_log", "run_edgetpu_compiler"]

_MAPPED = re.compile(r"Number of operations that will run on Edge TPU:\s*(\d+)")
_CPU = re.compile(r"Number of operations that will run on CPU:\s*(\d+)")


@dataclass(frozen=True, slots=True)
class CompilerReport:
    mapped: int
    total: int
    log: str
    compiled: bytes | None


def parse_log(log: str) -> tuple[int, int]:
    """(ops on the Edge TPU, total ops) from edgetpu_compiler's summary."""
    mapped, cpu = _MAPPED.search(log), _CPU.search(log)
    if mapped is None:
        raise CompilationError(f"edgetpu_compiler gave no op summary; its output was:\n{log}")
    on_tpu = int(mapped.group(1))
    return on_tpu, on_tpu + (int(cpu.group(1)) if cpu else 0)


def run_edgetpu_compiler(data: bytes, *, timeout: float = 120.0) -> CompilerReport | None:
    """Compile with edgetpu_compiler when it is on PATH; None when it is not installed."""
    exe = shutil.which("edgetpu_compiler")
    if exe is None:
        return None
    with tempfile.TemporaryDirectory(prefix="neurenix-edgetpu-") as tmp:
        src = Path(tmp, "model.tflite")
        src.write_bytes(data)
        proc = subprocess.run([exe, "-s", "-o", tmp, str(src)], capture_output=True, text=True, timeout=timeout, check=False)
        log = proc.stdout + proc.stderr
        if proc.returncode != 0:
            raise CompilationError(f"edgetpu_compiler rejected the written model (exit {proc.returncode}):\n{log}")
        mapped, total = parse_log(log)
        out = Path(tmp, "model_edgetpu.tflite")
        return CompilerReport(mapped, total, log, out.read_bytes() if out.exists() else None)
