"""The tpu plugin's piece of the persistent compile cache: a second process loads the exported
lowering (no tracing) and XLA's program from JAX's persistent cache, with bit-identical results;
the key follows the precision; NEURENIX_COMPILE_CACHE=0 leaves JAX's cache settings alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import compile_cache_child as child
import numpy as np
from neurenix_tpu.compiled import compile_graph

import neurenix_core as nx


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


def test_compile_ahead_then_the_first_call_compiles_nothing(tpu: Any, graphs: Any) -> None:
    """nx.compile compiles the XLA program ahead of time without running the model; the first
    call then runs it without compiling anything (one execution in all, not a warm-up run and a
    call), and gives the reference's result."""
    import jax

    from neurenix_core.graph.ir import CompileOptions

    compiles: list[str] = []  # JAX's compile steps (tracing, lowering, XLA's compile), whatever JAX's cache does

    def listen(event: str, duration: float, **_: Any) -> None:
        if event.startswith("/jax/core/compile/"):
            compiles.append(event)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        graph = graphs.mlp(3, seed=31, sizes=(10, 24, 5))
        model = compile_graph(tpu, graph, CompileOptions(device=nx.Device("tpu", 0), precision="fp32", extra={}))
        assert model.compiles == 1 and model.program.jitted._cache_size() == 0  # compiled, nothing called yet
        assert compiles, "nx.compile traced and lowered the program"
        before = len(compiles)
        x = np.random.default_rng(3).standard_normal((3, 10)).astype(np.float32)
        out = np.asarray(model._run(jax.device_put(x, tpu._native_device(0))))
        assert compiles[before:] == []  # the first call found the executable: no tracing, lowering or compile
        assert model.compiles == 1 and model.program.jitted._cache_size() == 1
        np.testing.assert_allclose(out, graphs.ref(graph, x), rtol=2e-5, atol=2e-5)
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
