"""nx.generate: greedy and sampled generation with a key/value cache on the device (issue 26).

Tiny GPT-2 and Llama configs (tests/support/hf_zoo.py) with weights redrawn at a larger scale,
so that greedy decoding does not repeat one token (the configs' initialisation makes nearly
uniform logits). Greedy generation of 32 tokens is compared token for token with transformers'
own ``model.generate(do_sample=False)`` on cpu:0 (both cache kinds) and on the emulated cuda,
tpu, npu and edgetpu devices (fp32, the fixed-capacity cache: two compilations, prefill and
decode). Each model is exported once (the export is shared across devices and cache kinds);
its weights are the transformers model's own memory, and the cache's buffers are written in place.
"""

from __future__ import annotations

import importlib.util
import re
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import hf_zoo as hz

import neurenix_core as nx
from neurenix_core.generation import CausalLM, GenerationError, NotACausalLMError
from neurenix_core.generation.state import default_cache

NEW = 32
PROMPT = 6
DEVICES = ["cuda:0", "tpu:0", "npu:0", "edgetpu:0"]
LOGITS_TOL = 1e-4  # the cache path vs a full recompute in transformers, relative to the largest logit


def _model(name: str) -> Any:
    return hz.build_varied(name)


def _prompt(batch: int, length: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(3, 120, (batch, length)).astype(np.int64)


@pytest.fixture(scope="module")
def models() -> dict[str, tuple[Any, np.ndarray, np.ndarray]]:
    """name -> (transformers model, prompt (1, PROMPT), transformers' greedy output)."""
    out = {}
    for name in ("gpt2", "llama"):
        model = _model(name)
        ids = _prompt(1, PROMPT)
        with torch.no_grad():
            ref = model.generate(torch.from_numpy(ids), attention_mask=torch.ones(1, PROMPT, dtype=torch.int64), do_sample=False,
                                 max_new_tokens=NEW).numpy()
        out[name] = (model, ids, ref)
    return out


@pytest.fixture(scope="module")
def lms(models: dict[str, Any]) -> dict[tuple[str, str], CausalLM]:
    """(name, cache kind) -> a CausalLM on cpu:0."""
    return {(name, kind): CausalLM(models[name][0], "cpu:0", cache=kind) for name in models for kind in ("dynamic", "fixed")}


@pytest.mark.parametrize("name", ["gpt2", "llama"])
@pytest.mark.parametrize("kind", ["dynamic", "fixed"])
def test_greedy_equals_transformers_on_cpu(models: dict[str, Any], lms: dict[tuple[str, str], CausalLM], name: str, kind: str) -> None:
    _, ids, ref = models[name]
    assert len(set(ref[0, PROMPT:].tolist())) > 4, "the weights give a degenerate sequence; the comparison would be weak"
    lm = CausalLM(models[name][0], "cpu:0", cache=kind)  # the export is shared with lms[(name, kind)]: compiled shapes are not
    assert lm.graph is lms[(name, kind)].graph
    out = lm.generate(ids, max_new_tokens=NEW)
    np.testing.assert_array_equal(out, ref)
    # dynamic: one new shape per step (prefill + each decode step but the last); fixed: the prompt's bucket and the decode step
    assert lm.compilations == (out.shape[1] - PROMPT if kind == "dynamic" else 2)


@pytest.mark.parametrize("name", ["gpt2", "llama"])
@pytest.mark.parametrize("device", DEVICES)
def test_greedy_equals_transformers_on_devices(models: dict[str, Any], name: str, device: str) -> None:
    if device not in [str(d) for d in nx.devices()]:
        pytest.skip(f"{device} is not available here (run with NEURENIX_EMULATE=cuda,tpu,npu,edgetpu JAX_PLATFORMS=cpu)")
    model, ids, ref = models[name]
    lm = CausalLM(model, device, precision="fp32")
    assert lm.cache == "fixed"  # the default on every device: one decode shape
    np.testing.assert_array_equal(lm.generate(ids, max_new_tokens=NEW), ref)
    assert lm.compilations == 2  # the prompt's bucket and the one decode shape
    assert lm.generate(_prompt(1, PROMPT - 1, seed=3), max_new_tokens=NEW).shape[1] <= PROMPT - 1 + NEW
    assert lm.compilations == 2  # another prompt length in the same bucket compiles nothing


def test_sampling_is_reproducible_by_seed(models: dict[str, Any], lms: dict[tuple[str, str], CausalLM]) -> None:
    lm = lms[("llama", "dynamic")]
    ids = models["llama"][1]
    one = lm.generate(ids, max_new_tokens=16, do_sample=True, temperature=1.5, top_k=50, top_p=0.95, seed=7)
    again = lm.generate(ids, max_new_tokens=16, do_sample=True, temperature=1.5, top_k=50, top_p=0.95, seed=7)
    other = lm.generate(ids, max_new_tokens=16, do_sample=True, temperature=1.5, top_k=50, top_p=0.95, seed=8)
    np.testing.assert_array_equal(one, again)
    assert not np.array_equal(one, other)
    greedy = lm.generate(ids, max_new_tokens=16)
    np.testing.assert_array_equal(lm.generate(ids, max_new_tokens=16, do_sample=True, top_k=1, seed=3), greedy)  # top-k 1 is greedy
    np.testing.assert_array_equal(lm.generate(ids, max_new_tokens=16, do_sample=True, top_p=1e-6, seed=3), greedy)


def test_stop_token_ends_a_sequence(models: dict[str, Any], lms: dict[tuple[str, str], CausalLM]) -> None:
    lm = lms[("gpt2", "fixed")]
    _, ids, ref = models["gpt2"]
    stop = int(ref[0, PROMPT + 5])
    first = PROMPT + int(np.argmax(ref[0, PROMPT:] == stop))  # the first time greedy decoding emits it
    out = lm.generate(ids, max_new_tokens=NEW, eos_token_id=stop)
    np.testing.assert_array_equal(out, ref[:, :first + 1])
    # in a batch, a finished row is filled with the pad token while the other goes on
    other = _prompt(1, PROMPT, seed=5)
    batch = lm.generate(np.concatenate([ids, other]), max_new_tokens=NEW, eos_token_id=stop, pad_token_id=0)
    alone = lm.generate(other, max_new_tokens=NEW, eos_token_id=stop, pad_token_id=0)
    np.testing.assert_array_equal(batch[1, :alone.shape[1]], alone[0])
    assert (batch[0, first + 1:] == 0).all() and batch[0, first] == stop


@pytest.mark.parametrize("kind", ["dynamic", "fixed"])
def test_left_padded_batch_equals_each_prompt_alone(models: dict[str, Any], lms: dict[tuple[str, str], CausalLM], kind: str) -> None:
    lm = lms[("llama", kind)]
    short, long = _prompt(1, 5, seed=1), _prompt(1, 9, seed=2)
    ids = np.concatenate([np.concatenate([np.zeros((1, 4), np.int64), short], axis=1), long])
    mask = np.ones_like(ids)
    mask[0, :4] = 0
    out = lm.generate(ids, attention_mask=mask, max_new_tokens=12, eos_token_id=[])
    np.testing.assert_array_equal(out[0, 4:], lm.generate(short, max_new_tokens=12, eos_token_id=[])[0])
    np.testing.assert_array_equal(out[1], lm.generate(long, max_new_tokens=12, eos_token_id=[])[0])


def test_stream_yields_the_same_tokens(models: dict[str, Any], lms: dict[tuple[str, str], CausalLM]) -> None:
    lm = lms[("gpt2", "dynamic")]
    _, ids, ref = models["gpt2"]
    steps = list(nx.generate(lm, ids, max_new_tokens=NEW, stream=True))
    assert len(steps) == NEW and all(s.shape == (1,) for s in steps)
    np.testing.assert_array_equal(np.stack(steps, axis=1), ref[:, PROMPT:])


@pytest.mark.parametrize("kind", ["dynamic", "fixed"])
def test_cache_equals_a_full_recompute(models: dict[str, Any], lms: dict[tuple[str, str], CausalLM], kind: str) -> None:
    """The logits of each cached step equal transformers' forward over the whole sequence (no cache)."""
    model, ids, ref = models["llama"]
    lm = lms[("llama", kind)]
    cache, ids_in, mask_in = lm._start(ids, np.ones(ids.shape, bool), 8)
    logits = lm._step(cache, ids_in, mask_in)
    for t in range(5):
        seq = ref[:, :PROMPT + t]
        with torch.no_grad():
            full = model(torch.from_numpy(seq), use_cache=False).logits[:, -1].numpy()
        np.testing.assert_allclose(logits, full, atol=LOGITS_TOL * np.abs(full).max(), rtol=0)
        logits = lm._step(cache, ref[:, PROMPT + t:PROMPT + t + 1], np.ones((1, 1), bool))


def test_refusals(models: dict[str, Any], lms: dict[tuple[str, str], CausalLM]) -> None:
    bert, _ = hz.build("bert")
    with pytest.raises(NotACausalLMError, match="not a decoder-only causal LM"):
        nx.generate(bert, _prompt(1, 4), device="cpu:0")
    with pytest.raises(NotACausalLMError, match="expects a transformers causal LM"):
        CausalLM(object(), "cpu:0")
    lm = lms[("gpt2", "dynamic")]
    ids = _prompt(2, 4)
    for kwargs, match in [({"max_new_tokens": 0}, "max_new_tokens"), ({"do_sample": True, "temperature": 0.0}, "temperature"),
                          ({"do_sample": True, "top_p": 1.5}, "top_p"), ({"do_sample": True, "top_k": 0}, "top_k"),
                          ({"attention_mask": np.array([[1, 1, 1, 0], [1, 1, 1, 1]])}, "left-padded"),
                          ({"attention_mask": np.ones((2, 3))}, "does not match"),
                          ({"max_new_tokens": 200}, "learned positions")]:  # GPT-2's table has 128 positions
        with pytest.raises(GenerationError, match=match):
            lm.generate(ids, **kwargs)
    with pytest.raises(GenerationError, match="capacity"):
        CausalLM(models["gpt2"][0], "cpu:0", cache="fixed", capacity=8).generate(ids, max_new_tokens=16)
    with pytest.raises(GenerationError, match="already prepared"):  # a prepared model never moves silently
        nx.generate(lm, ids, max_new_tokens=2, device="npu:0")


def test_step_model_shares_the_models_weights(models: dict[str, Any], lms: dict[tuple[str, str], CausalLM]) -> None:
    """The step graph holds views of the transformers model's tensors, not copies (a 135M model
    would otherwise cost 540 MB more per copy), read-only so that nothing writes through them."""
    model = models["llama"][0]
    graph = lms[("llama", "fixed")].graph.symbolic_graph()
    weights = [v for node in graph.nodes for v in node.params.values() if isinstance(v, np.ndarray) and v.size > 1000]
    own = [p.detach().numpy() for p in model.parameters()]
    assert weights and all(any(np.shares_memory(w, o) for o in own) for w in weights)
    assert not any(w.flags.writeable for w in weights)


def test_default_cache_on_cpu_is_the_runtimes_state(models: dict[str, Any]) -> None:
    """cpu:0's default keeps the cache in OpenVINO's state where the npu plugin offers its runtime
    (tests/test_generation_state.py); a model whose step it refuses (GPT-2's lowering holds a size
    of the call) falls back to the fixed cache, and the summary says why. Elsewhere: fixed."""
    model, ids, ref = models["llama"]
    lm = CausalLM(model, "cpu:0")
    if importlib.util.find_spec("neurenix_npu_openvino") is None:
        assert lm.cache == "fixed" and not lm.state_note
        return
    assert lm.cache == "state" and lm.compilations == 1
    np.testing.assert_array_equal(lm.generate(ids, max_new_tokens=NEW), ref)
    gpt2, gpt2_ids, gpt2_ref = models["gpt2"]
    fell_back = CausalLM(gpt2, "cpu:0")
    assert fell_back.cache == "fixed" and fell_back.state_note.startswith("cache='state' (cpu:0's default) not used: host runtime openvino")
    assert fell_back.state_note.endswith("; the fixed cache serves it") and fell_back.state_note.count("cache='fixed'") == 0, fell_back.state_note
    assert fell_back.summary.endswith(fell_back.state_note)
    np.testing.assert_array_equal(fell_back.generate(gpt2_ids, max_new_tokens=NEW), gpt2_ref)
    for kwargs in ({"capacity": 64}, {"options": {"runtime": "torch"}}, {"precision": "fp16"}):
        assert default_cache(lm.device, kwargs.get("capacity"), kwargs.get("precision"), kwargs.get("options", {})) == "fixed"


def test_fixed_cache_is_written_in_place(models: dict[str, Any]) -> None:
    """cpu:0 too gets one decode shape; the step returns only the new keys/values, which the
    cache writes into its buffers (the same objects from the prefill to the last step)."""
    model, ids, _ = models["llama"]
    lm = CausalLM(model, "cpu:0", cache="fixed")
    assert lm.cache == "fixed"
    cache, ids_in, mask_in = lm._start(ids, np.ones(ids.shape, bool), 4)
    buffers = [id(b) for b in cache.buffers]
    outs = lm.compiled(*cache.step_inputs(ids_in, mask_in))
    spec = lm.spec
    assert [tuple(o.shape) for o in outs[1:]] == [(1, spec.kv_heads, ids_in.shape[1], spec.head_dim)] * (2 * spec.layers)
    cache.advance(tuple(outs[1:]), mask_in)
    assert cache.filled == ids_in.shape[1] and [id(b) for b in cache.buffers] == buffers
    np.testing.assert_array_equal(cache.buffers[0].numpy()[:, :, :cache.filled], outs[1].numpy())
    assert not cache.buffers[0].numpy()[:, :, cache.filled:].any()  # the slots to come are untouched
    for _ in range(3):
        lm._step(cache, np.array([[7]]), np.ones((1, 1), bool))
    assert cache.filled == ids_in.shape[1] + 3 and [id(b) for b in cache.buffers] == buffers
    with pytest.raises(GenerationError, match="is full"):
        while True:
            lm._step(cache, np.array([[7]]), np.ones((1, 1), bool))


def test_cpu_decodes_every_capacity_on_one_openvino_model(models: dict[str, Any]) -> None:
    """cpu:0's OpenVINO decoder compiles one model for the decode steps of every cache capacity
    (their lowerings differ only in the cache's length: shape_sharing.py in the npu plugin), so a
    longer generation adds no copy of the weights; the tokens stay transformers' at both."""
    pytest.importorskip("neurenix_cuda_tc")
    pytest.importorskip("neurenix_npu_openvino")
    model, ids, ref = models["llama"]
    lm = CausalLM(model, "cpu:0", cache="fixed")
    np.testing.assert_array_equal(lm.generate(ids, max_new_tokens=8), ref[:, :PROMPT + 8])  # capacity 16
    np.testing.assert_array_equal(lm.generate(ids, max_new_tokens=NEW), ref)  # capacity 64
    decode = str(lm.decoder.summary)
    assert len(lm.decoder.compiled_shapes) == 2
    # "of 2 input shapes", or more where another test's decoder of these weights is alive (a batch
    # of 2 then makes the batch axes dynamic too): it shares the same model
    shared = re.search(r"(compiled one model|runs on the compiled model) of \d+ input shapes with the same lowering \(([^)]*) dynamic\): "
                       r"one copy of the weights", decode)
    assert shared is not None and {"mask[3]", "past_0[2]"} <= set(shared.group(2).split(", "))
    np.testing.assert_array_equal(lm.generate(ids, max_new_tokens=8), ref[:, :PROMPT + 8])  # capacity 16 again, on the shared model


def test_cpu_runs_a_fixed_cache_on_pytorch(models: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """On cpu:0 a fixed cache prefills on PyTorch's runtime (the cuda plugin's, whose layers are the
    graph's weights: test_cuda_tc_host_runtime) and decodes on OpenVINO's where the npu plugin
    offers it (one compiled copy for the one decode shape), not on whichever runtime measures
    fastest; a runtime named by options= or NEURENIX_CPU_RUNTIME still decides every step."""
    pytest.importorskip("neurenix_cuda_tc")
    model, ids, ref = models["llama"]
    lm = CausalLM(model, "cpu:0", cache="fixed")
    np.testing.assert_array_equal(lm.generate(ids, max_new_tokens=NEW), ref)
    prefill = str(lm.compiled.summary)
    assert prefill.count("runtime torch (nx.generation's runtime for a fixed cache's prompt on cpu:0: it shares the transformers model's weights") == 1
    cache_shape = (1, lm.spec.kv_heads, cache_capacity := 64, lm.spec.head_dim)  # PROMPT 6 -> 8 slots, + NEW - 1: 64
    assert cache_capacity == lm._start(ids, np.ones(ids.shape, bool), NEW)[0].capacity
    if importlib.util.find_spec("neurenix_npu_openvino") is None:
        assert lm.decoder is None and lm.compilations == 2 and f"{cache_shape} x{2 * lm.spec.layers}:" in prefill
    else:
        decode = str(lm.decoder.summary)
        assert decode.count("runtime openvino (nx.generation's runtime for a fixed cache's decode steps on cpu:0") == 1 and lm.compilations == 2
        assert f"{cache_shape} x{2 * lm.spec.layers}:" in decode, "equal input shapes are written once with their count"
        assert lm.summary == f"prefill: {prefill}\ndecode: {decode}"
    named = CausalLM(model, "cpu:0", options={"runtime": "numpy"})
    named.generate(ids, max_new_tokens=2)
    assert "runtime='numpy' asked" in str(named.compiled.summary) and "PyTorch" not in str(named.compiled.summary)
    assert named.decoder is None
    monkeypatch.setenv("NEURENIX_CPU_RUNTIME", "numpy")
    by_env = CausalLM(model, "cpu:0")
    by_env.generate(ids, max_new_tokens=2)
    assert "PyTorch" not in str(by_env.compiled.summary)
