"""Errors of ``nx.generate``: every one a :class:`~neurenix_core.errors.NeurenixError`."""

from __future__ import annotations

from neurenix_core.errors import NeurenixError

__all__ = ["CacheCapacityError", "GenerationError", "NotACausalLMError"]


class GenerationError(NeurenixError, ValueError):
    """A generation argument that cannot work (a bad ``max_new_tokens``, right-padded prompts ...)."""


class NotACausalLMError(GenerationError, TypeError):
    """The model is not a decoder-only causal language model from ``transformers``."""


class CacheCapacityError(GenerationError):
    """The key/value cache has no free slot for the next token (give a larger capacity)."""
