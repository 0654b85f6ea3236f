"""The npu plugin's piece of the persistent compile cache: a second process imports OpenVINO's
compiled blob instead of lowering and compiling, with bit-identical results; the key follows
the precision; a damaged entry is compiled again; two processes at once compile once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import compile_cache_child as child
import pytest
from neurenix_npu_openvino.config import precision_hint


def test_second_process_hits_with_identical_results(tmp_path: Path) -> None:
    cold = child.run(tmp_path, "npu:0")
    warm = child.run(tmp_path, "npu:0")
    assert "compile cache: miss" in cold["summary"] and "compile cache: hit" in warm["summary"], (cold["summary"], warm["summary"])
    assert "INFERENCE_PRECISION_HINT=f32" in warm["summary"]
    assert warm["sha256"] == cold["sha256"]


# A reduced precision is the second entry, where OpenVINO's CPU device (what emulation runs on)
# reports it: FP16 needs AVX512-FP16 or AMX-FP16 (absent on AMD EPYC, where compiling fp16 is the
# plugin's "npu:0 cannot run fp16"), BF16 AVX512-BF16 or AMX. The plugin's precisions() reads
# OPTIMIZATION_CAPABILITIES, the check its compile makes; the test never assumes the CPU.
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_another_precision_is_another_entry(tmp_path: Path, npu: Any, precision: str) -> None:
    if precision not in npu.precisions():
        pytest.skip(f"OpenVINO reports no {precision.upper()} on this CPU (capabilities: {', '.join(npu.capabilities)})")
    fp32 = child.run(tmp_path, "npu:0")
    other = child.run(tmp_path, "npu:0", precision)
    assert "compile cache: miss" in other["summary"] and f"INFERENCE_PRECISION_HINT={precision_hint(precision)}" in other["summary"]
    assert len(list((tmp_path / "compile_cache" / "entries").glob("*.nxc"))) == 2
    warm = child.run(tmp_path, "npu:0", precision)
    assert "compile cache: hit" in warm["summary"] and warm["sha256"] == other["sha256"], warm["summary"]
    assert "compile cache: hit" in child.run(tmp_path, "npu:0")["summary"] and fp32["sha256"] != other["sha256"]


def test_damaged_entry_is_compiled_again(tmp_path: Path) -> None:
    cold = child.run(tmp_path, "npu:0")
    [entry] = (tmp_path / "compile_cache" / "entries").glob("*.nxc")
    data = bytearray(entry.read_bytes())
    data[len(data) // 2] ^= 0xFF
    entry.write_bytes(bytes(data))
    again = child.run(tmp_path, "npu:0")
    assert "was unusable (ValueError: checksum mismatch), deleted and compiled again" in again["summary"]
    assert again["sha256"] == cold["sha256"]
    assert "compile cache: hit" in child.run(tmp_path, "npu:0")["summary"]


def test_off_writes_nothing(tmp_path: Path) -> None:
    out = child.run(tmp_path, "npu:0", NEURENIX_COMPILE_CACHE="0")
    assert "compile cache: off (NEURENIX_COMPILE_CACHE=0)" in out["summary"]
    assert not (tmp_path / "compile_cache").exists()


def test_two_processes_at_once(tmp_path: Path) -> None:
    results = child.run_together(tmp_path, "npu:0")
    states = sorted("hit" if "compile cache: hit" in r["summary"] else "miss" for r in results)
    assert states == ["hit", "miss"] and len({r["sha256"] for r in results}) == 1


def test_cpu_host_runtime_hits_too(tmp_path: Path) -> None:
    cold = child.run(tmp_path, "cpu:0", NEURENIX_CPU_RUNTIME="openvino")
    warm = child.run(tmp_path, "cpu:0", NEURENIX_CPU_RUNTIME="openvino")
    assert "OpenVINO CPU on cpu:0" in warm["summary"] and "compile cache: hit" in warm["summary"], warm["summary"]
    assert "compile cache: miss" in cold["summary"] and warm["sha256"] == cold["sha256"]


def test_a_cpu_model_with_large_weights_is_compiled_not_stored(npu: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Imported, OpenVINO's CPU device holds a model's weights twice: past CPU_IMPORT_LIMIT the
    model is compiled in each process, and the cache line says why. A real NPU stores every model."""
    import numpy as np
    from neurenix_npu_openvino import compile_cache as cc
    from neurenix_npu_openvino.lowering import lower_graph

    from neurenix_core.graph.ir import Graph, Node, TensorSpec

    if npu.ov_device != "CPU":
        pytest.skip(f"npu:0 runs on OpenVINO {npu.ov_device}, which stores every model")
    weight = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    graph = Graph((TensorSpec("x", (2, 64)),), (Node("w", "constant", (), "w", params={"value": weight}),
                                                Node("mm", "matmul", ("x", "w"), "y")), ("y",))
    def build() -> Any:
        return npu.compile_model(lower_graph(graph), "fp32")

    monkeypatch.setattr(cc, "CPU_IMPORT_LIMIT", weight.nbytes)
    result = cc.compile_cached(npu, graph, None, {"probe": "large"}, build)
    assert result.state == "off" and result.nbytes == 0, result.line()
    assert "0 MiB of weights" in result.line() and "compiled in each process" in result.line(), result.line()
    monkeypatch.setattr(cc, "CPU_IMPORT_LIMIT", weight.nbytes + 1)
    stored = cc.compile_cached(npu, graph, None, {"probe": "small"}, build)
    assert stored.state == "miss" and stored.nbytes > 0, stored.line()
