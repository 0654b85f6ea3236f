"""The op-level lowering: every declared op against the core's float64 reference, and the Tensor
Core tools (optimize_model, align_model, validate_model) on models imported from PyTorch."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import model_zoo as zoo
import opset_cases
from neurenix_cuda_tc.alignment import align_model, validate_model
from neurenix_cuda_tc.compiled import compile_graph
from neurenix_cuda_tc.lowering import LOWERED_OPS, lower_graph
from neurenix_cuda_tc.plugin import EXTRA_GRAPH_OPS, GRAPH_DTYPES, GRAPH_OPS, neurenix_manifest

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.graph.ir import CompileOptions
from neurenix_core.graph.reference.run import run_graph
from neurenix_core.plugins.opnames import OPSET_NAMES

#: float32 lowering vs the float64 reference: a few float32 roundings per op.
FP32_RTOL, FP32_ATOL = 1e-5, 1e-5
CASES = list(opset_cases.every_op_case())


def test_manifest_declares_every_op_it_lowers() -> None:
    caps = neurenix_manifest().capabilities
    # The portable opset and the ops declared by name (test_cuda_tc_conv_inputs.py covers them);
    # ops added to the core's table later run on cpu:0 through the partitioner.
    assert set(caps.graph_ops) == set(GRAPH_OPS) == set(LOWERED_OPS) == set(OPSET_NAMES) | set(EXTRA_GRAPH_OPS)
    assert caps.graph_dtypes == GRAPH_DTYPES == ("float32", "int64", "bool")
    assert opset_cases.COVERED >= set(OPSET_NAMES)


def _close(got: Any, want: np.ndarray, what: str) -> None:
    got = got.detach().numpy() if hasattr(got, "detach") else np.asarray(got)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    if want.dtype.kind in "biu":
        assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
        np.testing.assert_array_equal(got, want, err_msg=what)
    else:
        assert got.dtype == np.float32, what
        np.testing.assert_allclose(got, want, rtol=FP32_RTOL, atol=FP32_ATOL, err_msg=what)


@pytest.mark.parametrize(("case", "graph", "inputs"), CASES, ids=[c[0] for c in CASES])
def test_every_op_matches_the_reference(cuda: Any, case: str, graph: Any, inputs: list[np.ndarray]) -> None:
    want = run_graph(graph, *inputs)
    with torch.no_grad():
        got = lower_graph(graph)(*(torch.from_numpy(np.array(x)) for x in inputs))
    _close(got, want, case)
    # Through the neurenix_compile hook too: ints and bools keep their dtype, fp32 stays fp32.
    model = compile_graph(cuda, graph, CompileOptions(device=nx.Device("cuda", 0), precision="fp32"))
    _close(model._run(*(torch.from_numpy(np.array(x)) for x in inputs)), want, f"{case} (compiled)")


def _imported(name: str) -> tuple[Any, np.ndarray, np.ndarray]:
    model = zoo.build(name)
    x = np.random.default_rng(5).standard_normal((2, 3, 16, 16)).astype(np.float32)
    return nn.from_torch(model, torch.from_numpy(x)), x, model(torch.from_numpy(x)).detach().numpy()


@pytest.mark.parametrize("name", ["resnet_block", "vit"])
def test_optimize_model_runs_imported_models(tc: Any, name: str) -> None:
    imported, x, want = _imported(name)
    fast = tc.optimize_model(imported, precision="fp32")
    convs = sum(isinstance(m, torch.nn.Conv2d) for m in fast.inner.modules())
    assert convs >= 1 and any("channels_last" in c for c in fast.report.changes)
    assert fast.inner.layers[next(iter(fast.inner.layers))].weight.device.type == "cpu"  # emulated: PyTorch's CPU
    with torch.no_grad():
        got = fast(torch.from_numpy(x)).numpy()
    assert zoo.max_rel_err(got, want) <= 1e-4
    # bf16 (what Ampere's Tensor Cores run): parameters and constant buffers converted, outputs close.
    half = tc.optimize_model(_imported(name)[0], precision="bf16")
    assert all(p.dtype == torch.bfloat16 for p in half.inner.parameters())
    assert all(b.dtype == torch.bfloat16 for b in half.inner.buffers() if b.is_floating_point())
    with torch.no_grad():
        approx = half(torch.from_numpy(x)).float().numpy()
    assert np.max(np.abs(approx - want)) <= 0.1 * np.max(np.abs(want))


def test_validate_model_names_imported_layers() -> None:
    imported, _, _ = _imported("vit")
    findings = validate_model(imported, precision="fp16", memory_format=False)
    layers = {f.layer for f in findings}
    # ViT's patch embedding is Conv 3->32: the 3 input channels are misaligned, named by the import's node.
    assert any(f.kind == "conv_channels" for f in findings), findings
    assert all(name in {n.name for n in imported.to_graph().nodes} for name in layers), layers


@pytest.mark.parametrize("name", ["resnet_block", "mobilenetv3_block", "vit"])
def test_align_model_pads_imported_layers_without_changing_outputs(name: str) -> None:
    imported, x, want = _imported(name)
    before = {n: (m.in_features, m.out_features) if isinstance(m, torch.nn.Linear) else (m.in_channels, m.out_channels)
              for n, m in lower_graph(imported.to_graph()).named_modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))}
    padded, done = align_model(imported, precision="fp16", max_growth=4.0)
    assert done, f"{name}: nothing padded"
    after = {n: (m.in_features, m.out_features) if isinstance(m, torch.nn.Linear) else (m.in_channels, m.out_channels)
             for n, m in padded.named_modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))}
    grown = [n for n in before if after[n] != before[n]]
    assert grown, done
    assert all(a % 8 == 0 or a == b for n in grown for a, b in zip(after[n], before[n])), (before, after)
    with torch.no_grad():
        got = padded(torch.from_numpy(x)).numpy()
    assert zoo.max_rel_err(got, want) <= 1e-4, f"{name}: padding changed the outputs"


def test_align_model_traces_an_imported_two_input_model() -> None:
    pytest.importorskip("transformers")
    rng = np.random.default_rng(2)
    model = zoo.tiny_bert()
    ids, mask = rng.integers(0, 100, (2, 9)), np.ones((2, 9), np.int64)
    mask[1, 6:] = 0
    imported = nn.from_torch(model, {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)})
    # torch.fx names both inputs (int64 token ids, int64 mask); dtype tests are decided at lowering, not traced.
    padded, _ = align_model(imported, precision="int8", max_growth=4.0)
    want = model(torch.from_numpy(ids), attention_mask=torch.from_numpy(mask))
    with torch.no_grad():
        got = padded(torch.from_numpy(ids), torch.from_numpy(mask))
    assert zoo.max_rel_err(got[0].numpy(), want.last_hidden_state.detach().numpy()) <= 1e-4
    assert zoo.max_rel_err(got[1].numpy(), want.pooler_output.detach().numpy()) <= 1e-4


def test_fp32_turns_tf32_off_for_the_call_and_puts_the_flags_back() -> None:
    from neurenix_cuda_tc.compiled import _tf32

    flags = torch.backends.cuda.matmul, torch.backends.cudnn
    saved = tuple(f.allow_tf32 for f in flags)
    try:
        for f in flags:
            f.allow_tf32 = True  # what a user (or another library) may have switched on
        with _tf32(False):
            assert not any(f.allow_tf32 for f in flags)
        assert all(f.allow_tf32 for f in flags)
        with _tf32(True):
            assert all(f.allow_tf32 for f in flags)
    finally:
        for f, v in zip(flags, saved):
            f.allow_tf32 = v


@pytest.mark.gpu
def test_fp32_on_a_real_gpu_matches_torch_eager_with_tf32_switched_on_globally() -> None:
    model = zoo.build("vit")
    x = torch.from_numpy(np.random.default_rng(1).standard_normal((2, 3, 16, 16)).astype(np.float32))
    with torch.no_grad():
        want = model(x).numpy()  # torch eager on the CPU, fp32
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        compiled = nx.compile(nn.from_torch(model, x), device="cuda:0", precision="fp32")
        got = compiled(x.numpy()).numpy()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    assert zoo.max_rel_err(got, want) <= 1e-4
