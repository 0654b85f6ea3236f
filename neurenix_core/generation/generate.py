"""``nx.generate`` and :class:`CausalLM`: text generation with a key/value cache on the device.

Preparation (the step model's import and compilation) happens once per :class:`CausalLM`;
``generate`` then runs the prompt through the model once (prefill) and one token per step,
feeding the present keys/values back as device Tensors. ``nx.generate(hf_model, ...)`` keeps one
CausalLM per model, device and cache kind, so repeated calls prepare nothing again.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from neurenix_core._log import shows_progress
from neurenix_core.errors import CompilationError
from neurenix_core.generation.cache import KVCache
from neurenix_core.generation.errors import GenerationError
from neurenix_core.generation.sampling import Sampler
from neurenix_core.generation.state import default_cache
from neurenix_core.generation.step import StepSpec, export_step, spec_of
from neurenix_core.kwargs import strict_kwargs

__all__ = ["CACHE_KINDS", "CausalLM", "QuantizationCheck", "clear", "generate"]

#: "fixed": the step attends over a capacity chosen per generation, one compiled shape for every
#: decode step (the default but on cpu:0 with OpenVINO's runtime); "dynamic": over the filled slots
#: only, one input shape per step; "state": the runtime keeps the cache between steps, one
#: compiled model for every step (state.py; cpu:0's default where OpenVINO's runtime is installed).
CACHE_KINDS = ("dynamic", "fixed", "state")
_MIN_BUCKET = 8
#: Fixed capacities above this are multiples of it (below, powers of two): a 1024-token prompt and
#: 128 new tokens attend over 1280 slots, not 2048, and a few capacities still serve every call.
_CAPACITY_STEP = 256
#: Show a progress bar by default from this many new tokens on (on a terminal).
_PROGRESS_FROM = 64


def _pow2(n: int, floor: int) -> int:
    return max(floor, 1 << max(0, int(n) - 1).bit_length())


def _capacity(need: int) -> int:
    """The fixed cache's default capacity for ``need`` slots (see _CAPACITY_STEP)."""
    if need <= _CAPACITY_STEP:
        return _pow2(need, 2 * _MIN_BUCKET)
    return -(-need // _CAPACITY_STEP) * _CAPACITY_STEP


@dataclass(frozen=True, slots=True)
class QuantizationCheck:
    """:meth:`CausalLM.check_quantization`'s result: the largest logit difference of the first step
    relative to the largest logit, and how many greedy tokens equal the float model's
    (``agreement`` of ``tokens``; ``first_difference``: the step of the first one that differs)."""

    quantize: str | None
    logits_error: float
    agreement: int
    tokens: int
    first_difference: int

    def __str__(self) -> str:
        return (f"{self.quantize or 'float weights'}: {self.agreement}/{self.tokens} greedy tokens equal to the float model's "
                f"(first difference at step {self.first_difference}), first-step logits within {self.logits_error:.2%} of the largest")


@dataclass(frozen=True, slots=True)
class _Plan:
    """One generate call's resolved arguments."""

    max_new_tokens: int
    sampler: Sampler
    eos: tuple[int, ...]
    pad: int | None
    seed: int | None


class CausalLM:
    """A ``transformers`` causal LM prepared for generation on ``device``.

    ``cache``: "state" (cpu:0's default where OpenVINO's runtime is installed: the runtime keeps the
    keys/values in its state, one compiled model for the prompt and every step; a model it refuses
    falls back to "fixed", and ``.state_note`` and the summary say why), "fixed" (the default
    elsewhere: every decode step has one input shape, compiled once) or "dynamic" (the step attends
    over the filled slots only: a new input shape per step).
    ``capacity``: the fixed cache's slots (None: what the padded prompt and the new tokens need,
    rounded up to a power of two, past 256 to a multiple of 256, so a few capacities serve every
    call). ``quantize``: None (the model's float weights), "int8-weights" (int8 per output channel)
    or "int4-weights" (int4 per group of input features), with "-int8-activations" appended each
    layer's input rounded to int8 at run time too (groups of 32), planned by the core and lowered by
    the device's plugin where it can (npu: OpenVINO compressed weights), else computed as the
    dequantized float model with a warning; :meth:`check_quantization` measures what it changes.
    ``precision`` and ``options`` go to ``nx.compile``. On cpu:0, unless ``options`` or
    NEURENIX_CPU_RUNTIME names a runtime, a fixed cache prefills on PyTorch's runtime (plugin
    cuda: it shares the transformers model's weights, so the prompt buckets add no copy) and
    decodes on OpenVINO's (plugin npu: one compiled copy of the weights for every cache capacity,
    whose matrix-vector kernels read them faster), and a dynamic one runs on the interpreter (its
    per-shape plans share the weights, where a host runtime would compile, and copy the weights,
    once per step). ``.compiled`` runs the prefill (and every step where there is no separate
    decoder), ``.decoder`` the decode steps (None: ``.compiled`` runs them).
    ``.compilations`` counts the input shapes compiled so far.
    """

    @strict_kwargs("nx.generation.CausalLM")
    def __init__(self, model: Any, device: Any = None, *, cache: str | None = None, capacity: int | None = None,
                 precision: str | None = None, quantize: str | None = None, options: Mapping[str, Any] | None = None) -> None:
        self._prepare(model, device, cache, capacity, precision, quantize, options)

    @classmethod
    @strict_kwargs("nx.generation.CausalLM.from_pretrained")
    def from_pretrained(cls, path: Any, device: Any = None, *, cache: str | None = None, capacity: int | None = None,
                        precision: str | None = None, quantize: str | None = None, options: Mapping[str, Any] | None = None) -> CausalLM:
        """The model saved in the folder ``path`` (``save_pretrained``'s) prepared as ``CausalLM(...)``
        would: where cpu:0 keeps the cache in its runtime's state, the compiled step is stored, and a
        later process loads it without building the transformers model (``pretrained.py``)."""
        from neurenix_core.generation.pretrained import from_pretrained

        return from_pretrained(cls, path, device, cache=cache, capacity=capacity, precision=precision, quantize=quantize, options=options)

    def _prepare(self, model: Any, device: Any, cache: str | None, capacity: int | None, precision: str | None, quantize: str | None,
                 options: Mapping[str, Any] | None, store: Any = None) -> None:
        """``__init__``'s work; ``store``: where a stateful step is also written (pretrained.py)."""
        from neurenix_core.graph.compile.compiler import compile as nx_compile
        from neurenix_core.tensor.placement import default_backend

        self.spec: StepSpec = spec_of(model)
        _, self.device, _ = default_backend(device)
        asked = cache
        opts = dict(options or {})
        cache = default_cache(self.device, capacity, precision, opts) if cache is None else cache
        if cache not in CACHE_KINDS:
            raise GenerationError(f"{self.device}: cache={cache!r}; use 'fixed', 'state' or 'dynamic'")
        if capacity is not None and (cache != "fixed" or capacity < 1):
            raise GenerationError(f"{self.device}: capacity={capacity!r} applies to cache='fixed' only and must be >= 1")
        self.cache, self.capacity, self.quantize = cache, capacity, quantize
        self._model_ref: Callable[[], Any] = weakref.ref(model)
        #: The saved model folder (from_pretrained), where check_quantization loads the float model.
        self.source: Any = None
        self._owned: Any = None  # from_pretrained's model, where nothing else holds it
        self.generation_config = getattr(model, "generation_config", None)
        self.model_name = type(model).__name__
        self.graph = export_step(model, self.spec)
        self.decoder: Any = None
        #: Why the default cache="state" did not serve this model ("": it did, or it was not tried).
        self.state_note = ""
        if cache == "state":
            try:
                self.compiled = _stateful_step(self.graph.symbolic_graph(), self.spec, self.device, precision, quantize, dict(opts), store)
                return
            except (CompilationError, GenerationError) as exc:
                if asked is not None:  # asked for: never another cache than the one named
                    raise
                self.cache = cache = "fixed"
                why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                # The refusal's remedy ("generate with cache='fixed'") is what happens next: said once.
                why = why.removesuffix("; generate with cache='fixed'").removesuffix(": generate with cache='fixed'")
                self.state_note = f"cache='state' (cpu:0's default) not used: {why}; the fixed cache serves it"
        chosen = _cpu_runtime(cache, quantize) if self.device.type == "cpu" and "runtime" not in opts else None
        if chosen is not None:
            opts["runtime"] = chosen
        self.compiled = nx_compile(self.graph, self.device, precision=precision, quantize=quantize, progress=False, options=opts or None)
        if chosen is not None:
            self.compiled.runtime_reason = _CPU_RUNTIME_REASONS[chosen]
        decode = _cpu_decode_runtime(chosen)
        if decode is not None:
            self.decoder = nx_compile(self.graph, self.device, precision=precision, progress=False, options={**opts, "runtime": decode})
            self.decoder.runtime_reason = _CPU_RUNTIME_REASONS[f"{decode} decode"]

    def __repr__(self) -> str:
        weights = "" if self.quantize is None else f", quantize={self.quantize!r}"
        return f"CausalLM({self.model_name}, device='{self.device}', cache={self.cache!r}{weights}, compilations={self.compilations})"

    def check_quantization(self, input_ids: Any = None, max_new_tokens: int = 32) -> QuantizationCheck:
        """What quantized weights change against the float model this was prepared from: greedy
        generation of ``max_new_tokens`` after ``input_ids`` (default: 16 seeded ids) here and in
        transformers, and the first step's logits. Compiles the shapes that generation needs."""
        import torch

        model = self._model_ref()
        if model is None and self.source is not None:  # from_pretrained: the float model from its folder
            from neurenix_core.generation.pretrained import load_model

            model = load_model(self.source)
        if model is None:
            raise GenerationError(f"{self!r}: the transformers model it was prepared from is gone; nothing to compare with")
        ids = _prompts(np.random.default_rng(0).integers(0, self.spec.vocab, (1, 16)) if input_ids is None else input_ids, None)[0]
        with torch.no_grad():
            ref = model.generate(torch.from_numpy(ids), attention_mask=torch.ones(ids.shape, dtype=torch.int64), do_sample=False,
                                 max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens, pad_token_id=0).numpy()
            full = model(torch.from_numpy(ids), use_cache=False).logits[:, -1].numpy()
        got = self.generate(ids, max_new_tokens=max_new_tokens, eos_token_id=[], progress=False)
        cache, ids_in, mask_in = self._start(ids, np.ones(ids.shape, bool), max_new_tokens)  # the generation's shapes: nothing compiles
        logits = self._step(cache, ids_in, mask_in)
        error = float(np.abs(logits - full).max() / max(float(np.abs(full).max()), 1e-30))
        new_got, new_ref = got[:, ids.shape[1]:], ref[:, ids.shape[1]:]
        return QuantizationCheck(self.quantize, error, int((new_got == new_ref).sum()), int(new_ref.size),
                                 int(np.argmax(np.concatenate([(new_got != new_ref).any(axis=0), [True]]))))

    @property
    def compilations(self) -> int:
        """Input shapes compiled (or, on a device that runs graphs per shape, prepared) so far."""
        return len(self.compiled.compiled_shapes) + (len(self.decoder.compiled_shapes) if self.decoder is not None else 0)

    @property
    def summary(self) -> str:
        """What runs each compiled shape: ``.compiled``'s summary, and the decoder's where there is one."""
        note = f"\n{self.state_note}" if self.state_note else ""
        if self.decoder is None:
            return str(self.compiled.summary) + note
        return f"prefill: {self.compiled.summary}\ndecode: {self.decoder.summary}{note}"

    # ------------------------------------------------------------------ public
    @strict_kwargs("nx.generation.CausalLM.generate")
    def generate(self, input_ids: Any, *, attention_mask: Any = None, max_new_tokens: int | None = None, do_sample: bool = False,
                 temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None, seed: int | None = None,
                 eos_token_id: int | Sequence[int] | None = None, pad_token_id: int | None = None, stream: bool = False,
                 progress: bool | None = None) -> Any:
        """Generate up to ``max_new_tokens`` tokens after each prompt.

        ``input_ids (B, T)`` (or one prompt ``(T,)``), left-padded where ``attention_mask``
        has zeros (as transformers pads decoder prompts). Returns ``(B, T + new)`` int64 token
        ids, prompts included, finished rows filled with ``pad_token_id``; with ``stream=True``
        an iterator of the new tokens ``(B,)``, one array per step.
        ``eos_token_id`` / ``pad_token_id`` default to the model's generation_config.
        """
        ids, mask = _prompts(input_ids, attention_mask)
        plan = self._plan(ids.shape[1], max_new_tokens, Sampler(bool(do_sample), float(temperature), top_k, top_p), seed,
                          eos_token_id, pad_token_id)
        tokens = self._tokens(ids, mask, plan)
        show = progress if progress is not None else plan.max_new_tokens >= _PROGRESS_FROM and shows_progress("generation")
        if show:
            tokens = _with_progress(tokens, plan.max_new_tokens)
        if stream:
            return tokens
        new = list(tokens)
        return np.concatenate([ids, np.stack(new, axis=1) if new else ids[:, :0]], axis=1)

    # ------------------------------------------------------------------ steps
    def _plan(self, prompt: int, max_new: int | None, sampler: Sampler, seed: int | None, eos: Any, pad: int | None) -> _Plan:
        gc = self.generation_config
        if max_new is None:
            max_new = getattr(gc, "max_new_tokens", None) or max(1, int(getattr(gc, "max_length", None) or 20) - prompt)
        if not isinstance(max_new, (int, np.integer)) or isinstance(max_new, bool) or max_new < 1:
            raise GenerationError(f"{self.device}: max_new_tokens={max_new!r}; give an integer >= 1")
        limit = self.spec.max_positions
        if limit is not None and prompt + max_new - 1 > limit:
            raise GenerationError(f"{self.model_name} has learned positions 0..{limit - 1}; a prompt of {prompt} tokens and "
                                  f"{max_new} new ones would need {prompt + max_new - 1}: give max_new_tokens <= {limit - prompt + 1}")
        if eos is None:
            eos = getattr(gc, "eos_token_id", None)
        stops = tuple(int(e) for e in (eos if isinstance(eos, (list, tuple)) else [] if eos is None else [eos]))
        if pad is None:
            pad = getattr(gc, "pad_token_id", None)
        if pad is None and stops:
            pad = stops[0]  # as transformers does for models without a pad token
        return _Plan(int(max_new), sampler, stops, None if pad is None else int(pad), seed)

    def _tokens(self, ids: np.ndarray, mask: np.ndarray, plan: _Plan) -> Iterator[np.ndarray]:
        cache, ids_in, mask_in = self._start(ids, mask, plan.max_new_tokens)
        rng = np.random.default_rng(plan.seed)
        logits = self._step(cache, ids_in, mask_in)
        unfinished = np.ones(len(ids), bool)
        for i in range(plan.max_new_tokens):
            token = plan.sampler(logits, rng)
            if plan.pad is not None:
                token = np.where(unfinished, token, plan.pad)
            yield token
            if plan.eos:
                unfinished &= ~np.isin(token, plan.eos)
            if i == plan.max_new_tokens - 1 or not unfinished.any():
                return
            logits = self._step(cache, token[:, None], np.ones((len(ids), 1), bool))

    def _start(self, ids: np.ndarray, mask: np.ndarray, max_new: int) -> tuple[KVCache, np.ndarray, np.ndarray]:
        """An empty cache and the prompts as the prefill step takes them."""
        batch, length = ids.shape
        if self.cache == "dynamic":  # the buffers hold exactly this generation; shapes follow the filled slots
            return KVCache(self.spec, batch, length + max_new - 1, self.device, grows=True), ids, mask
        if self.cache == "state":  # the runtime's state holds the keys/values: emptied, nothing padded
            self.compiled.reset()
            return KVCache(self.spec, batch, length + max_new - 1, self.device, grows=True, buffers=False), ids, mask
        # fixed: prompts left-padded to a power of two, so a few prefill shapes serve every length
        padded = _pow2(length, _MIN_BUCKET)
        ids = np.concatenate([np.zeros((batch, padded - length), np.int64), ids], axis=1)
        mask = np.concatenate([np.zeros((batch, padded - length), bool), mask], axis=1)
        need = padded + max_new - 1  # the last new token is returned, never fed back
        capacity = self.capacity if self.capacity is not None else _capacity(need)
        if capacity < need:
            raise GenerationError(f"{self.device}: capacity={capacity} holds fewer than the {need} slots this generation needs "
                                  f"(prompt {length} padded to {padded}, {max_new} new tokens); give capacity >= {need}")
        return KVCache(self.spec, batch, capacity, self.device, grows=False), ids, mask

    def _step(self, cache: KVCache, ids: np.ndarray, valid: np.ndarray) -> np.ndarray:
        if self.cache == "state":
            logits = self.compiled(*cache.step_inputs(ids, valid))
            cache.advance((), valid)
            return np.asarray(logits, np.float32)
        runs = self.decoder if self.decoder is not None and cache.filled else self.compiled
        outs = runs(*cache.step_inputs(ids, valid))
        cache.advance(tuple(outs[1:]), valid)
        logits = outs[0]
        return np.asarray(logits.numpy() if hasattr(logits, "numpy") else logits, np.float32)


def _stateful_step(graph: Any, spec: Any, device: Any, precision: str | None, quantize: str | None, options: dict[str, Any],
                   store: Any = None) -> Any:
    """cache="state": the step on cpu:0's host runtime that keeps the cache (``options["runtime"]``,
    default OpenVINO's), weight-only quantized where ``quantize`` names a scheme it computes;
    ``store`` (pretrained.py): a ``state_store.storing`` block's folder for the runtime's files."""
    from neurenix_core.generation.state import StatefulStep
    from neurenix_core.graph.compile.host_select import INTERPRETER, host_runtime_named
    from neurenix_core.graph.ir.host import HostOptions, HostRuntime
    from neurenix_core.graph.quantization.weights import weight_plan

    name = str(options.pop("runtime", "openvino"))
    threads = options.pop("threads", None)
    if device.type != "cpu" or options or precision not in (None, "fp32"):
        given = sorted(options) + ([f"precision={precision!r}"] if precision not in (None, "fp32") else [])
        raise GenerationError(f"{device}: cache='state' runs on cpu:0's host runtimes in fp32 (device='cpu', options runtime/threads)"
                              + (f", not {', '.join(given)}" if given else "") + "; use cache='fixed'")
    runtime = None if name == INTERPRETER else host_runtime_named(name).get(name)
    if not isinstance(runtime, HostRuntime) or not runtime.keeps_state:
        missing = "no installed plugin offers it" if runtime is None and name != INTERPRETER else "keeps no state between calls"
        why = runtime if isinstance(runtime, str) and runtime else missing
        raise GenerationError(f"cpu:0: cache='state' needs a host runtime that keeps the cache; {name!r}: {why}. "
                              "pip install neurenix-npu-openvino (OpenVINO's runtime keeps it), or use cache='fixed'")
    weights = None
    if quantize is not None:
        if quantize not in runtime.weight_schemes:
            raise GenerationError(f"cpu:0: host runtime {name} computes no {quantize!r} weights; "
                                  f"use one of {sorted(runtime.weight_schemes)} or cache='fixed'")
        weights = weight_plan(graph, quantize)
    folder = store if store is not None and runtime.stores_state_models else None
    return StatefulStep(graph, spec, runtime, HostOptions(threads=threads, weights=weights), folder)


#: What the summary says of the runtimes _cpu_runtime and _cpu_decode_runtime chose.
_CPU_RUNTIME_REASONS: dict[str, str] = {
    "torch": "nx.generation's runtime for a fixed cache's prompt on cpu:0: it shares the transformers model's weights",
    "numpy": "nx.generation's default on cpu:0 for a dynamic cache: its plans share the weights",
    "openvino decode": ("nx.generation's runtime for a fixed cache's decode steps on cpu:0: one compiled copy of the weights for every cache "
                        "capacity, read by faster matrix-vector kernels than PyTorch's (docs/generation.md)"),
}


def _cpu_decode_runtime(prefill: str | None) -> str | None:
    """The runtime of a fixed cache's decode steps on cpu:0 where _cpu_runtime chose PyTorch's for
    the whole generation: OpenVINO's where the npu plugin offers it (None: PyTorch's decodes too).

    A decode step reads every weight once to multiply it by one row. PyTorch's matrix-vector
    product (MKL) reads a ``(out, in)`` weight at about 17 GB/s on the AMD EPYC build machines,
    where OpenVINO's packed kernels read theirs at about 30: a 135M-parameter model's decode step
    takes 18.6 ms of CPU there against 40.1 (1.2x faster on an Intel Xeon). OpenVINO packs a copy
    of the weights once: the decode steps of every cache capacity lower to the same OpenVINO model
    up to the cache's length, and its runtime compiles that once with the length dynamic; the
    prompt buckets stay on PyTorch's runtime, which computes with the transformers model's own tensors.
    """
    from neurenix_core.graph.compile.host_select import host_runtime_named
    from neurenix_core.graph.ir.host import HostRuntime

    if prefill != "torch":
        return None
    return "openvino" if isinstance(host_runtime_named("openvino").get("openvino"), HostRuntime) else None


def _cpu_runtime(cache: str, quantize: str | None) -> str | None:
    """The runtime a step model runs on at cpu:0 unless ``options`` or NEURENIX_CPU_RUNTIME names
    one (None: measure them, as nx.compile does).

    - dynamic cache: the interpreter, whose per-shape plans share the weights (a host runtime would
      compile, and copy the weights, once per step);
    - fixed cache: PyTorch's where the cuda plugin offers it: its layers are the transformers
      model's own weight tensors for every compiled shape (the model in memory once, as in
      transformers), where ONNX Runtime and OpenVINO each hold a copy per compiled shape, and it
      decodes at their speed (docs/generation.md); the measurement would compile those copies too;
    - quantized weights: measured among the runtimes with kernels for the scheme (ONNX Runtime's
      MatMulNBits for int4), whose copies are the small integer weights.
    """
    from neurenix_core.graph.compile.host_select import INTERPRETER, host_runtime_named, requested_runtime
    from neurenix_core.graph.ir.host import HostRuntime

    if requested_runtime({}) is not None:
        return None  # NEURENIX_CPU_RUNTIME decides
    if cache == "dynamic":
        return INTERPRETER
    if quantize is not None:
        return None
    return "torch" if isinstance(host_runtime_named("torch").get("torch"), HostRuntime) else None


def _as_array(x: Any, name: str, what: str = "integer token ids", *, floats: bool = False) -> np.ndarray:
    if hasattr(x, "detach"):  # a torch tensor
        x = x.detach().cpu().numpy()
    elif hasattr(x, "numpy") and not isinstance(x, np.ndarray):  # a neurenix Tensor
        x = x.numpy()
    arr = np.asarray(x)
    if arr.ndim == 1:
        arr = arr[None]
    numeric = np.issubdtype(arr.dtype, np.integer) or arr.dtype == bool or (floats and np.issubdtype(arr.dtype, np.floating))
    if arr.ndim != 2 or arr.shape[1] == 0 or not numeric:
        raise GenerationError(f"{name} must be {what} of shape (batch, length) or (length,), got {arr.dtype} {arr.shape}")
    return arr


def _prompts(input_ids: Any, attention_mask: Any) -> tuple[np.ndarray, np.ndarray]:
    """Token ids (int64) and the mask (bool) of left-padded prompts; GenerationError otherwise."""
    ids = _as_array(input_ids, "input_ids").astype(np.int64)
    if attention_mask is None:
        return ids, np.ones(ids.shape, bool)
    mask = _as_array(attention_mask, "attention_mask", "ones and zeros", floats=True).astype(bool)
    if mask.shape != ids.shape:
        raise GenerationError(f"attention_mask {mask.shape} does not match input_ids {ids.shape}")
    if not mask[:, -1].all() or (np.diff(mask.astype(np.int8), axis=1) < 0).any():
        raise GenerationError("prompts must be left-padded (zeros of attention_mask before the tokens, as transformers pads "
                              "decoder prompts): tokenizer.padding_side = 'left'")
    return ids, mask


def _with_progress(tokens: Iterator[np.ndarray], total: int) -> Iterator[np.ndarray]:
    from rich.console import Console
    from rich.progress import Progress  # rich is a core dependency; imported only for long generations

    with Progress(console=Console(stderr=True), transient=True) as bar:  # stderr: stdout is the caller's
        task = bar.add_task("generating", total=total)
        for token in tokens:
            yield token
            bar.advance(task)


_PREPARED: weakref.WeakKeyDictionary[Any, dict[tuple[str, str | None, str | None, str | None], CausalLM]] = weakref.WeakKeyDictionary()


def clear() -> None:
    """Forget every prepared model (``nx.generate``'s and the step exports): call it after changing
    the weights of a model already generated with."""
    from neurenix_core.generation.step import clear as clear_exports

    _PREPARED.clear()
    clear_exports()


@strict_kwargs("nx.generate")
def generate(model: Any, input_ids: Any, *, attention_mask: Any = None, max_new_tokens: int | None = None, do_sample: bool = False,
             temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None, seed: int | None = None,
             eos_token_id: int | Sequence[int] | None = None, pad_token_id: int | None = None, device: Any = None,
             cache: str | None = None, precision: str | None = None, quantize: str | None = None, stream: bool = False,
             progress: bool | None = None) -> Any:
    """Generate with ``model`` (a transformers causal LM, or a prepared :class:`CausalLM`).

    The model is prepared once per device, cache kind and precision and kept while it lives;
    the arguments are :meth:`CausalLM.generate`'s.
    """
    if isinstance(model, CausalLM):
        given = {k: v for k, v in (("device", device), ("cache", cache), ("precision", precision), ("quantize", quantize)) if v is not None}
        if given:  # the prepared model has its own; never generate somewhere else than asked
            raise GenerationError(f"{model!r} is already prepared, so {sorted(given)} cannot change here; "
                                  "pass them to CausalLM(...) or give nx.generate the transformers model")
        lm = model
    else:
        from neurenix_core.tensor.placement import default_backend

        key = (str(default_backend(device)[1]), cache, precision, quantize)
        prepared = _PREPARED.setdefault(model, {}) if _weakrefable(model) else {}
        lm = prepared.get(key) or prepared.setdefault(key, CausalLM(model, device, cache=cache, precision=precision, quantize=quantize))
    return lm.generate(input_ids, attention_mask=attention_mask, max_new_tokens=max_new_tokens, do_sample=do_sample,
                       temperature=temperature, top_k=top_k, top_p=top_p, seed=seed, eos_token_id=eos_token_id,
                       pad_token_id=pad_token_id, stream=stream, progress=progress)


def _weakrefable(model: Any) -> bool:
    try:
        weakref.ref(model)
    except TypeError:
        return False
    return True
