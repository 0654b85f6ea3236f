"""The ORT backend in this process: eager ops, fallbacks with ORT's reason, compiled models."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.graph.ir import CompileOptions, Graph, Node, TensorSpec
from neurenix_core.graph.reference.run import run_graph

HERE = Path(__file__).resolve().parent
PKG = HERE.parent


def test_probe_and_manifest_as_the_core_sees_them() -> None:
    info = next(b for b in nx.backends() if b.name == "ort")
    assert info.status.value in ("available", "selected") and info.device_types == ("ort",)
    assert (info.band, info.priority) == ("cpu", 40)
    assert nx.backend("ort:0").providers[0] == "CPUExecutionProvider"
    assert nx.backend("ort:0").device_info(0)["hardware"] == "host CPU"


def test_eager_ops_run_through_onnxruntime_sessions(monkeypatch: pytest.MonkeyPatch) -> None:
    from neurenix_onnxruntime.eager import KernelCache

    be = nx.backend("ort:0")
    # A fresh cache: tests that ran before in this worker may have opened these very signatures.
    monkeypatch.setattr(be, "kernels", KernelCache(be))
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((4, 5)).astype(np.float32), rng.standard_normal((5, 3)).astype(np.float32)
    x, y = nx.asarray(a, device="ort:0"), nx.asarray(b, device="ort:0")
    with nx.fallback_policy("error"):  # none of these may fall back
        np.testing.assert_allclose((x @ y).numpy(), a @ b, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(nx.exp(x).numpy(), np.exp(a), rtol=1e-6)
        np.testing.assert_allclose((x * 2 + 1).numpy(), a * 2 + 1, rtol=1e-6)
        np.testing.assert_allclose(nx.sum(x, axis=1).numpy(), a.sum(axis=1), rtol=1e-5, atol=1e-6)
        w = nx.asarray(rng.standard_normal((3, 5)).astype(np.float32), device="ort:0")
        np.testing.assert_allclose(nx.backend("ort:0").ops["nn.linear"](a, w.numpy(), None), a @ w.numpy().T, rtol=1e-5, atol=1e-6)
    assert len(be.kernels) >= 4, "ops must have opened ORT sessions"


def test_op_onnxruntime_rejects_falls_back_or_errors_with_its_reason() -> None:
    x = nx.asarray(np.array([1, -2, 3], np.int16), device="ort:0")
    with nx.fallback_policy("error"), pytest.raises(nx.FallbackError) as err:
        nx.maximum(x, x)
    assert "NOT_IMPLEMENTED" in str(err.value) and "Max" in str(err.value) and "ort:0" in str(err.value)
    nx.reset_fallback_stats()
    with nx.fallback_policy("allow"):
        out = nx.maximum(x, x)
    assert out.device == "ort:0" and out.numpy().tolist() == [1, -2, 3]
    assert nx.fallback_stats()["ort"]["maximum"] == 1


def test_unsupported_dtype_names_device_and_remedy() -> None:
    with pytest.raises(nx.UnsupportedDTypeError, match="ort:0.*bfloat16"):
        nx.zeros(3, dtype=nx.bfloat16, device="ort:0")


def _mlp() -> nn.Module:
    nn.init.manual_seed(3)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4), nn.Softmax(dim=-1))


def test_compiled_mlp_fp32_and_fp16_against_reference() -> None:
    x = np.random.default_rng(2).standard_normal((5, 8)).astype(np.float32)
    fp32 = nx.compile(_mlp(), device="ort:0")
    y = fp32(nx.asarray(x, device="ort:0"))
    ref = run_graph(fp32.graph, x)
    assert y.device == "ort:0" and "CPUExecutionProvider, fp32" in fp32.summary
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-5, atol=1e-6)
    y16 = nx.compile(_mlp(), device="ort:0", precision="fp16")(nx.asarray(x, device="ort:0"))
    np.testing.assert_allclose(y16.numpy(), ref, rtol=1e-2, atol=1e-3)


def test_unoffered_precision_is_refused() -> None:
    x = nx.asarray(np.zeros((1, 8), np.float32), device="ort:0")
    with pytest.raises(nx.CompilationError, match="fp32, fp16, int8"):
        nx.compile(_mlp(), device="ort:0", precision="bf16")(x)


def test_graph_onnxruntime_rejects_is_a_compilation_error_with_cause() -> None:
    from neurenix_onnxruntime.compiled import compile_graph
    from neurenix_onnxruntime.eager import REJECTED_BY_ORT

    # Neg of a bool value: the opset's shape rule lets it through, ONNX's type constraints do not,
    # and ORT refuses the node by name when the session is created.
    node = Node("head.neg", "neg", ("x",), "y")
    graph = Graph((TensorSpec("x", (1, 3), "bool"),), (node,), ("y",))
    with pytest.raises(nx.CompilationError, match=r"rejected the lowered model.*head\.neg") as err:
        compile_graph(nx.backend("ort:0"), graph, CompileOptions(device=nx.Device("ort:0")))
    assert isinstance(err.value.__cause__, REJECTED_BY_ORT)


def test_graph_that_does_not_fit_its_shapes_is_refused_before_onnx() -> None:
    from neurenix_onnxruntime.compiled import compile_graph

    # A softmax over axis 7 of a 4-D input: the exporter's shape inference names the node.
    node = Node("head.softmax", "softmax", ("x",), "y", {"axis": 7})
    graph = Graph((TensorSpec("x", (1, 3, 8, 8)),), (node,), ("y",))
    with pytest.raises(nx.ShapeError, match=r"head\.softmax.*axis 7"):
        compile_graph(nx.backend("ort:0"), graph, CompileOptions(device=nx.Device("ort:0")))


def test_requested_provider_missing_lists_those_present() -> None:
    with pytest.raises(nx.BackendUnavailableError, match="TensorrtExecutionProvider.*CPUExecutionProvider"):
        nx.compile(_mlp(), device="ort:0", provider="tensorrt")(nx.asarray(np.zeros((1, 8), np.float32), device="ort:0"))


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")}
    return {**env, **extra}


def test_import_stays_light_and_bad_provider_env_raises_in_a_clean_process() -> None:
    code = (
        "import sys, neurenix_core as nx\n"
        "assert 'onnxruntime' not in sys.modules and 'onnx' not in sys.modules\n"
        "nx.zeros(2, device='ort:0')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_clean_env(NEURENIX_ORT_PROVIDER="cuda"), timeout=120, check=False)
    assert proc.returncode != 0 and "BackendUnavailableError" in proc.stderr
    assert "no execution provider 'CUDAExecutionProvider'" in proc.stderr and "CPUExecutionProvider" in proc.stderr


def test_models_example_runs() -> None:
    proc = subprocess.run([sys.executable, str(PKG / "examples" / "ort_models.py")], capture_output=True, text=True, env=_clean_env(), timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "mlp on ort:0" in proc.stdout and "cnn on ort:0" in proc.stdout and "int8 top-1 agreement 100.0%" in proc.stdout
