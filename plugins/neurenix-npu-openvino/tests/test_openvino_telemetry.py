"""npu (OpenVINO) and tpu (JAX) in one process: nothing forks, JAX has nothing to warn about.

OpenVINO's telemetry used to send its usage event from a forked child process, which made JAX
print ``RuntimeWarning: os.fork() was called ...`` (and risks a deadlocked child). Each case runs
in a fresh interpreter, with every warning shown, and counts forks with ``os.register_at_fork``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

SCRIPT = textwrap.dedent(
    """
    import json, os, sys, time, warnings
    forks = []
    os.register_at_fork(before=lambda: forks.append(1))
    import numpy as np
    import neurenix_core as nx

    def tpu():
        t = nx.ones((3,), device="tpu:0")
        return float((t + t).numpy().sum())

    def npu():
        n = nx.ones((3,), device="npu:0")
        return float((n + n).numpy().sum())

    def npu_torch():
        import torch
        from neurenix_npu_openvino.api import NPUBackend
        m = NPUBackend().optimize_model(torch.nn.Linear(4, 2), precision="fp32", example_input=torch.ones(1, 4))
        return float(np.asarray(m(np.ones((1, 4), np.float32)).numpy()).shape[-1])

    steps = {"tpu": tpu, "npu": npu, "npu_torch": npu_torch}
    results = [steps[name]() for name in sys.argv[1].split(",")]
    time.sleep(1.5)  # the telemetry sender forked from a background thread, soon after the import
    print(json.dumps({"forks": len(forks), "results": results, "openvino": "openvino" in sys.modules}))
    """
)


def _run(order: str) -> tuple[dict[str, Any], str]:
    env = {**os.environ, "NEURENIX_EMULATE": "tpu,npu", "JAX_PLATFORMS": "cpu", "PYTHONWARNINGS": "always"}
    proc = subprocess.run([sys.executable, "-W", "always", "-c", SCRIPT, order], capture_output=True, text=True, timeout=300, env=env, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


@pytest.mark.parametrize("order", ["tpu,npu", "npu,tpu", "tpu,npu_torch"])
def test_npu_and_tpu_in_one_process_do_not_fork(order: str) -> None:
    out, stderr = _run(order)
    assert out["openvino"] is True, "the case must really start OpenVINO"
    assert all(r > 0 for r in out["results"])
    assert "os.fork() was called" not in stderr, stderr[-2000:]
    assert out["forks"] == 0, f"{out['forks']} fork(s) in a process running JAX and OpenVINO"


def test_a_program_that_loaded_openvino_first_keeps_its_telemetry_choice() -> None:
    code = (
        "import sys, openvino\n"
        "from neurenix_npu_openvino.telemetry import keep_telemetry_out, telemetry_blocked\n"
        "before = sys.modules.get('openvino_telemetry')\n"
        "print(keep_telemetry_out(), telemetry_blocked(), sys.modules.get('openvino_telemetry') is before)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["False", "False", "True"]
