"""nx.generate with cache="state": the runtime keeps the keys/values between steps (API 1.7).

cpu:0's OpenVINO runtime compiles the step graph once as a stateful model (the npu plugin's
stateful.py) and runs a language model's step on OpenVINO's PagedAttention (paged.py): the past
keys/values live in blocks the kernel writes in place, and one compiled model serves the prompt
and every decode step at any length. Checked against transformers on the tiny Llama of tests/support/hf_zoo.py (weights
redrawn so that greedy decoding varies), as tests/test_generation.py checks the other caches.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("neurenix_npu_openvino")

import hf_zoo as hz

from neurenix_core.errors import CompilationError, UnsupportedOperationError
from neurenix_core.generation import CausalLM, GenerationError

NEW = 24
LOGITS_TOL = 1e-4  # relative to the largest logit, as tests/test_generation.py


def _model(name: str) -> Any:
    return hz.build_varied(name)


def _reference(model: Any, ids: np.ndarray, new: int) -> np.ndarray:
    with torch.no_grad():
        return model.generate(torch.from_numpy(ids), attention_mask=torch.ones(ids.shape, dtype=torch.int64), do_sample=False,
                              max_new_tokens=new, min_new_tokens=new, pad_token_id=0).numpy()


@pytest.fixture(scope="module")
def llama() -> Any:
    return _model("llama")


@pytest.fixture(scope="module")
def lm(llama: Any) -> CausalLM:
    return CausalLM(llama, "cpu:0", cache="state")


def test_greedy_equals_transformers_on_one_stateful_model(llama: Any, lm: CausalLM) -> None:
    """Prompts of three lengths, each generated twice, on one compiled model: the tokens are
    transformers' every time (the state starts empty at each generation), every attention layer
    runs on OpenVINO's PagedAttention, and nothing compiles after preparing."""
    for length in (6, 13, 6):
        ids = np.random.default_rng(length).integers(3, 120, (1, length))
        ref = _reference(llama, ids, NEW)
        np.testing.assert_array_equal(lm.generate(ids, max_new_tokens=NEW, eos_token_id=[]), ref)
    assert lm.compilations == 1 and lm.decoder is None
    summary = str(lm.summary)
    assert "stateful: one compiled model for the prompt and every step" in summary
    assert f", {lm.spec.layers} attention layer(s) on OpenVINO's PagedAttention" in summary


def test_each_step_equals_a_full_recompute(llama: Any, lm: CausalLM) -> None:
    """The logits of the prompt and of each decode step equal transformers' forward over the
    whole sequence without a cache."""
    ids = np.random.default_rng(3).integers(3, 120, (1, 7))
    ref = _reference(llama, ids, 6)
    cache, ids_in, mask_in = lm._start(ids, np.ones(ids.shape, bool), 6)
    logits = lm._step(cache, ids_in, mask_in)
    for t in range(5):
        with torch.no_grad():
            full = llama(torch.from_numpy(ref[:, :7 + t]), use_cache=False).logits[:, -1].numpy()
        np.testing.assert_allclose(logits, full, atol=LOGITS_TOL * np.abs(full).max(), rtol=0)
        logits = lm._step(cache, ref[:, 7 + t:8 + t], np.ones((1, 1), bool))
    assert cache.filled == 7 + 5 and not cache.buffers  # the host keeps the slots' bookkeeping only


def test_left_padded_batch_equals_each_prompt_alone(lm: CausalLM) -> None:
    rng = np.random.default_rng(5)
    short, long = rng.integers(3, 120, (1, 4)), rng.integers(3, 120, (1, 9))
    batch = np.concatenate([np.concatenate([np.zeros((1, 5), np.int64), short], axis=1), long])
    mask = np.ones(batch.shape, np.int64)
    mask[0, :5] = 0
    both = lm.generate(batch, attention_mask=mask, max_new_tokens=10, eos_token_id=[])
    np.testing.assert_array_equal(both[0, 5:], lm.generate(short, max_new_tokens=10, eos_token_id=[])[0])
    np.testing.assert_array_equal(both[1], lm.generate(long, max_new_tokens=10, eos_token_id=[])[0])


@pytest.mark.parametrize("length", [128, 200])
def test_a_prompt_of_several_cache_blocks_gives_transformers_logits(llama: Any, lm: CausalLM, length: int) -> None:
    """Prompts of 4 and 7 blocks of 32 tokens: the logits of the last position equal transformers'
    forward (a paged step whose per-call input arrays were freed before the kernel read them gave
    logits off by the whole scale from 128 tokens on, and right ones below)."""
    from neurenix_core.generation.cache import KVCache

    ids = np.random.default_rng(length).integers(3, 120, (1, length))
    with torch.no_grad():
        want = llama(torch.from_numpy(ids)).logits[0, -1].numpy()
    lm.compiled.reset()
    got = lm._step(KVCache(lm.spec, 1, length + 1, lm.device, grows=True, buffers=False), ids, np.ones(ids.shape, bool))[0]
    assert float(np.abs(got - want).max()) <= LOGITS_TOL * float(np.abs(want).max())


def test_a_batch_that_outgrows_its_first_cache_blocks_equals_each_prompt_alone(lm: CausalLM) -> None:
    """Three left-padded prompts and 70 new tokens: the rows take 10 blocks of 32 tokens where the
    first allocation holds 8, so the blocks grow (copied) in the middle of the generation."""
    rng = np.random.default_rng(8)
    prompts = [rng.integers(3, 120, (1, n)) for n in (30, 17, 5)]
    batch = np.concatenate([np.concatenate([np.zeros((1, 30 - p.shape[1]), np.int64), p], axis=1) for p in prompts])
    mask = (np.arange(30)[None, :] >= 30 - np.array([p.shape[1] for p in prompts])[:, None]).astype(np.int64)
    together = lm.generate(batch, attention_mask=mask, max_new_tokens=70, eos_token_id=[])
    for row, p in enumerate(prompts):
        np.testing.assert_array_equal(together[row, 30 - p.shape[1]:], lm.generate(p, max_new_tokens=70, eos_token_id=[])[0])


def test_a_mask_paged_attention_cannot_compute_is_refused(lm: CausalLM) -> None:
    """The paged step reads which tokens are real from the mask and computes causal attention over
    them: a mask that says anything else (a query seeing a later token) is refused, not ignored."""
    from neurenix_core.errors import OperationError

    lm.compiled.reset()
    ids = np.array([[5, 6, 7]])
    mask = np.zeros((1, 1, 3, 3), np.float32)  # every query sees every token: not causal
    with pytest.raises(OperationError, match="PagedAttention, which attends causally"):
        lm.compiled.model(ids, mask, np.arange(3)[None])


def test_weight_only_quantization_equals_the_fixed_cache(llama: Any) -> None:
    """int8 weights in the stateful model compute what the same weights compute with the cache
    fed from the host (OpenVINO's compressed weights either way)."""
    ids = np.random.default_rng(7).integers(3, 120, (1, 8))
    state = CausalLM(llama, "cpu:0", cache="state", quantize="int8-weights")
    fixed = CausalLM(llama, "cpu:0", cache="fixed", quantize="int8-weights", options={"runtime": "openvino"})
    np.testing.assert_array_equal(state.generate(ids, max_new_tokens=12, eos_token_id=[]),
                                  fixed.generate(ids, max_new_tokens=12, eos_token_id=[]))
    assert "int8 weights as compressed-weight FullyConnected layers" in str(state.summary)


@pytest.mark.parametrize("scheme", ["int8-weights-int8-activations", "int4-weights-int8-activations"])
def test_int8_activations_compute_the_cores_meaning(llama: Any, scheme: str) -> None:
    """With activations quantized at run time too, the stateful model's prompt logits equal the
    core's meaning of the scheme (the fixed cache on the interpreter: grouped int8 inputs times the
    dequantized weights) to float32 rounding, and its tokens are the same; the weight-only model's
    logits are further off than that (so this is not float activations passing)."""
    import warnings

    from neurenix_npu_openvino.activation_probe import _probe
    from openvino import Core

    why = _probe(Core(), int(scheme[3]))
    if why is not None:
        pytest.skip(f"OpenVINO's CPU device keeps float activations on this CPU ({why})")
    ids = np.random.default_rng(9).integers(3, 120, (1, 40))
    state = CausalLM(llama, "cpu:0", cache="state", quantize=scheme)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the interpreter computes the scheme's meaning in float, and says so
        meaning = CausalLM(llama, "cpu:0", cache="fixed", quantize=scheme, options={"runtime": "numpy"})
    weight_only = CausalLM(llama, "cpu:0", cache="state", quantize=scheme.removesuffix("-int8-activations"))

    def prompt_logits(lm: CausalLM) -> np.ndarray:
        if lm.cache == "state":
            lm.compiled.reset()
        cache, ids_in, mask_in = lm._start(ids, np.ones(ids.shape, bool), 4)
        return lm._step(cache, ids_in, mask_in)

    want = prompt_logits(meaning)
    size = float(np.abs(want).max())
    assert float(np.abs(prompt_logits(state) - want).max()) <= LOGITS_TOL * size
    assert float(np.abs(prompt_logits(weight_only) - want).max()) >= 10 * LOGITS_TOL * size
    np.testing.assert_array_equal(state.generate(ids, max_new_tokens=12, eos_token_id=[]),
                                  meaning.generate(ids, max_new_tokens=12, eos_token_id=[]))
    assert "int8 activations quantized at run time in groups of 32" in str(state.summary)


def test_refusals_name_the_remedy(llama: Any) -> None:
    with pytest.raises(GenerationError, match="cache='state' runs on cpu:0's host runtimes"):
        CausalLM(llama, "npu:0", cache="state")
    for runtime in ("numpy", "torch"):  # the interpreter; PyTorch's runtime (plugin cuda), where installed
        if runtime == "torch" and importlib.util.find_spec("neurenix_cuda_tc") is None:
            continue
        with pytest.raises(GenerationError, match=rf"'{runtime}': keeps no state between calls.*cache='fixed'"):
            CausalLM(llama, "cpu:0", cache="state", options={"runtime": runtime})
    with pytest.raises(GenerationError, match="'acme': no installed plugin offers it. pip install neurenix-npu-openvino"):
        CausalLM(llama, "cpu:0", cache="state", options={"runtime": "acme"})
    with pytest.raises(GenerationError, match="precision='fp16'"):
        CausalLM(llama, "cpu:0", cache="state", precision="fp16")
    with pytest.raises(GenerationError, match="use 'fixed', 'state' or 'dynamic'"):
        CausalLM(llama, "cpu:0", cache="stateful")


def test_a_lowering_that_holds_a_size_is_refused() -> None:
    """GPT-2's step graph reshapes a value to the call's batch and length (a ``view``), which the
    lowering writes as numbers: the two specializations lower differently and the runtime refuses
    rather than compile a model that is wrong at a third size."""
    with pytest.raises(CompilationError, match="lowers to different OpenVINO models at two sets of input sizes.*cache='fixed'"):
        CausalLM(_model("gpt2"), "cpu:0", cache="state")


def test_a_runtime_without_state_refuses_by_name() -> None:
    """The contract's default: a host runtime that does not declare keeps_state refuses."""
    from neurenix_core.graph.ir.host import HostOptions, HostRuntime

    class Plain(HostRuntime):
        name = "plain"

        def compile(self, graph: Any, options: HostOptions) -> Any:
            raise AssertionError("not called")

    assert not Plain.keeps_state
    with pytest.raises(UnsupportedOperationError, match="host runtime plain keeps no state between calls"):
        Plain().compile_stateful(None, None, (), HostOptions())  # type: ignore[arg-type]
