"""Op-level graph nodes that move, pick, reduce and multiply whole tensors, as TFLite builtins.

The layer-level writer (``lowering.py``) keeps images NHWC; these handlers work in the core's
layout (an NHWC image is transposed back once, ``_core``) except where the op maps its axes
(reductions, concat, pad), so the numbers equal ``neurenix_core.graph.reference.run.run_graph``.

| core op | TFLite |
|---|---|
| reshape, flatten (other spans), squeeze, unsqueeze | RESHAPE |
| transpose | TRANSPOSE |
| concat | CONCATENATION |
| slice, split | STRIDED_SLICE (explicit begin/end/strides, positive steps) |
| gather | GATHER (int32 constant indices normalised when written, or int32/int64 runtime ones through FLOOR_MOD) |
| gather_nd | GATHER_ND (constant indices normalised when written, runtime ones through FLOOR_MOD) |
| reduce_mean, reduce_sum, reduce_max, reduce_min | MEAN, SUM, REDUCE_MAX, REDUCE_MIN (numbers only: bool max/min are refused) |
| pad (constant mode) | PAD (zero) or PADV2 |
| matmul | FULLY_CONNECTED against a constant 2-D right side (int8: the plan's per-channel weights), else BATCH_MATMUL |
| scaled_dot_product_attention | BATCH_MATMUL, MUL (scale), SELECT_V2 / ADD (mask), SOFTMAX, BATCH_MATMUL in float32 (int8: between DEQUANTIZE and QUANTIZE) |

int8 keeps the input's parameters through the data-movement ops (TFLite requires it), takes the
plan's for reductions, concat and matmul (per-channel weights for a constant right side);
attention computes in float32 in both (its intermediate scores and probabilities have no
parameters in the plan), between DEQUANTIZE and QUANTIZE in an int8 model.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import tflite

from neurenix_core.contract import Node
from neurenix_core.errors import UnsupportedOperationError
from neurenix_edgetpu import tflite_writer as w
from neurenix_edgetpu.lower_values import NHWC_AXIS as _NHWC_AXIS
from neurenix_edgetpu.lower_values import STORED_ORDER as _STORED_ORDER

if TYPE_CHECKING:
    from neurenix_edgetpu.tflite_writer import ModelBuilder

__all__ = ["TensorOps"]

OP: Final = tflite.BuiltinOperator
_OP_NAMES: Final = {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}
_REDUCERS: Final = {"reduce_mean": OP.MEAN, "reduce_sum": OP.SUM, "reduce_max": OP.REDUCE_MAX, "reduce_min": OP.REDUCE_MIN}


def tflite_name(opcode: int) -> str:
    return _OP_NAMES[opcode]


class TensorOps:
    """Handlers mixed into the writer's ``_Lowerer`` (which supplies the attributes below)."""

    __slots__ = ()

    if TYPE_CHECKING:
        m: ModelBuilder
        int8: bool
        plan: Any
        values: dict[str, Any]
        counts: Any
        consts: dict[str, np.ndarray]
        specs: dict[str, Any]

        def _value(self, name: str) -> Any: ...
        def _core(self, name: str) -> int: ...
        def _new(self, value: str, shape: tuple[int, ...], *, quant: Any = None, like: int | None = None) -> int: ...
        def _emit(self, opcode: int, ins: list[int], outs: list[int], **kw: Any) -> None: ...
        def _const_tensor(self, name: str, *, nhwc: bool) -> int: ...
        def _scalar(self, name: str, value: float, like: int | None = None) -> int: ...
        def _shape_const(self, name: str, shape: tuple[int, ...]) -> int: ...
        def _float_only(self, node: Node) -> None: ...
        def _weights(self, node: Node, weight: np.ndarray, in_index: int, axis: int) -> tuple[int, int | None]: ...
        def _set(self, name: str, index: int, nhwc: bool) -> None: ...

    # ------------------------------------------------------------------ helpers
    def _alias(self, node: Node) -> None:
        src = node.inputs[0]
        if src in self.consts and src not in self.values:
            self.consts[node.output] = self.consts[src]
        else:
            self.values[node.output] = self._value(src)

    def _reshape_to(self, node: Node, shape: tuple[int, ...]) -> None:
        x = self._core(node.inputs[0])
        out = self._new(node.output, shape, like=x)
        self._emit(OP.RESHAPE, [x, self._shape_const(f"{node.name}/shape", shape)], [out],
                   options_type=w.OPTIONS.ReshapeOptions, options=w.reshape_options(shape))
        self._set(node.output, out, False)

    def _requantize(self, label: str, index: int, like: int) -> int:
        """``index`` on tensor ``like``'s int8 parameters (one int8 -> int8 QUANTIZE where they differ)."""
        have, want = self.m.quant_of(index), self.m.quant_of(like)
        if have is None or want is None or (np.float32(have.scale[0]) == np.float32(want.scale[0]) and int(have.zero_point[0]) == int(want.zero_point[0])):
            return index
        out = self.m.tensor(label, self.m.shape_of(index), np.int8, quant=want)
        self._emit(OP.QUANTIZE, [index], [out])
        return out

    def _image(self, name: str) -> bool:
        v = self.values.get(name)
        return v is not None and v.nhwc and v.chw_order is None

    # ------------------------------------------------------------------ shape
    def _op_reshape(self, node: Node) -> None:
        self._reshape_to(node, self.specs[node.output].shape)

    def _op_squeeze(self, node: Node) -> None:
        self._reshape_to(node, self.specs[node.output].shape)

    def _op_unsqueeze(self, node: Node) -> None:
        self._reshape_to(node, self.specs[node.output].shape)

    def _op_transpose(self, node: Node) -> None:
        rank = len(self.specs[node.inputs[0]].shape)
        if rank == 0:
            # A 0-d value's only permutation is itself; LiteRT's TRANSPOSE with an empty perm read
            # garbage (permute of a scalar returned 2.4e6 for -8.48).
            self._alias(node)
            return
        perm = node.attrs.get("perm")
        perm = tuple(reversed(range(rank))) if perm is None else tuple(int(p) % rank for p in perm)
        if self._image(node.inputs[0]) and perm == _STORED_ORDER:
            # NCHW -> NHWC is the stored tensor itself: no op.
            self._set(node.output, self.values[node.inputs[0]].index, False)
            return
        x = self._core(node.inputs[0])
        out = self._new(node.output, self.specs[node.output].shape, like=x)
        self._emit(OP.TRANSPOSE, [x, self.m.constant(f"{node.name}/perm", np.array(perm, np.int32))], [out])
        self._set(node.output, out, False)

    def _op_concat(self, node: Node) -> None:
        rank = len(self.specs[node.output].shape)
        axis = int(node.attrs.get("axis", 0)) % rank
        nhwc = all(self._image(n) for n in node.inputs)
        ins = [self.values[n].index for n in node.inputs] if nhwc else [self._core(n) for n in node.inputs]
        stored_axis = _NHWC_AXIS[axis] if nhwc else axis
        shape = list(self.m.shape_of(ins[0]))
        shape[stored_axis] = sum(self.m.shape_of(i)[stored_axis] for i in ins)
        out = self._new(node.output, tuple(shape))
        if self.int8:
            # int8 CONCATENATION needs every input on the output's grid: requantize the others.
            ins = [self._requantize(f"{node.name}/in{k}", i, out) for k, i in enumerate(ins)]
        self._emit(OP.CONCATENATION, ins, [out], options_type=w.OPTIONS.ConcatenationOptions, options=w.concat_options(stored_axis))
        self._set(node.output, out, nhwc)

    def _strided_slice(self, node: Node, bounds: list[tuple[int, int, int]]) -> None:
        if any(step <= 0 for _, _, step in bounds):
            raise UnsupportedOperationError(f"layer {node.name!r} ({node.op}): the writer slices with positive steps only")
        x = self._core(node.inputs[0])
        shape = self.specs[node.inputs[0]].shape
        # An empty axis starts at the axis' end: XNNPACK (LiteRT's default kernels) reads the size
        # 0 of begin == end < n as "to the end" and returns the rest of the axis (x[..., :-8] of 8:
        # 8 columns, not 0); from n, "to the end" is empty too, and LiteRT's own kernels agree.
        bounds = [(n, n, step) if hi <= lo else (lo, hi, step) for n, (lo, hi, step) in zip(shape, bounds)]
        begin, end, strides = (np.array([b[k] for b in bounds], np.int32) for k in range(3))
        out = self._new(node.output, self.specs[node.output].shape, like=x)
        self._emit(OP.STRIDED_SLICE, [x, self.m.constant(f"{node.name}/begin", begin), self.m.constant(f"{node.name}/end", end),
                                      self.m.constant(f"{node.name}/strides", strides)], [out],
                   options_type=w.OPTIONS.StridedSliceOptions, options=w.strided_slice_options())
        self._set(node.output, out, False)

    def _op_slice(self, node: Node) -> None:
        from neurenix_core.contract import attrs_of

        shape = self.specs[node.inputs[0]].shape
        a = attrs_of("slice", node.attrs)
        bounds = [(0, n, 1) for n in shape]
        axes = a["axes"] if a["axes"] is not None else tuple(range(len(a["starts"])))
        steps = a["steps"] if a["steps"] is not None else (1,) * len(axes)
        for ax, st, en, sp in zip(axes, a["starts"], a["ends"], steps):
            n = shape[int(ax) % len(shape)]
            lo, hi, step = slice(int(max(min(st, n), -n - 1)), int(max(min(en, n), -n - 1)), int(sp)).indices(n)
            bounds[int(ax) % len(shape)] = (lo, max(hi, lo), step)
        self._strided_slice(node, bounds)

    def _op_split(self, node: Node) -> None:
        shape = self.specs[node.inputs[0]].shape
        axis = int(node.attrs.get("axis", 0)) % len(shape)
        sizes = [int(s) for s in node.attrs["sizes"]]
        k = int(node.attrs.get("index", 0))
        lo = sum(sizes[:k])
        bounds = [(0, n, 1) for n in shape]
        bounds[axis] = (lo, lo + sizes[k], 1)
        self._strided_slice(node, bounds)

    def _op_pad(self, node: Node) -> None:
        if node.attrs.get("mode", "constant") != "constant":
            raise UnsupportedOperationError(f"layer {node.name!r} (pad mode={node.attrs['mode']!r}): the writer pads with a constant only")
        x = node.inputs[0]
        nhwc = self._image(x)
        index = self.values[x].index if nhwc else self._core(x)
        pads = [(int(lo), int(hi)) for lo, hi in node.attrs["pads"]]
        if nhwc:
            pads = [pads[a] for a in _STORED_ORDER]
        shape = tuple(n + lo + hi for n, (lo, hi) in zip(self.m.shape_of(index), pads))
        # int8 PAD fills with the zero point (real 0) and keeps the input's parameters.
        out = self._new(node.output, shape, like=index)
        ins = [index, self.m.constant(f"{node.name}/paddings", np.array(pads, np.int32))]
        value = float(node.attrs.get("value", 0.0))
        if value == 0.0:
            self._emit(OP.PAD, ins, [out])
        else:
            self._emit(OP.PADV2, [*ins, self._pad_value(node, index, value)], [out])
        self._set(node.output, out, nhwc)

    def _pad_value(self, node: Node, index: int, value: float) -> int:
        t = self.m.tensors[index]
        if t.quant is None:
            return self.m.constant(f"{node.name}/value", np.array([value], t.dtype))
        from neurenix_edgetpu import quantize as qz

        q = qz.quantize(np.array([value]), float(t.quant.scale[0]), int(t.quant.zero_point[0]))
        return self.m.constant(f"{node.name}/value", q, quant=t.quant)

    # ------------------------------------------------------------------ indexing
    def _op_gather(self, node: Node) -> None:
        data, idx = node.inputs
        shape = self.specs[data].shape
        axis = int(node.attrs.get("axis", 0)) % len(shape)
        x = self._core(data)
        want = self.specs[node.output].shape
        scalar = False
        if idx in self.consts and idx not in self.values:
            raw = np.asarray(self.consts[idx]).astype(np.int64)
            scalar = raw.ndim == 0
            # TFLite's GATHER takes no negative indices: normalise them at write time.
            fixed = np.where(raw < 0, raw + shape[axis], raw).astype(np.int32).reshape(raw.shape or (1,))
            indices = self.m.constant(f"{node.name}/indices", fixed)
        else:
            indices = self._core(idx)
            if self.specs[idx].shape == ():
                raise UnsupportedOperationError(f"layer {node.name!r} (gather): a runtime scalar index is not expressible; index with a 1-D value")
            # TFLite's GATHER fails on a negative index at run time; ONNX counts it from the end.
            # Indices in [-n, n) FLOOR_MOD n are the same position (as gather_nd's coordinates).
            t = self.m.tensors[indices]
            wrapped = self.m.tensor(f"{node.name}/indices", self.m.shape_of(indices), t.dtype)
            self._emit(OP.FLOOR_MOD, [indices, self.m.constant(f"{node.name}/size", np.array([shape[axis]], t.dtype))], [wrapped])
            indices = wrapped
        # A scalar index (x[:, 0]) is gathered as shape (1,) and the axis RESHAPEd away.
        picked_shape = tuple(shape[:axis]) + (1,) + tuple(shape[axis + 1:]) if scalar else want
        picked = self._new(f"{node.name}/picked" if scalar else node.output, picked_shape, like=x)
        self._emit(OP.GATHER, [x, indices], [picked], options_type=w.OPTIONS.GatherOptions, options=w.gather_options(axis))
        out = picked
        if scalar:
            out = self._new(node.output, want, like=x)
            self._emit(OP.RESHAPE, [picked, self._shape_const(f"{node.name}/shape", want)], [out],
                       options_type=w.OPTIONS.ReshapeOptions, options=w.reshape_options(want))
        self._set(node.output, out, False)

    def _op_gather_nd(self, node: Node) -> None:
        data, idx = node.inputs
        shape = self.specs[data].shape
        x = self._core(data)
        k = self.specs[idx].shape[-1]
        dims = np.asarray(shape[:k], np.int64)
        if idx in self.consts and idx not in self.values:
            # TFLite's GATHER_ND takes no negative coordinates: normalise them at write time.
            raw = np.asarray(self.consts[idx]).astype(np.int64)
            indices = self.m.constant(f"{node.name}/indices", np.where(raw < 0, raw + dims, raw).astype(np.int32))
        else:
            # Runtime coordinates in [-n, n): FLOOR_MOD by each axis' size counts negatives from the end.
            indices = self._core(idx)
            t = self.m.tensors[indices]
            wrapped = self.m.tensor(f"{node.name}/indices", self.m.shape_of(indices), t.dtype)
            self._emit(OP.FLOOR_MOD, [indices, self.m.constant(f"{node.name}/sizes", dims.astype(t.dtype))], [wrapped])
            indices = wrapped
        out = self._new(node.output, self.specs[node.output].shape, like=x)
        self._emit(OP.GATHER_ND, [x, indices], [out], options_type=w.OPTIONS.GatherNdOptions,
                   options=w.empty_options(tflite.GatherNdOptionsStart, tflite.GatherNdOptionsEnd))
        self._set(node.output, out, False)

    # ------------------------------------------------------------------ reductions
    def _reduce(self, node: Node) -> None:
        x = node.inputs[0]
        if self.specs[x].dtype == "bool":
            # LiteRT's REDUCE_MAX/MIN kernels have no bool instantiation: they fail at invoke.
            raise UnsupportedOperationError(f"layer {node.name!r} ({node.op}): TFLite reduces numbers, not bool values")
        rank = len(self.specs[x].shape)
        raw = node.attrs.get("axes")
        axes = tuple(range(rank)) if raw is None else tuple(sorted(int(a) % rank for a in raw))
        keep = bool(node.attrs.get("keepdims", True))
        nhwc = self._image(x)
        if nhwc and not keep:
            kept = [a for a in _STORED_ORDER if a not in axes]
            nhwc = kept == sorted(kept)  # what is left of NHWC is already in the core's order
        if nhwc:
            index, stored = self.values[x].index, tuple(sorted(_NHWC_AXIS[a] for a in axes))
        else:
            index, stored = self._core(x), axes
        in_shape = self.m.shape_of(index)
        shape = tuple(1 if i in stored else n for i, n in enumerate(in_shape)) if keep else tuple(n for i, n in enumerate(in_shape) if i not in stored)
        opcode = _REDUCERS[node.op]
        # MEAN and SUM requantize to the plan's parameters for this value (a global average pool
        # may have its own observed scale); int8 REDUCE_MAX/MIN pick existing values and keep the input's.
        like = index if opcode in (OP.REDUCE_MAX, OP.REDUCE_MIN) else None
        out = self._new(node.output, shape, like=like)
        self._emit(opcode, [index, self.m.constant(f"{node.name}/axes", np.array(stored, np.int32))], [out],
                   options_type=w.OPTIONS.ReducerOptions, options=w.reducer_options(keep))
        self._set(node.output, out, nhwc and keep)

    _op_reduce_mean = _reduce
    _op_reduce_sum = _reduce
    _op_reduce_max = _reduce
    _op_reduce_min = _reduce

    # ------------------------------------------------------------------ matmul and attention
    def _op_matmul(self, node: Node) -> None:
        a, b = node.inputs
        sa, sb = self.specs[a].shape, self.specs[b].shape
        if len(sa) < 2 or len(sb) < 2:
            raise UnsupportedOperationError(f"layer {node.name!r} (matmul {sa} @ {sb}): the writer multiplies operands of rank >= 2 only")
        x = self._core(a)
        weight_const = b in self.consts and b not in self.values and len(sb) == 2
        if weight_const and (not self.int8 or node.name in self.plan.weights):  # type: ignore[union-attr]
            # A constant right side is a weight: FULLY_CONNECTED (what the Edge TPU maps), no bias.
            # int8: the plan's symmetric per-output-channel weights (axis 1 of the stored (K, N)
            # constant, axis 0 of TFLite's (N, K)), int32 zero bias, per-channel requantization:
            # the core's run_quantized arithmetic for a matmul with a constant right-hand side.
            wi, bi = self._weights(node, np.ascontiguousarray(np.asarray(self.consts[b], np.float32).T), x, 0)
            out = self._new(node.output, self.specs[node.output].shape)
            self._emit(OP.FULLY_CONNECTED, [x, wi, -1 if bi is None else bi], [out], options_type=w.OPTIONS.FullyConnectedOptions,
                       options=w.fc_options(0, len(sa) > 2))
        else:
            # Two activations (attention's q @ k^T, p @ v), or an int8 constant the plan holds no
            # weight parameters for: per-tensor int8 operands with the plan's parameters, int32
            # accumulation, requantized (TFLite BATCH_MATMUL, run_quantized's activation path).
            out = self._new(node.output, self.specs[node.output].shape)
            self._emit(OP.BATCH_MATMUL, [x, self._core(b)], [out], options_type=w.OPTIONS.BatchMatMulOptions,
                       options=w.batch_matmul_options())
        self._set(node.output, out, False)

    def _op_scaled_dot_product_attention(self, node: Node) -> None:
        """fp32: the attention below. int8: the same float32 ops between DEQUANTIZE of the int8
        q, k, v (and float mask) and one QUANTIZE of the result with the plan's parameters: the
        plan has no parameters for the scores and probabilities inside the node, and this is the
        core's integer reference (run_quantized dequantizes, runs the float op, quantizes its
        output). On a Coral device these float ops run in LiteRT on the host, like GELU."""
        q, k, v = (self._dequantized(node, n) for n in node.inputs[:3])
        qs, ks = self.specs[node.inputs[0]].shape, self.specs[node.inputs[1]].shape
        scale = node.attrs.get("scale")
        scale = 1.0 / math.sqrt(qs[-1]) if scale is None else float(scale)
        score_shape = tuple(int(d) for d in np.broadcast_shapes(qs[:-2], ks[:-2])) + (qs[-2], ks[-2])
        scores = self._new(f"{node.name}/scores", score_shape, like=q)
        self._emit_float(OP.BATCH_MATMUL, [q, k], [scores], options_type=w.OPTIONS.BatchMatMulOptions, options=w.batch_matmul_options(adj_y=True))
        scaled = self._new(f"{node.name}/scaled", score_shape, like=q)
        self._emit_float(OP.MUL, [scores, self.m.constant(f"{node.name}/scale", np.array([scale], np.float32))], [scaled],
                         options_type=w.OPTIONS.MulOptions, options=w.mul_options(0))
        if node.attrs.get("is_causal"):
            causal = self.m.constant(f"{node.name}/causal", np.tril(np.ones(score_shape[-2:], np.bool_)))
            scaled = self._masked(node, "causal", scaled, causal, score_shape)
        if len(node.inputs) > 3:
            mask = self._dequantized(node, node.inputs[3])
            if self.m.tensors[mask].dtype == np.bool_:
                scaled = self._masked(node, "mask", scaled, mask, score_shape)  # True keeps (PyTorch)
            else:
                shape = tuple(int(d) for d in np.broadcast_shapes(score_shape, self.m.shape_of(mask)))
                added = self._new(f"{node.name}/masked", shape, like=q)
                self._emit_float(OP.ADD, [scaled, mask], [added], options_type=w.OPTIONS.AddOptions, options=w.add_options(0))
                scaled, score_shape = added, shape
        probs = self._new(f"{node.name}/probs", score_shape, like=q)
        self._emit_float(OP.SOFTMAX, [scaled], [probs], options_type=w.OPTIONS.SoftmaxOptions, options=w.softmax_options(1.0))
        out = self._new(node.output if not self.int8 else f"{node.name}/float", self.specs[node.output].shape, like=q)
        self._emit_float(OP.BATCH_MATMUL, [probs, v], [out], options_type=w.OPTIONS.BatchMatMulOptions, options=w.batch_matmul_options())
        if self.int8:
            quantized = self._new(node.output, self.specs[node.output].shape)
            self._emit(OP.QUANTIZE, [out], [quantized])
            out = quantized
        self._set(node.output, out, False)

    def _dequantized(self, node: Node, name: str) -> int:
        """Value ``name`` in the core's layout as float32 (one DEQUANTIZE for an int8 tensor)."""
        index = self._core(name)
        if self.m.quant_of(index) is None:
            return index
        out = self.m.tensor(f"{node.name}/{name}/float", self.m.shape_of(index), np.float32)
        self._emit(OP.DEQUANTIZE, [index], [out])
        return out

    def _emit_float(self, opcode: int, ins: list[int], outs: list[int], **kw: Any) -> None:
        """A float32 op (version 1) also inside an int8 model."""
        self.m.op(opcode, ins, outs, version=1, **kw)
        self.counts[tflite_name(opcode)] += 1

    def _masked(self, node: Node, label: str, scores: int, mask: int, shape: tuple[int, ...]) -> int:
        """SELECT_V2(mask, scores, -inf): masked positions get zero weight in the SOFTMAX."""
        out_shape = tuple(int(d) for d in np.broadcast_shapes(shape, self.m.shape_of(mask)))
        out = self._new(f"{node.name}/{label}ed", out_shape, like=scores)
        ninf = self.m.constant(f"{node.name}/{label}_fill", np.array([-np.inf], np.float32))
        self._emit_float(OP.SELECT_V2, [mask, scores, ninf], [out])
        return out
