"""The examples and the benchmark run as users run them: fresh processes, emulated TPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
ENV = dict(
    {k: v for k, v in os.environ.items() if not k.startswith(("NEURENIX_", "XLA_", "JAX_"))},
    NEURENIX_EMULATE="tpu", JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=4",
)


def _run(*args: str, timeout: int = 600) -> str:
    proc = subprocess.run([sys.executable, *args], cwd=REPO, env=ENV, check=False, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{args} failed:\n{proc.stdout}\n{proc.stderr[-3000:]}"
    return proc.stdout


def test_quickstart_example() -> None:
    out = _run("examples/tpu_quickstart.py")
    assert "matmul on tpu:0: [[19, 22], [43, 50]]" in out
    assert "precision fp32" in out and "emulated=True" in out


def test_data_parallel_example() -> None:
    out = _run("examples/tpu_data_parallel.py")
    assert "4 TPU device(s)" in out and "data parallel over tpu:0..tpu:3" in out


def test_quickstart_without_tpu_says_why() -> None:
    env = {k: v for k, v in ENV.items() if k != "NEURENIX_EMULATE"}
    proc = subprocess.run([sys.executable, "examples/tpu_quickstart.py"], cwd=REPO, env=env, check=False, capture_output=True, text=True, timeout=120)
    if proc.returncode == 0:  # pragma: no cover - a real TPU is attached
        return
    assert proc.returncode == 1 and "libtpu" in proc.stderr and "NEURENIX_EMULATE=tpu" in proc.stderr


def test_benchmark_quick(tmp_path: Path) -> None:
    target = tmp_path / "tpu.json"
    out = _run("benchmarks/tpu.py", "--quick", "--threads", "1", "--models", "mlp", "--json", str(target))
    rows = json.loads(target.read_text())["rows"]
    assert {(r["precision"], r["batch"]) for r in rows} == {("fp32", 1), ("fp32", 32), ("bf16", 1), ("bf16", 32)}
    for r in rows:
        assert r["neurenix_us"] > 0 and r["native_us"] > 0 and r["plugin_us"] > 0 and r["threads"] == 1 and r["emulated"] is True
        assert r["max_abs_diff"] < 1e-5, "neurenix and the hand-written JAX model must compute the same thing"
        assert r["refused"] is None and r["neurenix_config"]["matmul_precision"] == ("HIGHEST" if r["precision"] == "fp32" else "DEFAULT")
    assert "plugin / JAX" in out


def test_models_benchmark_quick(tmp_path: Path) -> None:
    """Imported ResNet block vs its hand-written jax.jit: same configuration, same numbers."""
    target = tmp_path / "tpu_models.json"
    _run("benchmarks/tpu_models.py", "--quick", "--threads", "1", "--batches", "1", "--models", "resnet_block", "--json", str(target))
    rows = json.loads(target.read_text())["rows"]
    assert {r["precision"] for r in rows} == {"fp32", "bf16"} and all(r["model"] == "resnet_block" for r in rows)
    for r in rows:
        assert r["refused"] is None and r["ratio"] > 0 and r["emulated"] is True
        assert r["max_abs_diff"] < (1e-5 if r["precision"] == "fp32" else 2e-2), "both sides must compute the same model"
        assert r["rel_err_vs_torch"] < (1e-4 if r["precision"] == "fp32" else 5e-2)
