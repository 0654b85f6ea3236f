"""examples/weight_quantization.py: int8 and int4 weights of a tiny Llama on the emulated npu,
lowered by the plugin (no fallback) and checked against the float model."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_example_quantizes_weights_on_the_npu() -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("openvino")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")} | {"NEURENIX_EMULATE": "npu", "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, "-W", "error::UserWarning", str(ROOT / "examples" / "weight_quantization.py"), "--device", "npu:0"],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    schemes = ("int8-weights", "int4-weights", "int8-weights-int8-activations", "int4-weights-int8-activations")
    ran = [s for s in schemes if f"{s}: not computed here: " not in out]  # a CPU without run-time activation rounding
    assert ran[:2] == list(schemes[:2]), out
    for scheme in ran:
        assert re.search(rf"^{scheme} on npu:0: \[(\d+, ){{15}}\d+\]$", out, re.MULTILINE), out
        assert f"weights: {scheme} (15 linear weights" in out and "lowered by plugin npu" in out, out
    agreement = [int(a) for a in re.findall(r"(\d+)/16 greedy tokens equal", out)]
    assert len(agreement) == len(ran) and agreement[0] >= 12, out  # int8 stays close to the float model


def test_example_on_cpu_runs_both_schemes_on_a_runtime_with_integer_weights() -> None:
    """With the npu plugin (OpenVINO's CPU device as cpu:0's host runtime) installed, cpu:0 keeps
    the cache in OpenVINO's state (docs/generation.md) and both schemes are OpenVINO's compressed
    weights in that one model; neither falls back to the dequantized float model. (The fixed
    cache on OpenVINO's and ONNX Runtime's kernels: tests/test_weight_quantization.py.)"""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("neurenix_onnxruntime")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURENIX_")} | {"JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "weight_quantization.py"), "--device", "cpu:0"],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert re.search(r"^int4-weights on cpu:0: \[(\d+, ){15}\d+\]$", out, re.MULTILINE), out
    pytest.importorskip("neurenix_npu_openvino")
    for bits in (8, 4):
        assert f"int{bits} weights as compressed-weight FullyConnected layers (float activations), stateful" in out, out
    assert "dequantized" not in out, out
    ran = [set(line.split(", ")) for line in re.findall(r"^  ran on: (.*)$", out, re.MULTILINE)]
    assert len(ran) >= 2 and "openvino" in ran[0] and ran[1] & {"openvino", "onnxruntime"}, out
    if "not computed here" not in out:  # the -int8-activations schemes, on OpenVINO's CPU device
        for bits in (8, 4):
            assert f"int{bits} weights as compressed-weight FullyConnected layers (int8 activations quantized at run time" in out, out
    assert "FallbackWarning" not in proc.stderr, proc.stderr
