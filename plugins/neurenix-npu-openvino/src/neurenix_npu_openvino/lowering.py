"""The core's model graph (neurenix_core.graph.ir.Graph) -> an ``openvino.Model`` built with opset16.

No PyTorch and no ONNX in between: each node becomes a few opset nodes, weights become
constants, and a QuantizationPlan becomes FakeQuantize nodes on the inputs and weights of the
values the plan lists and on the weights of the compute layers (quantize.py). This module is the driver: the per-op handlers live in one
module per family (lower_math, lower_nn, lower_shape, lower_attention), and ``HANDLERS`` is
their union, so the manifest's ``graph_ops`` is exactly ``LOWERED_OPS`` (a test checks it).

Shapes are static (the core compiles per input shape), so the layer-level handlers check their
input shapes and a mismatch names the layer instead of surfacing as an OpenVINO validation
error. Every value keeps the dtype the opset infers for it: floats are f32 on the device (the
plugin declares float32 only), integers and bools keep their element type.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import numpy as np

from neurenix_core.contract import Graph, Node, QuantizationPlan, ValueSpec, attrs_of, is_weight_plan, node_spec, weight_codes
from neurenix_core.errors import ShapeError, UnsupportedOperationError
from neurenix_npu_openvino.lower_attention import HANDLERS as _ATTENTION
from neurenix_npu_openvino.lower_math import HANDLERS as _MATH
from neurenix_npu_openvino.lower_nn import HANDLERS as _NN
from neurenix_npu_openvino.lower_shape import HANDLERS as _SHAPE
from neurenix_npu_openvino.lower_types import Handler, output
from neurenix_npu_openvino.quantize import QUANTIZED_OPS, activation_bounds, constant_weight_bounds, fake_quantize, weight_bounds
from neurenix_npu_openvino.sibling_linears import joined_params, sibling_groups

__all__ = ["HANDLERS", "LOWERED_OPS", "Lowering", "lower_graph"]

HANDLERS: Final[Mapping[str, Handler]] = {**_MATH, **_NN, **_SHAPE, **_ATTENTION}
LOWERED_OPS: Final = frozenset(HANDLERS)

#: Element types of the values a lowered graph carries (floats compute in f32 on the device).
_COMPUTE_DTYPES: Final = {"float16": "float32", "bfloat16": "float32", "float64": "float32"}
#: Graph input dtypes a Parameter is made for (ov.Type maps these NumPy dtypes).
_PARAMETER_DTYPES: Final = ("float32", "float16", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                            "uint64", "bool")


def lower_graph(graph: Graph, plan: QuantizationPlan | None = None, *, device: str = "npu:0") -> Any:
    """Build the OpenVINO model of ``graph``; ``plan`` adds FakeQuantize nodes (int8/int16)."""
    return Lowering(graph, plan, device).build()

#: Constants from this size on are built over the graph's array (``shared_memory``), smaller ones
#: copied (a copy of a few bytes costs less than keeping the array alive).
_SHARED_MIN_BYTES: Final = 64 * 1024


class _Alias:
    """An ``__array_interface__`` over another array's memory that keeps that array alive."""

    def __init__(self, array: np.ndarray) -> None:
        self.owner = array
        self.__array_interface__ = {**array.__array_interface__, "data": (array.ctypes.data, False)}


def _writable_alias(array: np.ndarray) -> np.ndarray:
    """``array`` itself where it is writable; else a writable view of the same memory that holds
    a reference to it. OpenVINO shares only memory that NumPy calls writable, and a graph's weights
    are read-only views (of the model they were imported from); OpenVINO never writes a Constant."""
    return array if array.flags.writeable else np.asarray(_Alias(array))


class Lowering:
    """One lowering: the values built so far (by name), their specs, and the helpers handlers use."""

    def __init__(self, graph: Graph, plan: QuantizationPlan | None, device: str) -> None:
        import openvino as ov
        import openvino.opset16 as opset

        self.ov = ov
        self.op = opset
        self.graph = graph
        self.plan = plan
        self.device = device
        self.values: dict[str, Any] = {}
        self.specs: dict[str, ValueSpec] = {}
        self.producers: dict[str, Node] = {n.output: n for n in graph.nodes}
        # Weight-planned linear layers that read one value: one FullyConnected each group.
        self.siblings = sibling_groups(graph, plan)

    # ------------------------------------------------------------------ driver
    def build(self) -> Any:
        params = []
        for spec in self.graph.inputs:
            if spec.dtype not in _PARAMETER_DTYPES:
                # OpenVINO's Python binding has no element type for it (bfloat16, float8, int4 ...):
                # refused by name here rather than as a RuntimeError from ov.Type.
                raise UnsupportedOperationError(f"graph input {spec.name!r} is {spec.dtype}: neurenix-npu-openvino takes "
                                                f"{', '.join(_PARAMETER_DTYPES)} inputs")
            param = self.op.parameter(list(spec.shape), self.ov.Type(np.dtype(spec.dtype)), name=spec.name)
            param.output(0).set_names({spec.name})
            params.append(param)
            self.values[spec.name] = self._quantize_value(spec.name, param.output(0))
            self.specs[spec.name] = ValueSpec(tuple(spec.shape), spec.dtype)
        for node in self.graph.nodes:
            try:
                self._lower(node)
            except UnsupportedOperationError as exc:
                exc.node = exc.node or node.name  # the core places this node on cpu:0 and compiles the rest
                raise
        results = []
        for name in self.graph.outputs:
            result = self.op.result(self.values[name])
            result.output(0).set_names({name})
            results.append(result)
        return self.ov.Model(results, params, "neurenix")

    def _lower(self, node: Node) -> None:
        handler = HANDLERS.get(node.op)
        if handler is None:
            raise UnsupportedOperationError(
                f"layer {node.name!r} ({node.op}) has no OpenVINO lowering in neurenix-npu-openvino; "
                f"lowered ops: {', '.join(sorted(HANDLERS))}. Run the model eagerly or on device='cpu'."
            )
        missing = [n for n in node.inputs if n not in self.values]
        if missing:
            raise UnsupportedOperationError(f"layer {node.name!r} reads {missing}, which no earlier node or graph input produces")
        if self._empty(node):
            # An empty result holds nothing but its shape and dtype, both known here. OpenVINO's CPU
            # plugin refuses or traps on ops over empty tensors (MatMul, Pad; Gather divides by the
            # size 0: SIGFPE), so the value is an empty constant and no kernel runs.
            spec = self.spec_of(node)
            self.values[node.output] = self.const(np.zeros(spec.shape), self.ov_type(spec.dtype).to_dtype())
            return
        group = self.siblings.get(node.name)
        if group is not None:
            if node.output not in self.values:  # the group's first layer lowers every member
                self._lower_siblings(group)
            return
        out = output(handler(self, node, attrs_of(node.op, node.attrs), [self.values[n] for n in node.inputs]))
        self.values[node.output] = self._quantize_value(node.output, self.to_dtype(out, self.spec_of(node).dtype))

    def _lower_siblings(self, group: tuple[Node, ...]) -> None:
        """Linear layers that read one value, as one compressed-weight FullyConnected over their
        stacked weights and a split by output channel (sibling_linears.py)."""
        first = group[0]
        x = self.values[first.inputs[0]]
        width = int(np.shape(first.params["weight"])[1])
        self.expect(first, x, None, -1, width, f"a last dimension of {width} (in_features)")
        assert self.plan is not None
        weight, q = joined_params(group, self.plan.weights)
        out = self.op.matmul(x, self._compressed_weight(weight, q), False, True)
        sizes = [int(np.shape(n.params["weight"])[0]) for n in group]
        biases = [self.bias(n) for n in group]
        if any(b is not None for b in biases):
            out = self.op.add(out, self.const(np.concatenate([np.zeros(k, np.float32) if b is None else b for b, k in zip(biases, sizes)])))
        parts = self.op.variadic_split(out, self.const(np.asarray(-1, np.int64), np.int64), self.axes(sizes))
        for k, node in enumerate(group):
            self.values[node.output] = self._quantize_value(node.output, self.to_dtype(parts.output(k), self.spec_of(node).dtype))

    def _empty(self, node: Node) -> bool:
        """Whether the node's result has no elements. Inputs that do not fit the op are left to its
        handler, whose ShapeError names what it expects (the opset's rule says less)."""
        try:
            return 0 in self.spec_of(node).shape
        except ShapeError:
            return False

    def spec_of(self, node: Node) -> ValueSpec:
        """The node's output shape and dtype from the opset's rules (ShapeError names the node)."""
        spec = self.specs.get(node.output)
        if spec is None:
            inputs = [self.specs[i] for i in node.inputs]
            if node.op == "multihead_attention" and len(inputs) == 1:
                inputs *= 3  # the first release's self-attention nodes read one value for q, k and v
            spec = node_spec(node, inputs)
            self.specs[node.output] = spec
        return spec

    def _quantize_value(self, name: str, value: Any) -> Any:
        """``value`` through FakeQuantize when the plan lists it. The plan holds every float
        activation (the core's reference fake-quantizes each one), so the inputs of every
        conv/matmul/linear are quantized and OpenVINO's low-precision pass runs them in int8."""
        plan = self.plan
        if plan is None or plan.dynamic or name not in plan.activations:
            return value
        low, high, levels = activation_bounds(plan.activations[name])
        return output(fake_quantize(self.op, value, low, high, levels))

    def _is_constant(self, name: str) -> bool:
        node = self.producers.get(name)
        return node is not None and node.op == "constant"

    # ------------------------------------------------------------------ helpers for handlers
    def const(self, array: Any, dtype: Any = np.float32) -> Any:
        if isinstance(array, np.ndarray) and array.dtype == dtype and array.flags.c_contiguous and array.nbytes >= _SHARED_MIN_BYTES:
            # The graph's weight itself (a view of the caller's model, perhaps): OpenVINO keeps a
            # reference instead of a copy in the ov.Model, and every shape compiled from the
            # graph starts from the same memory.
            return self.op.constant(_writable_alias(array), shared_memory=True)
        # np.array, not np.ascontiguousarray: the latter turns a 0-d scalar into shape (1,).
        return self.op.constant(np.array(array, dtype=dtype, order="C"))

    def axes(self, values: Any) -> Any:
        return self.const(np.asarray(values, np.int64).reshape(-1), np.int64)

    def shape(self, value: Any) -> tuple[int, ...]:
        return tuple(int(d) for d in output(value).get_partial_shape().to_shape())

    def ov_type(self, dtype: str) -> Any:
        return self.ov.Type(np.dtype(_COMPUTE_DTYPES.get(dtype, dtype)))

    def to_dtype(self, value: Any, dtype: str) -> Any:
        """``value`` converted to the element type the opset gives ``dtype`` (no-op when equal)."""
        want = self.ov_type(dtype)
        if output(value).get_element_type() == want:
            return output(value)
        return output(self.op.convert(value, want))

    def scalar_like(self, value: Any, number: float) -> Any:
        """A scalar constant of ``value``'s element type."""
        return self.op.constant(np.asarray(number, output(value).get_element_type().to_dtype()))

    def weight(self, node: Node, key: str = "weight") -> Any:
        """The node's weight as a constant, quantized when the plan covers the node."""
        w = np.asarray(node.params[key], np.float32)
        plan = self.plan
        if plan is None or key != "weight":
            return self.const(w)
        q = plan.weights.get(node.name)
        if plan.dynamic or is_weight_plan(plan):
            # Compressed integer weights for the nodes the plan names: linear layers, and a weight
            # plan's embedding tables (int8 per row).
            return self.const(w) if q is None else self._compressed_weight(w, q)
        if node.op not in QUANTIZED_OPS:
            return self.const(w)
        low, high, levels = weight_bounds(q, w.ndim) if q is not None else constant_weight_bounds(w, 0)
        return output(fake_quantize(self.op, self.const(w), low, high, levels))

    def constant_operand(self, node: Node, index: int, value: Any, channel_axis: int | None) -> Any:
        """A matmul/gemm operand that is a weight constant, per-channel quantized under a static plan
        (the plan holds weights of linear/conv layers only; constants feeding matmul are weights too)."""
        plan = self.plan
        name = node.inputs[index]
        if plan is None or plan.dynamic or is_weight_plan(plan) or not self._is_constant(name):
            return value
        w = np.asarray(self.producers[name].params["value"])
        if w.dtype.kind != "f" or w.ndim == 0:
            return value
        low, high, levels = constant_weight_bounds(w.astype(np.float32), channel_axis)
        return output(fake_quantize(self.op, value, low, high, levels))

    def _compressed_weight(self, w: np.ndarray, q: Any) -> Any:
        # Integer weights + Convert + Multiply(scale): the pattern OpenVINO executes as a
        # compressed-weight FullyConnected (int8 per channel; int4 per group, whose codes are
        # (out, groups, group) i4 constants reshaped back to (out, in) after the scale).
        if np.asarray(q.scale).ndim == 2 or q.bits == 4:
            return self._grouped_weight(w, q)
        scale = np.asarray(q.scale, np.float32).reshape((-1,) + (1,) * (w.ndim - 1))
        ints = np.clip(np.rint(w / scale), q.qmin, q.qmax).astype(q.dtype)
        converted = self.op.convert(self.op.constant(ints), self.ov.Type.f32)
        return output(self.op.multiply(converted, self.const(scale)))

    def _grouped_weight(self, w: np.ndarray, q: Any) -> Any:
        scale = np.asarray(q.scale, np.float32)
        scale = scale.reshape(scale.shape[0], -1, 1)  # (out, groups, 1); per channel: one group
        codes = weight_codes(w, q).reshape(w.shape[0], scale.shape[1], -1)
        kind = self.ov.Type.i4 if q.bits == 4 else self.ov.Type.i8
        converted = self.op.convert(self.op.constant(codes, dtype=kind), self.ov.Type.f32)
        scaled = self.op.multiply(converted, self.const(scale))
        return output(self.op.reshape(scaled, self.axes(w.shape), False))

    def bias(self, node: Node) -> np.ndarray | None:
        b = node.params.get("bias")
        return None if b is None else np.asarray(b, np.float32)

    def expect_rank(self, node: Node, value: Any, rank: int, what: str) -> tuple[int, ...]:
        shape = self.shape(value)
        if len(shape) != rank:
            self.shape_error(node, shape, what)
        return shape

    def expect(self, node: Node, value: Any, rank: int | None, axis: int, size: int, what: str) -> tuple[int, ...]:
        shape = self.shape(value)
        if (rank is not None and len(shape) != rank) or not shape or shape[axis] != size:
            self.shape_error(node, shape, what)
        return shape

    def shape_error(self, node: Node, shape: tuple[int, ...], what: str) -> None:
        inputs = ", ".join(f"{s.name}{tuple(s.shape)}" for s in self.graph.inputs)
        raise ShapeError(
            f"{self.device}: layer {node.name!r} ({node.op}) expects {what} but receives shape {shape} "
            f"(model inputs: {inputs}); pass inputs of the shape the model was built for"
        )
