"""Whole-model compilation through real JAX/XLA (emulated TPU on the CPU platform)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from neurenix_tpu.compiled import RECOMPILE_WARN_AFTER, RecompilationWarning, bucket_for, compile_graph

import neurenix_core as nx
from neurenix_core.errors import CompilationError, OutOfMemoryError
from neurenix_core.graph.ir import CompileOptions, Graph


def _compile(tpu: Any, graph: Graph, index: int = 0, precision: str | None = "fp32", **extra: Any) -> Any:
    return compile_graph(tpu, graph, CompileOptions(device=nx.Device("tpu", index), precision=precision, extra=extra))


def _run(model: Any, x: np.ndarray, index: int = 0) -> np.ndarray:
    t = nx.asarray(x, device=f"tpu:{index}")
    out = model(t.native)
    assert out.devices() == t.native.devices(), "the result must live on the device the model was compiled for"
    return np.asarray(out, dtype=np.float64)


def _x(shape: tuple[int, ...], seed: int = 7) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("builder,shape", [("mlp", (4, 10)), ("cnn", (2, 3, 10, 10))])
def test_fp32_matches_float64_reference(tpu: Any, graphs: Any, builder: str, shape: tuple[int, ...]) -> None:
    graph = getattr(graphs, builder)(shape[0])
    model = _compile(tpu, graph, precision="fp32")
    x = _x(shape)
    ref = graphs.ref(graph, x)
    assert np.isfinite(ref).all()
    np.testing.assert_allclose(_run(model, x), ref, rtol=2e-5, atol=2e-5)
    assert "precision fp32" in model.summary and "HIGHEST" in model.summary and "emulated" in model.summary


@pytest.mark.parametrize("builder,shape", [("mlp", (4, 10)), ("cnn", (2, 3, 10, 10))])
def test_default_precision_is_bf16_and_says_so(tpu: Any, graphs: Any, builder: str, shape: tuple[int, ...]) -> None:
    graph = getattr(graphs, builder)(shape[0])
    model = _compile(tpu, graph, precision=None)
    x = _x(shape)
    got, ref = _run(model, x), graphs.ref(graph, x)
    assert model.precision == "bf16"
    assert "precision bf16" in model.summary and "precision='fp32'" in model.summary
    # bf16 has 8 mantissa bits: close to the reference, but measurably not float32-exact.
    np.testing.assert_allclose(got, ref, rtol=5e-2, atol=5e-2)
    assert np.abs(got - ref).max() > 1e-6


def test_conv_weights_are_laid_out_hwio_in_bf16(tpu: Any, graphs: Any) -> None:
    model = _compile(tpu, graphs.cnn(2), precision=None)
    w = model.program.params["features.0"]["weight"]
    assert w.shape == (3, 3, 3, 8) and str(w.dtype) == "bfloat16"
    assert str(model.program.params["features.1"]["running_var"].dtype) == "float32"
    assert "NHWC" in model.summary


def test_one_compile_per_shape(tpu: Any, graphs: Any) -> None:
    graph = graphs.mlp(3, seed=11)
    model = _compile(tpu, graph)
    assert model.compiles == 1  # the warm-up call compiled it
    for _ in range(3):
        _run(model, _x((3, 10)))
    assert model.compiles == 1
    other = _compile(tpu, graph.with_input_shapes((5, 10)))
    assert other.program is model.program and model.compiles == 2


def test_batch_buckets_compile_once_per_bucket(tpu: Any, graphs: Any) -> None:
    graph = graphs.mlp(1, seed=12)
    x64 = _x((40, 10))
    models = {}
    for batch in (1, 2, 3, 5, 8, 7, 20, 32, 1, 40):
        m = _compile(tpu, graph.with_input_shapes((batch, 10)), batch_buckets=(1, 8, 32))
        out = _run(m, x64[:batch])
        assert out.shape == (batch, 5)
        np.testing.assert_allclose(out, graphs.ref(graph, x64[:batch]), rtol=2e-5, atol=2e-5)
        models[batch] = m
    # buckets 1, 8, 32 and 64 (40 is beyond the largest bucket: next multiple of 32)
    assert models[1].compiles == 4
    assert "buckets [1, 8, 32]" in models[1].summary


def test_bucket_for() -> None:
    assert [bucket_for(b, (1, 8, 32)) for b in (1, 2, 8, 9, 32, 33, 65)] == [1, 8, 8, 32, 32, 64, 96]
    assert bucket_for(5, (), 4) == 8 and bucket_for(3, (8,), 4) == 8


def test_data_parallel_equals_single_device(four_devices: Any, graphs: Any) -> None:
    graph = graphs.cnn(6, seed=3)
    x = _x((6, 3, 10, 10), seed=5)
    single = _run(_compile(four_devices, graph), x)
    sharded_model = _compile(four_devices, graph, data_parallel=True)
    assert sharded_model.program.parallel == 4 and "data parallel over tpu:0..tpu:3" in sharded_model.summary
    sharded = _run(sharded_model, x)
    np.testing.assert_allclose(sharded, single, rtol=1e-6, atol=1e-6)
    # The executable really spans the four devices.
    spans = sharded_model.program.jitted(sharded_model.program.leaves, *[
        __import__("jax").device_put(np.zeros((8, 3, 10, 10), np.float32), sharded_model.program.batch_sharding)
    ])
    assert len(spans.sharding.device_set) == 4


def test_data_parallel_weights_are_charged_on_every_device(four_devices: Any, graphs: Any) -> None:
    graph = graphs.mlp(4, seed=21, sizes=(64, 128, 8))
    before = [nx.memory_stats(f"tpu:{i}").in_use for i in range(4)]
    model = _compile(four_devices, graph, data_parallel=True)
    weights = sum(a.nbytes for p in model.program.lowered.params.values() for a in p.values())
    after = [nx.memory_stats(f"tpu:{i}").in_use for i in range(4)]
    assert [a - b for a, b in zip(after, before)] == [weights] * 4


def test_recompiling_shapes_warn_once_with_remedy(tpu: Any, graphs: Any) -> None:
    graph = graphs.mlp(1, seed=13)
    held = []  # the core keeps one compiled model per shape alive; so does this test
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for batch in range(1, RECOMPILE_WARN_AFTER + 4):
            held.append(_compile(tpu, graph.with_input_shapes((batch, 10))))
    assert held[0].compiles == RECOMPILE_WARN_AFTER + 3
    hits = [w for w in caught if issubclass(w.category, RecompilationWarning)]
    assert len(hits) == 1
    assert "batch_buckets" in str(hits[0].message) and "tpu:0" in str(hits[0].message)
    assert hits[0].filename == __file__  # the caller's line (here _compile's), not the plugin's


def test_buckets_never_warn(tpu: Any, graphs: Any) -> None:
    graph = graphs.mlp(1, seed=14)
    held = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecompilationWarning)
        for batch in range(1, RECOMPILE_WARN_AFTER + 4):
            held.append(_compile(tpu, graph.with_input_shapes((batch, 10)), batch_buckets=(8,)))
    assert held[0].compiles == 1


def test_unsupported_precision_is_refused(tpu: Any, graphs: Any) -> None:
    with pytest.raises(CompilationError, match="fp16.*'bf16' or 'fp32'"):
        _compile(tpu, graphs.mlp(1), precision="fp16")


def test_bad_data_parallel_request(tpu: Any, graphs: Any) -> None:
    with pytest.raises(CompilationError, match="data_parallel=9"):
        _compile(tpu, graphs.mlp(1), data_parallel=9)


def test_compile_refuses_weights_over_the_memory_limit(four_devices: Any, graphs: Any) -> None:
    graph = graphs.mlp(1, seed=15, sizes=(256, 256, 4))
    nx.set_memory_limit("tpu:3", 4096)
    try:
        with pytest.raises(OutOfMemoryError, match="tpu:3"):
            _compile(four_devices, graph, index=3)
    finally:
        nx.set_memory_limit("tpu:3", None)


def test_model_on_second_device(four_devices: Any, graphs: Any) -> None:
    graph = graphs.mlp(2, seed=16)
    model = _compile(four_devices, graph, index=2)
    x = _x((2, 10))
    np.testing.assert_allclose(_run(model, x, index=2), graphs.ref(graph, x), rtol=2e-5, atol=2e-5)
    assert "tpu:2" in model.summary
