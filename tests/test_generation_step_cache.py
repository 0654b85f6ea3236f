"""The step model kept across processes (neurenix_core/generation/step_cache.py): a second
preparation of the same model loads the graph instead of exporting, with the model's own tensors
as its weights; another model, a damaged entry or the cache turned off export again."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import hf_zoo as hz

from neurenix_core.generation import CausalLM, step
from neurenix_core.generation.step_cache import entry_path


def _llama(seed: int) -> Any:
    model, _ = hz.build("llama")
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return model


def _greedy(model: Any, ids: np.ndarray, new: int = 12) -> np.ndarray:
    with torch.no_grad():
        return model.generate(torch.from_numpy(ids), attention_mask=torch.ones(ids.shape, dtype=torch.int64), do_sample=False,
                              max_new_tokens=new, min_new_tokens=new, pad_token_id=0).numpy()


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NEURENIX_STATE_DIR", str(tmp_path))
    monkeypatch.delenv("NEURENIX_COMPILE_CACHE", raising=False)
    step.clear()
    yield tmp_path
    step.clear()


def _no_export(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any) -> Any:
        raise AssertionError("the step model was exported although its entry is stored")

    monkeypatch.setattr(step, "_export", refuse)


def test_second_preparation_loads_the_entry(state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _llama(1)
    ids = np.random.default_rng(0).integers(3, 120, (1, 6))
    first = CausalLM(model, "cpu:0").generate(ids, max_new_tokens=12, eos_token_id=[])
    path, _ = entry_path(model, CausalLM(model, "cpu:0").spec)
    assert path is not None and path.is_file() and path.stat().st_size < 200_000  # the graph, not the weights
    step.clear()  # as a new process: nothing exported in memory
    _no_export(monkeypatch)
    lm = CausalLM(model, "cpu:0")
    np.testing.assert_array_equal(lm.generate(ids, max_new_tokens=12, eos_token_id=[]), first)
    np.testing.assert_array_equal(first, _greedy(model, ids))
    own = [p.detach().numpy() for p in model.parameters()]
    weights = [v for n in lm.graph.symbolic_graph().nodes for v in n.params.values() if isinstance(v, np.ndarray) and v.size > 1000]
    assert weights and all(any(np.shares_memory(w, o) for o in own) for w in weights)


def test_another_models_weights_never_come_from_an_entry(state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Same class and configuration, other weights: another key, its own export, its own tokens."""
    a, b = _llama(1), _llama(2)
    spec = CausalLM(a, "cpu:0").spec
    assert entry_path(a, spec)[1] != entry_path(b, spec)[1]
    ids = np.random.default_rng(1).integers(3, 120, (1, 6))
    np.testing.assert_array_equal(CausalLM(b, "cpu:0").generate(ids, max_new_tokens=12, eos_token_id=[]), _greedy(b, ids))
    assert len(list((state / "generation" / "steps").iterdir())) == 2


def test_damaged_entry_is_exported_again(state: Path) -> None:
    model = _llama(3)
    lm = CausalLM(model, "cpu:0")
    path, _ = entry_path(model, lm.spec)
    assert path is not None
    path.write_bytes(path.read_bytes()[:100])  # cut short
    step.clear()
    with pytest.warns(RuntimeWarning, match="not used"):
        again = CausalLM(model, "cpu:0")
    ids = np.random.default_rng(2).integers(3, 120, (1, 6))
    np.testing.assert_array_equal(again.generate(ids, max_new_tokens=12, eos_token_id=[]), _greedy(model, ids))
    step.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        CausalLM(model, "cpu:0")  # the rewritten entry loads, without a warning


def test_cache_off_writes_nothing(state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEURENIX_COMPILE_CACHE", "0")
    model = _llama(4)
    lm = CausalLM(model, "cpu:0")
    assert entry_path(model, lm.spec)[0] is None
    assert not (state / "generation").exists()
