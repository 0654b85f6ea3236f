"""Hugging Face decoders imported with dynamic shapes (issue 26).

GPT-2, Llama, Qwen2 and Mistral causal LMs and the T5 encoder (tiny configs, random weights) are
imported once through ``nn.from_torch`` with their keyword inputs (``input_ids`` and an
``attention_mask``, one sequence of 16 tokens), with no static-shape fallback (a ``NeurenixWarning`` fails the import here),
and run at other batch sizes and sequence lengths, the first sequence padded by the mask: the
causal mask, the padding mask, rotary embeddings, position ids and T5's relative-position buckets
are rebuilt for each shape. cpu:0 (the NumPy opset interpreter, fp32) is compared with torch
eager within 1e-5; the emulated devices (cuda, tpu, npu, edgetpu; fp32) within 1e-4 for GPT-2
and Llama at batch 3, length 8. The causal LMs are called without ``use_cache``: the import exports them with
``config.use_cache = False`` (logits only) and restores the config.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import hf_zoo as hz

import neurenix_core as nx
from neurenix_core import nn
from neurenix_core.errors import NeurenixWarning
from neurenix_core.tensor.fallback import FallbackWarning

FP32_CPU = 1e-5  # the NumPy opset interpreter in float32 vs torch eager (relative to the largest output)
FP32_DEVICE = 1e-4  # a device runtime's fp32 kernels vs torch eager
MODELS = ["gpt2", "llama", "qwen2", "mistral", "t5_encoder"]
EXAMPLE = (1, 16)  # batch, length of the example the models are imported with (a size-1 batch stays dynamic)
SHAPES = [(3, 8), (1, 5), (2, 24)]  # other batches, shorter and longer sequences


class _Imported(dict[str, tuple[Any, Any, Any]]):
    """name -> (torch model, inputs(batch, seq), imported model), each imported on first use: a
    test-xdist worker imports only the models of the tests it runs (importing all five up front
    took ~30 s on each worker)."""

    def __missing__(self, name: str) -> tuple[Any, Any, Any]:
        model, inputs = hz.build(name)
        with warnings.catch_warnings():
            warnings.simplefilter("error", NeurenixWarning)  # a static-shape fallback fails the test
            self[name] = (model, inputs, nn.from_torch(model, inputs(*EXAMPLE)))
        return self[name]


@pytest.fixture(scope="module")
def imported() -> _Imported:
    return _Imported()


def _error(got: Any, want: list[np.ndarray]) -> float:
    outs = got if isinstance(got, (tuple, list)) else [got]
    assert len(outs) == len(want)
    errs = []
    for g, w in zip(outs, want):
        g, w = np.asarray(g.numpy(), np.float64), np.asarray(w, np.float64)
        assert g.shape == w.shape
        errs.append(float(np.abs(g - w).max() / max(np.abs(w).max(), 1e-30)))
    return max(errs)


def _check(model: Any, inputs: Any, compiled: Any, shapes: list[tuple[int, int]], tol: float) -> None:
    for batch, seq in shapes:
        x = inputs(batch, seq)
        with torch.no_grad():
            want = hz.outputs(model(**x))
        err = _error(compiled(*[v.numpy() for v in x.values()]), want)
        assert err <= tol, f"batch {batch}, length {seq}: relative error {err:.2e} > {tol:.0e}"


@pytest.mark.parametrize("name", MODELS)
def test_batch_and_length_stay_dynamic(imported: dict[str, tuple[Any, Any, Any]], name: str) -> None:
    model, _, module = imported[name]
    graph = module.symbolic_graph()
    assert [s.dynamic for s in graph.inputs] == [(0, 1), (0, 1)]  # input_ids, attention_mask: batch and length
    if name != "t5_encoder":
        assert model.config.use_cache is True  # exported with use_cache=False, then restored
        assert len(graph.outputs) == 1  # the logits, no cache


@pytest.mark.parametrize("name", MODELS)
def test_other_shapes_on_cpu(imported: dict[str, tuple[Any, Any, Any]], name: str) -> None:
    model, inputs, module = imported[name]
    _check(model, inputs, nx.compile(module, device="cpu:0"), SHAPES, FP32_CPU)


@pytest.mark.parametrize("device", ["cuda:0", "tpu:0", "npu:0", "edgetpu:0"])
@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_other_shapes_on_every_device(imported: dict[str, tuple[Any, Any, Any]], name: str, device: str) -> None:
    if device not in {str(d) for d in nx.devices()}:
        pytest.skip(f"{device} is not available (tests emulate it with NEURENIX_EMULATE=cuda,tpu,npu,edgetpu)")
    model, inputs, module = imported[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)  # edgetpu places ops it does not declare on cpu:0
        _check(model, inputs, nx.compile(module, device=device, precision="fp32"), SHAPES[:1], FP32_DEVICE)  # one compile per device


def test_python_values_among_the_inputs_are_baked_in() -> None:
    """use_cache=False passed explicitly (any Python value among the example's keyword inputs):
    torch.export fixes it in the graph, and the imported model takes the tensors only."""

    class Gate(torch.nn.Module):
        def forward(self, x: Any, use_cache: bool = True) -> Any:
            return x * 2 if use_cache else x - 1

    module = nn.from_torch(Gate(), {"x": torch.ones(2, 3), "use_cache": False})
    assert [s.name for s in module.symbolic_graph().inputs] == ["x"]
    out = nx.compile(module, device="cpu:0")(np.full((4, 3), 5.0, np.float32))
    np.testing.assert_array_equal(out.numpy(), np.full((4, 3), 4.0, np.float32))


def test_arange_over_a_size_expression_is_counted_at_run_time() -> None:
    """arange(2 * batch): no one input axis bounds it (GPT-2's mask length is such a size)."""

    class Evens(torch.nn.Module):
        def forward(self, x: Any) -> Any:
            return x.sum(1) + torch.arange(x.shape[0] * 2, dtype=x.dtype).reshape(-1, 2)[:, 0]

    with warnings.catch_warnings():
        warnings.simplefilter("error", NeurenixWarning)
        module = nn.from_torch(Evens(), torch.ones(3, 4))
    compiled = nx.compile(module, device="cpu:0")
    for batch in (1, 5):
        x = np.arange(batch * 4, dtype=np.float32).reshape(batch, 4)
        np.testing.assert_array_equal(compiled(x).numpy(), x.sum(1) + np.arange(0, 2 * batch, 2, dtype=np.float32))


def test_cache_idioms_stay_dynamic() -> None:
    """What a transformers DynamicCache built inside forward does (the KV-cache step model): a
    layer starts as torch.tensor([]) concatenated with the past keys, and positions are
    arange(new) + past length (a tensor plus a size)."""

    class Step(torch.nn.Module):
        def forward(self, past: Any, new: Any) -> Any:
            keys = torch.cat([torch.tensor([]), past, new], dim=-2)
            return keys, torch.arange(new.shape[1]) + past.shape[1]

    dims = {"past": {0: torch.export.Dim.AUTO, 1: torch.export.Dim.AUTO}, "new": {0: torch.export.Dim.AUTO, 1: torch.export.Dim.AUTO}}
    with warnings.catch_warnings():
        warnings.simplefilter("error", NeurenixWarning)
        module = nn.from_torch(Step(), {"past": torch.ones(2, 6, 4), "new": torch.ones(2, 3, 4)}, dynamic_shapes=dims)
    compiled = nx.compile(module, device="cpu:0")
    past, new = np.full((3, 9, 4), 1.0, np.float32), np.full((3, 2, 4), 2.0, np.float32)
    keys, positions = compiled(past, new)
    np.testing.assert_array_equal(keys.numpy(), np.concatenate([past, new], axis=1))
    np.testing.assert_array_equal(positions.numpy(), [9, 10])


def test_example_script(capsys: pytest.CaptureFixture[str]) -> None:
    """examples/dynamic_decoder.py (run in this process: torch and transformers are loaded already)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "examples" / "dynamic_decoder.py"
    spec = importlib.util.spec_from_file_location("dynamic_decoder_example", path)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    assert example.main(["--device", "cpu:0"]) == 0
    out = capsys.readouterr().out
    assert "input input_ids: example shape (1, 16), dynamic axes (0, 1), shape (None, None)" in out
    assert "config.use_cache after the import: True" in out
    assert "batch 3, length 8: logits shape (3, 8, 128)" in out and "batch 1, length 40: logits shape (1, 40, 128)" in out
