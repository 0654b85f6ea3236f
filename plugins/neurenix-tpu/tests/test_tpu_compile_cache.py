"""The tpu plugin's piece of the persistent compile cache: a second process loads the exported
lowering (no tracing) and XLA's program from JAX's persistent cache, with bit-identical results;
the key follows the precision; NEURENIX_COMPILE_CACHE=0 leaves JAX's cache settings alone."""

from __future__ import annotations

from pathlib import Path

import compile_cache_child as child


def test_second_process_hits_with_identical_results(tmp_path: Path) -> None:
    cold = child.run(tmp_path, "tpu:0")
    warm = child.run(tmp_path, "tpu:0")
    assert "compile cache (lowering): miss" in cold["summary"] and "stored them in the persistent cache" in cold["summary"], cold
    assert "compile cache (lowering): hit" in warm["summary"], warm["summary"]
    assert "XLA's compiled program loaded from the persistent cache" in warm["summary"], warm["summary"]
    assert warm["sha256"] == cold["sha256"]
    assert any((tmp_path / "compile_cache" / "runtime" / "jax").iterdir())  # JAX's own entries, inside neurenix's folder
    fp32 = child.run(tmp_path, "tpu:0", "fp32")  # another precision: another lowering and program
    assert "compile cache (lowering): miss" in fp32["summary"] and "precision fp32" in fp32["summary"]
    assert fp32["sha256"] != cold["sha256"]  # bf16 and fp32 really differ


def test_off_leaves_jax_alone(tmp_path: Path) -> None:
    out = child.run(tmp_path, "tpu:0", NEURENIX_COMPILE_CACHE="0")
    assert "compile cache" not in out["summary"]
    assert not (tmp_path / "compile_cache").exists()


def test_a_users_jax_cache_folder_is_kept(tmp_path: Path) -> None:
    own = tmp_path / "my-jax-cache"
    out = child.run(tmp_path / "state", "tpu:0", JAX_COMPILATION_CACHE_DIR=str(own))
    assert "compile cache (lowering): miss" in out["summary"]
    assert not (tmp_path / "state" / "compile_cache" / "runtime" / "jax").exists()


def test_cpu_host_runtime_xla_uses_jax_cache(tmp_path: Path) -> None:
    cold = child.run(tmp_path, "cpu:0", NEURENIX_CPU_RUNTIME="xla")
    warm = child.run(tmp_path, "cpu:0", NEURENIX_CPU_RUNTIME="xla")
    assert "XLA:CPU" in warm["summary"] and "XLA's compiled program loaded from the persistent cache" in warm["summary"], warm["summary"]
    assert "stored them in the persistent cache" in cold["summary"] and warm["sha256"] == cold["sha256"]
