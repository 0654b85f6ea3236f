"""Text generation for causal LMs imported from ``transformers``, with a key/value cache on the device.

``nx.generate(hf_model, input_ids, ...)`` or, to prepare once and generate many times,
``lm = nx.generation.CausalLM(hf_model, device="npu:0")`` then ``lm.generate(...)``. See
docs/generation.md. PyTorch and transformers are imported when a model is prepared, not here.
"""

from __future__ import annotations

from neurenix_core.generation.errors import CacheCapacityError, GenerationError, NotACausalLMError
from neurenix_core.generation.generate import CACHE_KINDS, CausalLM, QuantizationCheck, clear, generate
from neurenix_core.generation.sampling import Sampler

__all__ = ["CACHE_KINDS", "CacheCapacityError", "CausalLM", "GenerationError", "NotACausalLMError", "QuantizationCheck", "Sampler", "clear", "generate"]
