"""Loading existing .tflite files, bad files, compiled-for-Edge-TPU files, devices and threads."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
import tflite
from edgetpu_helpers import cnn_graph, forward, mlp_graph
from neurenix_edgetpu.compiled import compile_graph, load_model
from neurenix_edgetpu.lowering import lower
from neurenix_edgetpu.tflite_writer import ModelBuilder, TensorQuant

from neurenix_core.device import Device
from neurenix_core.errors import BackendUnavailableError, FallbackError, ModelFormatError, ShapeError
from neurenix_core.graph.ir import CompileOptions


def test_load_existing_int8_file_quantizes_and_dequantizes_at_the_edges(edgetpu, tmp_path):
    # An int8 model with NHWC input as a converter would write it (no neurenix layout handling).
    m = ModelBuilder()
    q_in, q_out = TensorQuant.per_tensor(0.05, 3), TensorQuant.per_tensor(0.05, 3)
    x = m.tensor("image", (1, 4, 4, 2), np.int8, quant=q_in)
    y = m.tensor("pooled", (1, 2, 2, 2), np.int8, quant=q_out)
    from neurenix_edgetpu import tflite_writer as w

    m.op(tflite.BuiltinOperator.MAX_POOL_2D, [x], [y], version=2, options_type=w.OPTIONS.Pool2DOptions, options=w.pool_options((2, 2), (2, 2), tflite.Padding.VALID))
    path = tmp_path / "pool.tflite"
    path.write_bytes(m.finish([x], [y]))
    model = load_model(path, edgetpu)
    data = np.random.default_rng(0).uniform(-3, 3, (1, 4, 4, 2)).astype(np.float32)
    out = model(data)
    ref = data.reshape(1, 2, 2, 2, 2, 2).max(axis=(2, 4))
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, ref, atol=0.025 + 1e-6)  # half a quantization step
    assert "pool.tflite" in model.summary and "emulated" in model.summary


def test_round_trip_save_and_load(edgetpu, tmp_path):
    graph = mlp_graph()
    model = compile_graph(edgetpu, graph, CompileOptions(device=Device("edgetpu", 0), precision="fp32"))
    path = model.save(tmp_path / "mlp.tflite")
    again = load_model(path, edgetpu)
    x = np.random.default_rng(1).normal(size=(1, 16)).astype(np.float32)
    np.testing.assert_array_equal(again(x), model(x))
    assert again.info.signatures == ("serving_default",)


@pytest.mark.parametrize("damage", ["truncate", "garbage", "identifier", "empty"])
def test_bad_files_fail_before_the_interpreter(edgetpu, tmp_path, damage):
    data = lower(cnn_graph(), "fp32").data
    bad = {
        "truncate": data[: len(data) // 3],
        "garbage": os.urandom(4096),
        "identifier": data[:4] + b"XXXX" + data[8:],
        "empty": b"",
    }[damage]
    path = tmp_path / f"{damage}.tflite"
    path.write_bytes(bad)
    with pytest.raises(ModelFormatError, match=f"{damage}.tflite"):
        load_model(path, edgetpu)


def test_truncated_flatbuffer_keeps_the_parser_error_as_cause(edgetpu):
    data = lower(mlp_graph(), "fp32").data
    with pytest.raises(ModelFormatError) as info:
        load_model(data[:200], edgetpu)
    assert info.value.__cause__ is not None


def _edgetpu_compiled_model() -> bytes:
    # What edgetpu_compiler emits: the mapped subgraph replaced by one "edgetpu-custom-op".
    m = ModelBuilder()
    x = m.tensor("x", (1, 8), np.int8, quant=TensorQuant.per_tensor(0.1, 0))
    y = m.tensor("y", (1, 8), np.int8, quant=TensorQuant.per_tensor(0.1, 0))
    m.op(tflite.BuiltinOperator.CUSTOM, [x], [y], custom="edgetpu-custom-op")
    return m.finish([x], [y])


def test_edgetpu_compiled_model_without_delegate_names_libedgetpu(edgetpu):
    with pytest.raises(BackendUnavailableError, match=r"libedgetpu\.so\.1"):
        load_model(_edgetpu_compiled_model(), edgetpu)


def test_dynamic_shape_file_is_refused(edgetpu):
    # The same one-op model twice: with a static (1, 4) input it loads and runs; with a dynamic
    # batch (-1, 4) it is refused, since the Edge TPU runs static shapes only.
    static = ModelBuilder()
    x = static.tensor("x", (1, 4), np.float32)
    y = static.tensor("y", (1, 4), np.float32)
    static.op(tflite.BuiltinOperator.RELU, [x], [y])
    dynamic = ModelBuilder()
    x2 = dynamic.tensor("x", (-1, 4), np.float32)
    y2 = dynamic.tensor("y", (-1, 4), np.float32)
    dynamic.op(tflite.BuiltinOperator.RELU, [x2], [y2])
    with pytest.raises(ShapeError, match="static shapes"):
        load_model(dynamic.finish([x2], [y2]), edgetpu)
    assert load_model(static.finish([x], [y]), edgetpu)(np.array([[-1, 2, -3, 4]], np.float32)).tolist() == [[0, 2, 0, 4]]


def test_thread_safe_invoke(edgetpu):
    graph = cnn_graph()
    model = compile_graph(edgetpu, graph, CompileOptions(device=Device("edgetpu", 0), precision="fp32"))
    rng = np.random.default_rng(4)
    xs = [rng.normal(size=(1, 3, 16, 16)).astype(np.float32) for _ in range(8)]
    want = [model(x) for x in xs]
    errors: list[str] = []

    def worker(k: int) -> None:
        for i in range(20):
            j = (i + k) % len(xs)
            if not np.array_equal(model(xs[j]), want[j]):
                errors.append(f"thread {k} call {i}")

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_eager_ops_run_single_op_models_and_fall_back_per_policy(edgetpu):
    import neurenix_core as nx

    a = nx.asarray([[1.0, -2.0], [3.0, 4.0]], device="edgetpu:0")
    b = nx.asarray([[5.0, 6.0], [7.0, -8.0]], device="edgetpu:0")
    before = edgetpu.op_cache.built
    np.testing.assert_allclose((a + b).numpy(), [[6, 4], [10, -4]])
    np.testing.assert_allclose(nx.matmul(a, b).numpy(), np.array([[1, -2], [3, 4]]) @ np.array([[5, 6], [7, -8]]))
    np.testing.assert_allclose(nx.concat([a, b], axis=1).numpy(), [[1, -2, 5, 6], [3, 4, 7, -8]])
    assert edgetpu.op_cache.built >= before + 3
    assert (a + b).device == Device("edgetpu", 0)
    nx.reset_fallback_stats()
    ints = nx.asarray(np.arange(3, dtype=np.int64), device="edgetpu:0")
    with nx.fallback_policy("allow"):
        assert (ints + ints).tolist() == [0, 2, 4]
    assert nx.fallback_stats()["edgetpu"]["add"] == 1
    with nx.fallback_policy("error"), pytest.raises(FallbackError, match="edgetpu"):
        _ = ints + ints


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEURENIX_", "XLA_", "JAX_"))}
    env.update(extra)
    return env


def test_without_hardware_an_explicit_request_names_the_missing_piece():
    code = textwrap.dedent("""
        import sys
        import neurenix_core as nx
        heavy = [m for m in ('torch', 'jax', 'openvino', 'ai_edge_litert', 'tflite_runtime', 'onnxruntime') if m in sys.modules]
        assert heavy == [], heavy
        try:
            nx.zeros(3, device='edgetpu:0')
        except nx.BackendUnavailableError as exc:
            print('ERR', exc)
        from neurenix_edgetpu.api import EdgeTPUBackend, is_edgetpu_available
        print('AVAILABLE', is_edgetpu_available())
        try:
            EdgeTPUBackend().initialize()
        except nx.BackendUnavailableError as exc:
            print('SEED', exc)
    """)
    out = subprocess.run([sys.executable, "-c", code], env=_clean_env(), check=False, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    if os.path.exists("/dev/apex_0"):
        pytest.skip("a PCIe Coral is present on this machine")
    assert "ERR" in out.stdout and "/dev/apex_" in out.stdout and "NEURENIX_EMULATE=edgetpu" in out.stdout
    assert "AVAILABLE False" in out.stdout and "SEED" in out.stdout


def test_several_emulated_devices_get_their_own_interpreters():
    code = textwrap.dedent("""
        import sys
        sys.path.insert(0, %r)
        import numpy as np, neurenix_core as nx
        from edgetpu_helpers import mlp_graph
        from neurenix_core.graph.ir import CompileOptions
        from neurenix_edgetpu.compiled import compile_graph
        print('DEVICES', [str(d) for d in nx.devices('edgetpu')])
        be = nx.backend('edgetpu:1')
        g = mlp_graph()
        m0 = compile_graph(be, g, CompileOptions(device=nx.Device('edgetpu:0'), precision='fp32'))
        m1 = compile_graph(be, g, CompileOptions(device=nx.Device('edgetpu:1'), precision='fp32'))
        x = np.ones((1, 16), np.float32)
        print('SAME', np.array_equal(m0(x), m1(x)), m0.runner is not m1.runner, 'edgetpu:1' in m1.summary)
        t = nx.ones(2, device='edgetpu:1')
        print('ON', t.device)
    """) % os.path.dirname(__file__)
    env = _clean_env(NEURENIX_EMULATE="edgetpu", NEURENIX_EDGETPU_DEVICES="2")
    out = subprocess.run([sys.executable, "-c", code], env=env, check=False, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "DEVICES ['edgetpu:0', 'edgetpu:1']" in out.stdout
    assert "SAME True True True" in out.stdout and "ON edgetpu:1" in out.stdout


def test_graph_forward_helper_matches_compiled_cnn(edgetpu):
    # guards the test helper itself against drifting from the compiled semantics
    graph = cnn_graph(batch=2)
    x = np.random.default_rng(9).normal(size=(2, 3, 16, 16)).astype(np.float32)
    out = compile_graph(edgetpu, graph, CompileOptions(device=Device("edgetpu", 0), precision="fp32"))(x)
    np.testing.assert_allclose(out, forward(graph, x)["k"], rtol=1e-5, atol=1e-5)
