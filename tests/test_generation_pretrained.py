"""CausalLM.from_pretrained (neurenix_core/generation/pretrained.py, state_store.py): a saved model
folder prepared on cpu:0 stores its stateful step model; a later preparation loads it without
building the transformers model (another process: without importing torch), with transformers'
tokens. A changed folder, a damaged entry, another model's entry or one over the size limit is
never loaded."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("openvino")

import hf_zoo as hz

from neurenix_core.errors import NeurenixError
from neurenix_core.generation import CausalLM, GenerationError, step
from neurenix_core.generation.state_store import entry_folder, entry_key, folder_digest

_IDS = np.random.default_rng(0).integers(3, 120, (1, 6))
_NEW = 12


def _save(folder: Path, seed: int, *, width: int | None = None) -> Any:
    """A Llama with seeded weights saved in ``folder`` (hf_zoo's tiny one, or one ``width`` wide)."""
    if width is None:
        model, _ = hz.build("llama")
    else:
        from transformers import LlamaConfig, LlamaForCausalLM

        model = LlamaForCausalLM(LlamaConfig(hidden_size=width, intermediate_size=2 * width, num_hidden_layers=2, num_attention_heads=4,
                                             num_key_value_heads=2, vocab_size=512)).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    model.save_pretrained(folder)
    return model


def _greedy(model: Any) -> np.ndarray:
    """transformers' greedy tokens with no stop token (as _generate's eos_token_id=[]): the model's
    eos is not suppressed either, as min_new_tokens would."""
    model = copy.deepcopy(model)
    model.config.eos_token_id = model.generation_config.eos_token_id = None
    with torch.no_grad():
        return model.generate(torch.from_numpy(_IDS), attention_mask=torch.ones(_IDS.shape, dtype=torch.int64), do_sample=False,
                              max_new_tokens=_NEW, pad_token_id=0).numpy()


def _generate(lm: CausalLM) -> np.ndarray:
    return np.asarray(lm.generate(_IDS, max_new_tokens=_NEW, eos_token_id=[]))


def _entry(folder: Path, quantize: str | None = None) -> Path:
    from neurenix_core.graph.compile.host_select import host_runtime_named

    key = entry_key(folder_digest(folder), quantize, host_runtime_named("openvino")["openvino"])  # type: ignore[arg-type]
    path = entry_folder(key)
    assert path is not None
    return path


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NEURENIX_STATE_DIR", str(tmp_path / "state"))
    for name in ("NEURENIX_COMPILE_CACHE", "NEURENIX_COMPILE_CACHE_MAX_BYTES", "NEURENIX_CPU_RUNTIME"):
        monkeypatch.delenv(name, raising=False)
    step.clear()
    yield tmp_path
    step.clear()


def _no_model_built(monkeypatch: pytest.MonkeyPatch) -> None:
    from neurenix_core.generation import pretrained

    def refuse(folder: Any) -> Any:
        raise AssertionError("the transformers model was built although the stored step model serves it")

    monkeypatch.setattr(pretrained, "load_model", refuse)


def test_first_preparation_stores_and_the_next_loads_with_transformers_tokens(state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _save(state / "llama", 1)
    want = _greedy(model)
    first = CausalLM.from_pretrained(state / "llama", "cpu:0")
    assert first.cache == "state" and "loaded from" not in first.summary
    np.testing.assert_array_equal(_generate(first), want)
    entry = _entry(state / "llama")
    assert {"entry.json", "model.xml", "model.bin"} <= {p.name for p in entry.iterdir()}
    assert first.graph is None  # the float model is not held once its stateful model is compiled

    _no_model_built(monkeypatch)
    second = CausalLM.from_pretrained(state / "llama", "cpu:0")
    assert f"loaded from the stored step model {entry}" in second.summary
    assert (second.spec, second.model_name, second.cache) == (first.spec, first.model_name, "state")
    np.testing.assert_array_equal(_generate(second), want)


def test_another_process_loads_without_importing_torch(state: Path) -> None:
    model = _save(state / "llama", 2)
    want = _greedy(model)
    CausalLM.from_pretrained(state / "llama", "cpu:0")
    script = ("import sys, numpy as np\nfrom neurenix_core.generation import CausalLM\n"
              f"lm = CausalLM.from_pretrained({str(state / 'llama')!r}, 'cpu:0')\n"
              f"ids = np.array({_IDS.tolist()})\n"
              f"print(lm.generate(ids, max_new_tokens={_NEW}, eos_token_id=[]).tolist(), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=dict(os.environ), check=True, timeout=300)
    tokens, torch_imported = out.stdout.strip().splitlines()[-1].rsplit(" ", 1)
    assert torch_imported == "False", out.stdout
    np.testing.assert_array_equal(np.array(json.loads(tokens)), want)


@pytest.mark.parametrize("scheme", ["int8-weights", "int4-weights-int8-activations"])
def test_quantized_weights_are_stored_with_their_scheme(state: Path, monkeypatch: pytest.MonkeyPatch, scheme: str) -> None:
    """The entry holds the compressed weights and the scheme, so the loaded model also quantizes
    activations where the scheme says so (the same tokens, the same summary)."""
    _save(state / "llama", 3)
    first = CausalLM.from_pretrained(state / "llama", "cpu:0", quantize=scheme)
    tokens = _generate(first)
    float_entry, entry = _entry(state / "llama"), _entry(state / "llama", scheme)
    assert entry.is_dir() and not float_entry.exists()  # one entry per weight scheme
    _no_model_built(monkeypatch)
    second = CausalLM.from_pretrained(state / "llama", "cpu:0", quantize=scheme)
    weights_line = f"int{scheme[3]} weights as compressed-weight FullyConnected layers (" + (
        "int8 activations quantized at run time" if scheme.endswith("activations") else "float activations")
    assert weights_line in first.summary and weights_line in second.summary and "loaded from" in second.summary
    np.testing.assert_array_equal(_generate(second), tokens)


def test_a_changed_folder_is_prepared_again(state: Path) -> None:
    _save(state / "llama", 4)
    CausalLM.from_pretrained(state / "llama", "cpu:0")
    before = _entry(state / "llama")
    model = _save(state / "llama", 5)  # other weights under the same name
    lm = CausalLM.from_pretrained(state / "llama", "cpu:0")
    assert "loaded from" not in lm.summary and _entry(state / "llama") != before
    np.testing.assert_array_equal(_generate(lm), _greedy(model))


@pytest.mark.parametrize("damage", ["bytes", "missing", "other model"])
def test_an_unusable_entry_is_rebuilt_with_a_warning(state: Path, damage: str) -> None:
    model = _save(state / "llama", 6)
    CausalLM.from_pretrained(state / "llama", "cpu:0")
    entry = _entry(state / "llama")
    if damage == "bytes":
        with open(entry / "model.bin", "r+b") as fh:
            fh.seek(100)
            fh.write(b"\xff\x7f\x00\x01")
        why = "model.bin does not match its checksum"
    elif damage == "missing":  # as the size limit evicts file by file
        (entry / "model.bin").unlink()
        why = "model.bin"
    else:  # another model's entry copied onto this key's folder
        _save(state / "other", 7)
        CausalLM.from_pretrained(state / "other", "cpu:0")
        shutil.rmtree(entry)
        shutil.copytree(_entry(state / "other"), entry)
        why = "belongs to another model"
    with pytest.warns(RuntimeWarning, match=why):
        lm = CausalLM.from_pretrained(state / "llama", "cpu:0")
    assert "loaded from" not in lm.summary
    np.testing.assert_array_equal(_generate(lm), _greedy(model))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # rewritten: the next preparation loads it without a word
        assert "loaded from" in CausalLM.from_pretrained(state / "llama", "cpu:0").summary


def test_an_entry_over_the_size_limit_is_not_kept(state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _save(state / "llama", 8, width=256)  # 6 MB of weights
    monkeypatch.setenv("NEURENIX_COMPILE_CACHE_MAX_BYTES", "2M")
    with pytest.warns(RuntimeWarning, match="NEURENIX_COMPILE_CACHE_MAX_BYTES"):
        CausalLM.from_pretrained(state / "llama", "cpu:0")
    assert not _entry(state / "llama").exists()


def test_other_caches_prepare_from_the_folder_and_keep_the_model(state: Path) -> None:
    model = _save(state / "llama", 9)
    lm = CausalLM.from_pretrained(state / "llama", "cpu:0", cache="fixed")
    assert lm.cache == "fixed" and lm.source == state / "llama"
    np.testing.assert_array_equal(_generate(lm), _greedy(model))
    assert not (state / "state" / "compile_cache" / "runtime" / "generation").exists() or not any(
        p for p in (state / "state" / "compile_cache" / "runtime" / "generation").iterdir() if not p.name.startswith("."))


def test_check_quantization_loads_the_float_model_from_the_folder(state: Path) -> None:
    model = _save(state / "llama", 10)
    CausalLM.from_pretrained(state / "llama", "cpu:0", quantize="int8-weights")
    lm = CausalLM.from_pretrained(state / "llama", "cpu:0", quantize="int8-weights")
    assert "loaded from" in lm.summary
    check = lm.check_quantization(max_new_tokens=8)
    assert check == CausalLM(model, "cpu:0", quantize="int8-weights").check_quantization(max_new_tokens=8)
    assert check.tokens == 8 and 0 < check.logits_error < 0.2


def test_generation_settings_come_with_the_entry(state: Path) -> None:
    model = _save(state / "llama", 11)
    model.generation_config.eos_token_id = 7
    model.generation_config.pad_token_id = 0
    model.generation_config.save_pretrained(state / "llama")
    first = CausalLM.from_pretrained(state / "llama", "cpu:0")
    second = CausalLM.from_pretrained(state / "llama", "cpu:0")
    assert "loaded from" in second.summary
    assert (second.generation_config.eos_token_id, second.generation_config.pad_token_id) == (7, 0)
    assert (first.generation_config.eos_token_id, first.generation_config.pad_token_id) == (7, 0)


def test_a_path_that_is_not_a_saved_model_is_refused(tmp_path: Path) -> None:
    with pytest.raises(GenerationError, match="no config.json") as err:
        CausalLM.from_pretrained(tmp_path, "cpu:0")
    assert isinstance(err.value, NeurenixError) and "save_pretrained" in str(err.value)
