"""Choosing the next token from the last position's logits, in NumPy on the host.

Greedy takes the arg-max (the first on ties, as ``torch.argmax``). Sampling applies what
``transformers`` applies, in its order: temperature, then top-k, then top-p (the smallest set of
tokens whose probability reaches ``top_p``, the most likely always kept), and draws from the
softmax with a seeded ``numpy.random.Generator``: the same seed gives the same tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from neurenix_core.generation.errors import GenerationError

__all__ = ["Sampler"]


@dataclass(frozen=True, slots=True)
class Sampler:
    """Greedy (``do_sample=False``) or sampling with temperature, top-k and top-p."""

    do_sample: bool = False
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self) -> None:
        if not self.temperature > 0:
            raise GenerationError(f"temperature={self.temperature!r}: it must be > 0 (use do_sample=False for greedy decoding)")
        if self.top_k is not None and (not isinstance(self.top_k, (int, np.integer)) or self.top_k < 1):
            raise GenerationError(f"top_k={self.top_k!r}: it must be an integer >= 1 or None")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise GenerationError(f"top_p={self.top_p!r}: it must be in (0, 1] or None")

    def __call__(self, logits: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One token id per row of ``logits (B, vocab)``."""
        if not self.do_sample:
            return np.argmax(logits, axis=-1).astype(np.int64)
        scores = logits.astype(np.float64) / self.temperature
        if self.top_k is not None:
            scores = _top_k(scores, int(self.top_k))
        if self.top_p is not None and self.top_p < 1:
            scores = _top_p(scores, float(self.top_p))
        probs = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probs /= probs.sum(axis=-1, keepdims=True)
        # Inverse CDF with one uniform draw per row: reproducible for a seed, whatever the batch.
        draws = rng.random(len(probs))
        cdf = np.cumsum(probs, axis=-1)
        picks = (cdf < draws[:, None] * cdf[:, -1:]).sum(axis=-1)
        return np.minimum(picks, probs.shape[-1] - 1).astype(np.int64)


def _top_k(scores: np.ndarray, k: int) -> np.ndarray:
    if k >= scores.shape[-1]:
        return scores
    kth = np.partition(scores, -k, axis=-1)[:, -k][:, None]
    return np.where(scores < kth, -np.inf, scores)


def _top_p(scores: np.ndarray, p: float) -> np.ndarray:
    order = np.argsort(-scores, axis=-1, kind="stable")
    ranked = np.take_along_axis(scores, order, axis=-1)
    probs = np.exp(ranked - ranked[:, :1])
    probs /= probs.sum(axis=-1, keepdims=True)
    # keep a token while the probability before it is below p (so the most likely is always kept)
    keep_ranked = (np.cumsum(probs, axis=-1) - probs) < p
    keep = np.zeros_like(keep_ranked)
    np.put_along_axis(keep, order, keep_ranked, axis=-1)
    return np.where(keep, scores, -np.inf)
