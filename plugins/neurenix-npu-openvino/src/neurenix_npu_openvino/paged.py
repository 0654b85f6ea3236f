"""A language model's stateful step on OpenVINO's PagedAttention (the kernel OpenVINO GenAI runs).

The stateful step (``stateful.py``: ``ReadValue -> Gather(beam_idx) -> Concat -> SDPA`` per layer,
``Assign`` of the join) attends through the CPU device's fused key/value-cache attention, which
computes every score of a prompt, the masked half included: a 1,024-token prompt of the 135M model
takes 1.9 s where OpenVINO GenAI takes 1.1. Where the step is a language model's (inputs named
``input_ids``, ``mask`` and ``position_ids``, as ``nx.generation`` exports them, every state read by
an attention layer, all layers of one cache geometry), OpenVINO's own ``paged_attention_transformation``
turns each such attention into ``PagedAttentionExtension``: the keys and values live in blocks of
32 tokens that the host allocates and passes in (written in place by the kernel), the tokens of
every sequence are one flat list, and attention is causal within each sequence, skipping what a
mask would hide. The head then runs on each sequence's last token only (a ``Gather`` before the
last ``MatMul``), as the step graph's ``logits_to_keep=1`` asks.

The host's mask carries which tokens are real (left padding) and must be causal over them: each
call checks that it is exactly that (the mask ``nx.generation`` builds), and refuses any other
mask by name, since PagedAttention cannot apply it. Padding tokens are dropped, not stored.
"""

from __future__ import annotations

import threading
from typing import Any, Final

import numpy as np

from neurenix_core.contract import StatefulModel
from neurenix_core.errors import OperationError
from neurenix_npu_openvino.int64_guard import check_fits_int32

__all__ = ["BLOCK", "OpenVINOPagedModel", "geometry", "paged"]

#: Tokens per cache block (OpenVINO's CPU PagedAttention block size).
BLOCK: Final = 32
_INPUTS: Final = ("input_ids", "mask", "position_ids")
_PAGED_OP: Final = "PagedAttentionExtension"


def geometry(stateful: Any) -> tuple[int, int] | None:
    """(key/value heads, head size) shared by every state of ``stateful``; None where they differ."""
    shapes = {tuple(d.get_length() if d.is_static else -1 for d in op.get_output_partial_shape(0))
              for op in stateful.get_ordered_ops() if op.get_type_name() == "ReadValue"}
    if len(shapes) != 1:
        return None
    shape = shapes.pop()
    return (shape[1], shape[3]) if len(shape) == 4 and shape[1] > 0 and shape[3] > 0 else None


def paged(stateful: Any, states: int) -> tuple[Any, tuple[int, int, int]] | None:
    """``stateful`` on PagedAttention and its cache geometry (layers, heads, head size); None
    where the step is not a language model's step this applies to (the caller keeps ``stateful``)."""
    import openvino as ov
    from openvino._offline_transformations import paged_attention_transformation

    names = [p.get_friendly_name() for p in stateful.get_parameters()]
    geo = geometry(stateful)
    if names[:3] != list(_INPUTS) or geo is None:
        return None
    model = stateful.clone()
    paged_attention_transformation(model)
    layers = sum(op.get_type_name() == _PAGED_OP for op in model.get_ordered_ops())
    if 2 * layers != states or model.get_sinks():
        return None
    for p in model.get_parameters():
        if p.get_friendly_name().startswith(("key_cache.", "value_cache.")):
            p.set_element_type(ov.Type.f32)  # the cache kept as computed, as KV_CACHE_PRECISION=f32 keeps the state's
            p.set_partial_shape(ov.PartialShape([-1, geo[0], BLOCK, geo[1]]))
    mask = next(p for p in model.get_parameters() if p.get_friendly_name() == "mask")
    if mask.output(0).get_target_inputs() or not _head_on_last_tokens(model):
        return None  # the mask read elsewhere than by attention (not fed here), or no head to gather for
    model.remove_parameter(mask)  # PagedAttention computes the causal mask itself
    model.validate_nodes_and_infer_types()
    return model, (layers, *geo)


def _head_on_last_tokens(model: Any) -> bool:
    """Gather each sequence's last token before the head (the first MatMul up from the logits):
    after the transformation every token is a row, and the head would run on all of them. False
    where no head is found (the step then keeps the state model: one row of logits per sequence)."""
    import openvino.opset16 as op

    node = model.get_results()[0].input_value(0).get_node()
    for _ in range(8):  # a Reshape or a Squeeze may stand between the head and its Result
        if node.get_type_name() == "MatMul":
            break
        node = node.input_value(0).get_node()
    else:
        return False
    begins = next(p for p in model.get_parameters() if p.get_friendly_name() == "subsequence_begins")
    ends = op.slice(begins, op.constant(np.array([1], np.int64)), op.constant(np.array([2**31 - 1], np.int64)), op.constant(np.array([1], np.int64)))
    last = op.subtract(ends, op.constant(np.array([1], np.int32)))
    node.input(0).replace_source_output(op.gather(node.input_value(0), last, op.constant(np.int64(0))).output(0))
    return True


def _allowed(slots: np.ndarray, new: np.ndarray) -> np.ndarray:
    """``(B, 1, n, S + n)``: query q sees the real slots up to its own (what the host's mask must say)."""
    seen = np.concatenate([slots, new], axis=1)
    total, n = seen.shape[1], new.shape[1]
    causal = np.arange(total)[None, :] <= (total - n + np.arange(n))[:, None]
    return np.asarray(seen[:, None, None, :] & causal[None, None])


class OpenVINOPagedModel(StatefulModel):
    """One compiled PagedAttention step, its request and the host's cache blocks per layer."""

    def __init__(self, compiled: Any, tensor: Any, geo: tuple[int, int, int], guarded: tuple[int, ...], summary: str) -> None:
        from neurenix_npu_openvino.compiled import _native_infer

        self.compiled, self._tensor, self._guarded = compiled, tensor, guarded
        self.layers, self.heads, self.head_dim = geo
        self._request = compiled.create_infer_request()
        self._infer = _native_infer(self._request)
        self._names = {i.get_any_name() for i in compiled.inputs}
        self._lock = threading.Lock()
        self._caches: list[np.ndarray] = []
        self.threads = int(compiled.get_property("INFERENCE_NUM_THREADS")) or None
        self.summary = summary
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self._slots = np.zeros((0, 0), bool)  # the host's slots so far, per sequence (real or padding)
            self._tables: list[list[int]] = []
            self._lengths = np.zeros(0, np.int64)
            self._free = 0

    def __call__(self, *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
        if len(inputs) != len(_INPUTS):
            raise OperationError(f"the paged step takes {len(_INPUTS)} inputs ({', '.join(_INPUTS)}), got {len(inputs)}")
        for i in self._guarded:
            check_fits_int32(inputs[i], i)
        ids, mask, positions = inputs
        with self._lock:
            new = self._check_mask(ids, mask)
            counts = new.sum(axis=1)
            if not counts.all():
                raise OperationError("the paged step got a sequence without a real token in this call; every row needs one")
            self._reserve(self._lengths + counts)
            feed = self._feed(ids[new], positions[new], counts)  # held to the end: the tensors share these arrays' memory
            for name, value in feed.items():
                self._request.set_tensor(name, value)
            self._infer(self._request, {}, True, False)
            logits = self._request.get_output_tensor(0).data
            rows = logits.reshape(len(counts), logits.shape[-1])  # one row per sequence: its last token's
            self._lengths = self._lengths + counts
            self._slots = np.concatenate([self._slots, new], axis=1)
            return (rows.copy(),)

    def _check_mask(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """The call's real tokens ``(B, n)``, read from the mask's diagonal, after checking the mask
        is causal over the real slots (the only mask PagedAttention computes)."""
        batch, n = ids.shape
        if not self._tables:
            self._slots = np.zeros((batch, 0), bool)
            self._tables = [[] for _ in range(batch)]
            self._lengths = np.zeros(batch, np.int64)
        if batch != len(self._tables) or mask.shape != (batch, 1, n, self._slots.shape[1] + n):
            raise OperationError(f"the paged step holds {len(self._tables)} sequence(s) of {self._slots.shape[1]} slots: a mask "
                                 f"{mask.shape} for ids {ids.shape} does not follow them (reset() starts new sequences)")
        past = self._slots.shape[1]
        new = mask[:, 0, np.arange(n), past + np.arange(n)] == 0
        if not np.array_equal(mask == 0, _allowed(self._slots, new)):
            raise OperationError("cpu:0's openvino runtime runs this step on PagedAttention, which attends causally over each "
                                 "sequence's real tokens; this call's mask says otherwise. Use cache='fixed' for other masks")
        return np.asarray(new)

    def _reserve(self, lengths: np.ndarray) -> None:
        """Blocks for every sequence to hold ``lengths`` tokens; the buffers grow (doubling) as needed."""
        need = sum(max(0, -(-int(length) // BLOCK) - len(table)) for length, table in zip(lengths, self._tables, strict=True))
        have = self._caches[0].shape[0] if self._caches else 0
        if self._free + need > have:
            size = max(2 * have, self._free + need, 8)
            shape = (size, self.heads, BLOCK, self.head_dim)
            grown = []
            for old in self._caches or [None] * (2 * self.layers):
                buf = np.zeros(shape, np.float32)
                if old is not None:
                    buf[: old.shape[0]] = old
                grown.append(buf)
            self._caches = grown
            for layer in range(self.layers):  # the kernel writes into these arrays: set once per size
                for k, kind in enumerate(("key_cache", "value_cache")):
                    self._request.set_tensor(f"{kind}.{layer}", self._tensor(self._caches[2 * layer + k], shared_memory=True))
        for length, table in zip(lengths, self._tables, strict=True):
            while len(table) * BLOCK < length:
                table.append(self._free)
                self._free += 1

    def _feed(self, ids: np.ndarray, positions: np.ndarray, counts: np.ndarray) -> dict[str, Any]:
        blocks = [len(t) for t in self._tables]
        feed = {
            "input_ids": np.ascontiguousarray(ids, np.int64),
            "position_ids": np.ascontiguousarray(positions, np.int64),
            "past_lens": self._lengths.astype(np.int32),
            "subsequence_begins": np.concatenate([[0], np.cumsum(counts)]).astype(np.int32),
            "block_indices": np.array([b for t in self._tables for b in t], np.int32),
            "block_indices_begins": np.concatenate([[0], np.cumsum(blocks)]).astype(np.int32),
            "max_context_len": np.array(int((self._lengths + counts).max()), np.int32),
        }
        return {k: self._tensor(v, shared_memory=True) for k, v in feed.items() if k in self._names}
