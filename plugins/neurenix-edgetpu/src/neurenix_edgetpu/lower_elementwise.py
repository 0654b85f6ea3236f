"""Elementwise nodes and activations of the op-level graph, as TFLite builtins.

| core op | TFLite |
|---|---|
| add / sub / mul (+ a following ReLU fused) | ADD / SUB / MUL |
| maximum / minimum | MAXIMUM / MINIMUM (int8: operands on the output's grid) |
| clip | RELU, RELU6, RELU_N1_TO_1, else MAXIMUM/MINIMUM with a scalar |
| sigmoid / tanh | LOGISTIC / TANH (int8 output parameters fixed by TFLite) |
| hardswish / gelu / rsqrt | HARD_SWISH / GELU / RSQRT |
| silu | LOGISTIC, MUL |
| hardsigmoid (alpha 1/6) | ADD with fused RELU6, MUL |

Images stay NHWC: a binary op keeps that layout when its other operand is an image or a
constant (laid out NHWC at write time); anything else is brought back to the core's layout.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import numpy as np
import tflite

from neurenix_core.contract import Node
from neurenix_core.errors import UnsupportedOperationError
from neurenix_edgetpu import tflite_writer as w
from neurenix_edgetpu.lower_values import Value as _Value
from neurenix_edgetpu.tflite_writer import TensorQuant

if TYPE_CHECKING:
    from neurenix_edgetpu.tflite_writer import ModelBuilder

__all__ = ["ElementwiseOps"]

OP: Final = tflite.BuiltinOperator
_BOOL_BINARY: Final = {OP.MUL: OP.LOGICAL_AND, OP.MINIMUM: OP.LOGICAL_AND, OP.ADD: OP.LOGICAL_OR, OP.MAXIMUM: OP.LOGICAL_OR}
ACT: Final = tflite.ActivationFunctionType
#: TFLite's fixed int8 output parameters of LOGISTIC and TANH (the kernels refuse others).
_LOGISTIC_Q: Final = (1.0 / 256.0, -128)
_TANH_Q: Final = (1.0 / 128.0, 0)


class ElementwiseOps:
    """Handlers mixed into the writer's ``_Lowerer`` (which supplies the attributes below)."""

    __slots__ = ()

    if TYPE_CHECKING:
        m: ModelBuilder
        int8: bool
        values: dict[str, _Value]
        consts: dict[str, np.ndarray]

        def _get(self, node: Node, i: int = 0) -> _Value: ...
        def _core(self, name: str) -> int: ...
        def _new(self, value: str, shape: tuple[int, ...], *, quant: TensorQuant | None = None, like: int | None = None) -> int: ...
        def _emit(self, opcode: int, ins: list[int], outs: list[int], **kw: Any) -> None: ...
        def _const_tensor(self, name: str, *, nhwc: bool) -> int: ...
        def _scalar(self, name: str, value: float, like: int | None = None) -> int: ...
        def _scalar_like(self, name: str, value: float, like: int) -> int: ...
        def _requantize(self, label: str, index: int, like: int) -> int: ...
        def _follow_plan(self, name: str, index: int) -> int: ...
        def _act(self, name: str) -> TensorQuant: ...
        def _out_name(self, node: Node) -> str: ...
        def _fused_act(self, node: Node) -> int: ...

    def _binary(self, node: Node, opcode: int, options_type: int = 0, options: Any = None, *, same_scale: bool = False) -> None:
        """Elementwise with broadcasting. Images stay NHWC when every other operand is an image or
        a constant (the constant is laid out NHWC at write time); otherwise all go to the core's layout."""
        names = node.inputs
        vals = [self.values.get(n) for n in names]
        images = [v is not None and v.nhwc and v.chw_order is None for v in vals]
        consts = [v is None and n in self.consts and np.ndim(self.consts[n]) <= 4 for n, v in zip(names, vals)]
        nhwc = any(images) and all(i or c for i, c in zip(images, consts))
        if nhwc:
            ins = [v.index if img else self._const_tensor(n, nhwc=True) for n, v, img in zip(names, vals, images)]  # type: ignore[union-attr]
        else:
            ins = [self._core(n) for n in names]
        shape = tuple(int(d) for d in np.broadcast_shapes(*(self.m.shape_of(i) for i in ins)))
        out_name = self._out_name(node)
        out = self._new(out_name, shape)
        if not self.int8:
            ins = [self._cast_to(f"{node.name}/in{k}", i, out) for k, i in enumerate(ins)]
        if same_scale and self.int8:
            # int8 MAXIMUM/MINIMUM compare raw integers: every operand on the output's grid.
            ins = [self._requantize(f"{node.name}/in{k}", i, out) for k, i in enumerate(ins)]
        if np.dtype(self.m.tensors[out].dtype) == np.bool_ and opcode in _BOOL_BINARY:
            # TFLite's MUL, ADD, MAXIMUM and MINIMUM refuse bool at invoke ("Mul only supports
            # FLOAT32 ..."); on bools mul/minimum are "and", add/maximum "or" (isfinite: a mask product).
            opcode, options_type, options = _BOOL_BINARY[opcode], 0, None
        self._emit(opcode, ins, [out], options_type=options_type, options=None if options is None else options(self._fused_act(node)))
        self.values[out_name] = _Value(out, nhwc)

    def _cast_to(self, label: str, index: int, like: int) -> int:
        """Tensor ``index`` in tensor ``like``'s type: a CAST where they differ. The core's
        arithmetic promotes a bool or integer operand to the other's float type as PyTorch does
        (GLM-5 Next's ``x * mask``); TFLite's MUL, ADD ... take one type and refused the model at
        prepare (``input1->type != input2->type``)."""
        want = np.dtype(self.m.tensors[like].dtype)
        if np.dtype(self.m.tensors[index].dtype) == want:
            return index
        cast = self.m.tensor(f"{label}/cast", self.m.shape_of(index), want)
        self._emit(OP.CAST, [index], [cast])
        return cast

    def _op_maximum(self, node: Node) -> None:
        self._binary(node, OP.MAXIMUM, same_scale=True)

    def _op_minimum(self, node: Node) -> None:
        self._binary(node, OP.MINIMUM, same_scale=True)

    def _op_clip(self, node: Node) -> None:
        lo, hi = node.attrs.get("min"), node.attrs.get("max")
        # The fused-activation ranges TFLite has a builtin (and the Edge TPU an op) for.
        builtin = {(0.0, None): OP.RELU, (0.0, 6.0): OP.RELU6, (-1.0, 1.0): OP.RELU_N1_TO_1}.get(
            (None if lo is None else float(lo), None if hi is None else float(hi)))
        if builtin is not None:
            self._unary(node, builtin)
            return
        v = self._get(node)
        index, shape = v.index, self.m.shape_of(v.index)
        bounds = [(b, op, tag) for b, op, tag in ((lo, OP.MAXIMUM, "max"), (hi, OP.MINIMUM, "min")) if b is not None]
        for k, (bound, opcode, tag) in enumerate(bounds):
            # MAXIMUM/MINIMUM with a scalar on the input's own grid (int8: the same parameters in and out).
            out = self._new(node.output if k == len(bounds) - 1 and not self.int8 else f"{node.name}/{tag}", shape, like=index)
            self._emit(opcode, [index, self._scalar_like(f"{node.name}/{tag}_bound", float(bound), index)], [out])
            index = out
        self.values[node.output] = _Value(self._follow_plan(node.output, index), v.nhwc)

    def _op_add(self, node: Node) -> None:
        self._binary(node, OP.ADD, w.OPTIONS.AddOptions, w.add_options)

    def _op_sub(self, node: Node) -> None:
        self._binary(node, OP.SUB, w.OPTIONS.SubOptions, w.sub_options)

    def _op_mul(self, node: Node) -> None:
        self._binary(node, OP.MUL, w.OPTIONS.MulOptions, w.mul_options)

    def _unary(self, node: Node, opcode: int, *, quant: tuple[float, int] | None = None, options_type: int = 0,
               options: Any = None) -> _Value:
        """One-input elementwise op in the input's layout. ``quant``: the fixed int8 output
        parameters TFLite requires for this op (else the plan's)."""
        v = self._get(node)
        fixed = TensorQuant.per_tensor(*quant) if self.int8 and quant is not None else None
        out = self._new(node.output, self.m.shape_of(v.index), quant=fixed)
        self._emit(opcode, [v.index], [out], options_type=options_type, options=options)
        self.values[node.output] = _Value(out, v.nhwc)
        return self.values[node.output]

    def _op_sigmoid(self, node: Node) -> None:
        self._unary(node, OP.LOGISTIC, quant=_LOGISTIC_Q)

    def _op_tanh(self, node: Node) -> None:
        self._unary(node, OP.TANH, quant=_TANH_Q)

    def _op_hardswish(self, node: Node) -> None:
        self._unary(node, OP.HARD_SWISH)

    def _op_rsqrt(self, node: Node) -> None:
        self._unary(node, OP.RSQRT)

    def _op_gelu(self, node: Node) -> None:
        approx = node.attrs.get("approximate", "none") == "tanh"
        self._unary(node, OP.GELU, options_type=w.OPTIONS.GeluOptions, options=w.gelu_options(approx))

    def _op_silu(self, node: Node) -> None:
        # x * sigmoid(x): LOGISTIC then MUL (the Edge TPU maps both; there is no SILU builtin).
        v = self._get(node)
        shape = self.m.shape_of(v.index)
        sig = self._new(f"{node.name}/sigmoid", shape, quant=TensorQuant.per_tensor(*_LOGISTIC_Q) if self.int8 else None,
                        like=None if self.int8 else v.index)
        self._emit(OP.LOGISTIC, [v.index], [sig])
        out = self._new(node.output, shape)
        self._emit(OP.MUL, [v.index, sig], [out], options_type=w.OPTIONS.MulOptions, options=w.mul_options(ACT.NONE))
        self.values[node.output] = _Value(out, v.nhwc)

    def _op_hardsigmoid(self, node: Node) -> None:
        # clip(alpha x + beta, 0, 1) = relu6(x + beta/alpha) * (alpha) when alpha * 6 == 1 (PyTorch's
        # and the ONNX importers' 1/6, 0.5): ADD with fused RELU6, then MUL. Both are Edge TPU ops.
        alpha, beta = float(node.attrs.get("alpha", 1.0 / 6.0)), float(node.attrs.get("beta", 0.5))
        if not np.isclose(alpha * 6.0, 1.0):
            raise UnsupportedOperationError(f"layer {node.name!r} (hardsigmoid alpha={alpha}): the writer lowers alpha=1/6 only")
        v = self._get(node)
        shape = self.m.shape_of(v.index)
        shifted_q = None
        if self.int8:
            # relu6(x + 3) spans [0, 6]: six times the output's range with the output's zero point,
            # so the MUL by 1/6 maps it onto the plan's output grid.
            out_q = self._act(node.output)
            shifted_q = TensorQuant.per_tensor(float(out_q.scale[0]) * 6.0, int(out_q.zero_point[0]))
        shifted = self._new(f"{node.name}/relu6", shape, quant=shifted_q, like=None if self.int8 else v.index)
        self._emit(OP.ADD, [v.index, self._scalar(f"{node.name}/shift", beta / alpha, v.index)], [shifted],
                   options_type=w.OPTIONS.AddOptions, options=w.add_options(ACT.RELU6))
        out = self._new(node.output, shape)
        self._emit(OP.MUL, [shifted, self._scalar(f"{node.name}/alpha", alpha, v.index)], [out],
                   options_type=w.OPTIONS.MulOptions, options=w.mul_options(ACT.NONE))
        self.values[node.output] = _Value(out, v.nhwc)
