"""PyTorch -> Graph through ``torch.export`` (any ``forward``; PyTorch is imported here only).

``import_module(module, args, kwargs)`` exports the module with the example inputs, runs
``run_decompositions({})`` (functional ATen ops, PyTorch's composites such as ``linear``,
``layer_norm`` and ``scaled_dot_product_attention`` kept), and maps each ATen op to the opset
nearly one to one. Parameters, buffers and lifted constants become NumPy constants; any op whose
inputs are all constants (``arange``, mask arithmetic on buffers, weight views) is evaluated by
PyTorch at import time.

Shapes: by default axis 0 of every input (and axis 1 of rank-2 integer inputs: token ids) is
exported as a dynamic dimension (``torch.export.Dim.AUTO``), whatever its example size: an axis
of size 1, which torch.export would fix, is traced at size 2 (``torch_axes``). Every size
PyTorch computes from those dimensions (``view`` and ``expand`` targets, slice ends, ``arange``
lengths) is imported as a :class:`~neurenix_core.graph.ir.symbolic.SymDim` over the input
dimensions, resolved per input shape by ``Graph.with_input_shapes``. ``dynamic_shapes=``
(torch.export's own argument: ``Dim``, ``Dim.AUTO``, ``Dim.DYNAMIC``) overrides the default;
``static=True`` gives the example's shapes only. Each axis meant dynamic that comes out fixed
(the model's code fixes it, or a size cannot be kept symbolic and the model is imported again
with static shapes) is named in one :class:`NeurenixWarning` with the reason (a
``FallbackError`` under ``nx.fallback_policy('error')``).

Inputs are the example positional inputs in order, then the keyword inputs in the order given;
outputs are the model's outputs flattened by ``torch.utils._pytree`` order: tuple/list items in
order, dict and ``ModelOutput`` entries in insertion order (``last_hidden_state`` before
``pooler_output``).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from typing import Any

import numpy as np

from neurenix_core.errors import UnsupportedOperationError
from neurenix_core.graph.importers.builder import Const, GraphBuilder, Value
from neurenix_core.graph.importers.torch_axes import AxisPlan, default_spec, differs_at_example, fixed_axes, plan_axes, warn_fixed
from neurenix_core.graph.importers.torch_backward import HANDLERS as _GRADIENT_HANDLERS
from neurenix_core.graph.importers.torch_fft import HANDLERS as _FFT_HANDLERS
from neurenix_core.graph.importers.torch_fft import (
    carried,
    complex_call,
    refuse_complex_inputs,
    refuse_complex_outputs,
    touches_complex,
)
from neurenix_core.graph.importers.torch_linalg import HANDLERS as _LINALG_HANDLERS
from neurenix_core.graph.importers.torch_ops import HANDLERS as _MORE_HANDLERS
from neurenix_core.graph.importers.torch_ops import Unavailable, batch_norm_nd, conv_nd, conv_transpose_nd, size_value, unbatched
from neurenix_core.graph.importers.torch_reductions import HANDLERS as _REDUCTION_HANDLERS
from neurenix_core.graph.importers.torch_special import HANDLERS as _SPECIAL_HANDLERS
from neurenix_core.graph.ir import Graph
from neurenix_core.graph.ir.symbolic import ARANGE_CAP, NotSymbolicError, SymDim, is_symbolic, variable

__all__ = ["HANDLERS", "import_fx", "import_module"]

_BIG = 2**62  # "to the end" for slices, clamped by the slice op as ONNX does
_REMEDY = ("rewrite that part of forward with supported torch ops, or run the model in PyTorch; "
           "the opset is listed in docs/models.md")

Handler = Callable[["_Ctx", Any, list[Any], dict[str, Any]], Any]


class _Ctx:
    def __init__(self, builder: GraphBuilder, torch: Any) -> None:
        self.b = builder
        self.torch = torch
        self.env: dict[Any, Any] = {}
        #: torch.export's size symbols (s0, s77...) -> the SymDim variable of the input axis they name
        self.symbols: dict[str, str] = {}
        #: the symbols' upper bounds (torch.export's range constraints; None = unbounded)
        self.bounds: dict[str, int | None] = {}

    def name(self, fx_node: Any) -> str:
        return str(fx_node.name)

    def dim(self, d: Any) -> int | SymDim:
        """A size from PyTorch (int or SymInt) as an int or a SymDim over the input dimensions."""
        if isinstance(d, SymDim):
            return d
        if not isinstance(d, self.torch.SymInt):
            return int(d)
        expr = d.node.expr
        if expr.is_Integer:
            return int(expr)
        return SymDim(_sympy_to_expr(expr, self.symbols))

    def sym_shape(self, fx_node: Any) -> tuple[int | SymDim, ...]:
        return tuple(self.dim(d) for d in fx_node.meta["val"].shape)

    def meta(self, fx_node: Any) -> tuple[tuple[int, ...], str]:
        """Shape at the example's sizes, and dtype."""
        val = fx_node.meta["val"]
        return tuple(int(self.b.example(d)) for d in self.sym_shape(fx_node)), _dtype(val.dtype)

    def tensor_value(self, v: Any, like: Value | None = None) -> Value:
        """A Python scalar as a constant of the dtype PyTorch would use next to ``like``."""
        if isinstance(v, (str, Const)):
            return v
        if isinstance(v, bool):
            return Const(np.asarray(v))
        other = self.b.spec(like).dtype if like is not None else "float32"
        if isinstance(v, int) and not other.startswith("float"):
            return Const(np.asarray(v, np.dtype(other) if other != "bool" else np.int64))
        return Const(np.asarray(v, np.float32 if not other.startswith("float") else np.dtype(other)))

    def fail(self, fx_node: Any, why: str) -> UnsupportedOperationError:
        return self.b.unsupported(self.name(fx_node), _target_name(fx_node.target) + _module_of(fx_node), why, _REMEDY)


def _module_of(fx_node: Any) -> str:
    """Where in the user's model the node comes from (torch.export's module stack, innermost):
    ", in encoder.layer.0.attention (BertSelfAttention)"; "" for the top module's own forward."""
    stack = fx_node.meta.get("nn_module_stack") if hasattr(fx_node, "meta") else None
    if not stack:
        return ""
    path, kind = list(stack.values())[-1]
    kind = kind if isinstance(kind, str) else getattr(kind, "__name__", str(kind))
    return f", in {path} ({kind.rsplit('.', 1)[-1]})" if path else ""


def _dtype(torch_dtype: Any) -> str:
    return str(torch_dtype).replace("torch.", "")


def _sympy_to_expr(expr: Any, symbols: dict[str, str]) -> str:
    """A torch.export size expression (sympy) in SymDim's language; NotSymbolicError otherwise."""
    import sympy
    from torch.utils._sympy import functions as F

    def go(e: Any) -> str:
        if e.is_Integer:
            return str(int(e))
        if e.is_Symbol:
            if str(e) not in symbols:
                raise NotSymbolicError(f"size {e} is not an input dimension (a data-dependent size)")
            return symbols[str(e)]
        if isinstance(e, sympy.Add):
            return "(" + " + ".join(go(a) for a in e.args) + ")"
        if isinstance(e, sympy.Mul):
            return "(" + " * ".join(go(a) for a in e.args) + ")"
        if isinstance(e, (F.FloorDiv, F.CleanDiv)):
            return f"({go(e.args[0])} // {go(e.args[1])})"
        if isinstance(e, (F.Mod, F.PythonMod)):
            return f"({go(e.args[0])} % {go(e.args[1])})"
        if isinstance(e, (F.CeilDiv,)):
            return f"(-((-{go(e.args[0])}) // {go(e.args[1])}))"
        if isinstance(e, (F.Max, F.Min)):
            name = "max" if isinstance(e, F.Max) else "min"
            return f"{name}(" + ", ".join(go(a) for a in e.args) + ")"
        raise NotSymbolicError(f"size expression {e} ({type(e).__name__}) has no symbolic form")

    return go(expr)


def _target_name(target: Any) -> str:
    return str(getattr(target, "__name__", target))


def _axis(v: int, ndim: int) -> int:
    return v % ndim if ndim else 0


# ----------------------------------------------------------------------------- handlers
def _unary(op: str) -> Handler:
    return lambda c, n, a, k: c.b.emit(c.name(n), op, [a[0]])


def _binary(op: str) -> Handler:
    def run(c: _Ctx, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
        x, y = (_size_operand(c, n, v, a[1 - i], f"s{i}") for i, v in enumerate(a[:2]))
        x = c.tensor_value(x, y if isinstance(y, (str, Const)) else None)
        y = c.tensor_value(y, x)
        alpha = k.get("alpha", a[2] if len(a) > 2 else 1)
        if alpha != 1:
            y = c.b.emit(c.name(n) + ".alpha", "mul", [y, c.tensor_value(alpha, y)])
        return c.b.emit(c.name(n), op, [x, y])

    return run


def _size_operand(c: _Ctx, n: Any, v: Any, other: Any, tag: str) -> Any:
    """A symbolic size operand (tensor + SymInt) as a 0-d tensor in the other operand's dtype."""
    if not isinstance(v, SymDim):
        return v
    dtype = c.b.spec(other).dtype if isinstance(other, (str, Const)) else "int64"
    return size_value(c, n, v, dtype, tag)


def _rsub(c: _Ctx, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    return _binary("sub")(c, n, [a[1], a[0]] + a[2:], k)


def _conv(c: _Ctx, n: Any, a: list[Any], k: dict[str, Any], nd: int) -> Value:
    x, w = a[0], a[1]
    bias = a[2] if len(a) > 2 else None
    if not isinstance(w, Const) or (bias is not None and not isinstance(bias, Const)):
        # a weight computed at run time: the opset's conv takes it as an input
        return conv_nd(c, n, x, w, bias, a[3] if len(a) > 3 else 1, a[4] if len(a) > 4 else 0, a[5] if len(a) > 5 else 1,
                       int(a[6]) if len(a) > 6 else 1)

    def tup(v: Any, default: int) -> tuple[int, ...]:
        v = default if v is None else v
        return tuple(int(i) for i in v) * (nd if len(v) == 1 else 1) if isinstance(v, (list, tuple)) else (int(v),) * nd

    stride, dilation = tup(a[3] if len(a) > 3 else 1, 1), tup(a[5] if len(a) > 5 else 1, 1)
    groups = int(a[6]) if len(a) > 6 else 1
    padding: Any = a[4] if len(a) > 4 else 0
    if padding == "valid":
        padding = 0
    if padding == "same":
        kernel = w.array.shape[2:]
        total = [dilation[i] * (kernel[i] - 1) for i in range(nd)]
        if any(t % 2 for t in total):
            pads = [(0, 0), (0, 0)] + [(t // 2, t - t // 2) for t in total]
            x = c.b.emit(c.name(n) + ".pad", "pad", [x], {"pads": tuple(pads)})
            padding = 0
        else:
            padding = [t // 2 for t in total]
    attrs: dict[str, Any] = {"stride": stride, "padding": tup(padding, 0), "dilation": dilation, "groups": groups}
    if nd == 2:
        attrs |= {"in_channels": int(w.array.shape[1]) * groups, "out_channels": int(w.array.shape[0]),
                  "kernel_size": tuple(int(d) for d in w.array.shape[2:])}
    params = {"weight": w.array, "bias": None if bias is None else bias.array}
    return c.b.emit(c.name(n), "conv2d" if nd == 2 else "conv1d", [x], attrs, params)


def _conv_transpose(c: _Ctx, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """aten.conv_transpose2d(input, weight, bias, stride, padding, output_padding, groups, dilation)."""
    x, w = a[0], a[1]
    bias = a[2] if len(a) > 2 else None
    if not isinstance(w, Const) or (bias is not None and not isinstance(bias, Const)) or w.array.ndim != 4:
        # 1-D / 3-D, or a weight computed at run time: the opset's N-d conv_transpose (weight as an input)
        stride, padding, output_padding = (a[i] if len(a) > i and a[i] is not None else d for i, d in ((3, 1), (4, 0), (5, 0)))
        return conv_transpose_nd(c, n, x, w, bias, stride, padding, output_padding,
                                 int(a[6]) if len(a) > 6 else 1, a[7] if len(a) > 7 and a[7] is not None else 1)

    def pair(i: int, default: int) -> tuple[int, int]:
        v = a[i] if len(a) > i and a[i] is not None else default
        v = tuple(int(j) for j in v) if isinstance(v, (list, tuple)) else (int(v),)
        return (v[0], v[0]) if len(v) == 1 else (v[0], v[1])

    groups = int(a[6]) if len(a) > 6 else 1
    attrs = {"stride": pair(3, 1), "padding": pair(4, 0), "output_padding": pair(5, 0), "dilation": pair(7, 1), "groups": groups,
             "in_channels": int(w.array.shape[0]), "out_channels": int(w.array.shape[1]) * groups,
             "kernel_size": tuple(int(d) for d in w.array.shape[2:])}
    return c.b.emit(c.name(n), "conv_transpose2d", [x], attrs, {"weight": w.array, "bias": None if bias is None else bias.array})


def _convolution(c: _Ctx, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    if a[6]:  # aten.convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
        return _conv_transpose(c, n, [a[0], a[1], a[2], a[3], a[4], a[7], a[8], a[5]], k)
    nd = len(c.b.spec(a[1]).shape) - 2
    if nd not in (1, 2):
        return conv_nd(c, n, a[0], a[1], a[2], a[3], a[4], a[5], int(a[8]))
    return _conv(c, n, [a[0], a[1], a[2], a[3], a[4], a[5], a[8]], k, nd)


def _linear(c: _Ctx, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    x, w = a[0], a[1]
    bias = a[2] if len(a) > 2 else None
    if isinstance(w, Const) and (bias is None or isinstance(bias, Const)):
        params = {"weight": w.array, "bias": None if bias is None else bias.array}
        return c.b.emit(c.name(n), "linear", [x], {"in_features": int(w.array.shape[1]), "out_features": int(w.array.shape[0])}, params)
    out = c.b.emit(c.name(n), "matmul", [x, c.b.emit(c.name(n) + ".wT", "transpose", [w], {"perm": (1, 0)})])
    return out if bias is None else c.b.emit(c.name(n) + ".bias", "add", [out, bias])


def _addmm(c: _Ctx, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    beta, alpha = k.get("beta", 1), k.get("alpha", 1)
    return c.b.emit(c.name(n), "gemm", [a[1], a[2], a[0]], {"alpha": float(alpha), "beta": float(beta)})


def _batch_norm(c: _Ctx, n: Any, x: Value, w: Any, bias: Any, mean: Any, var: Any, eps: float) -> Value:
    if not all(v is None or isinstance(v, Const) for v in (w, bias, mean, var)):
        raise c.fail(n, "has statistics computed at run time (training-mode batch norm); call module.eval() before importing")
    if len(c.b.spec(x).shape) != 4:  # batch_norm2d takes N,C,H,W; other ranks: ONNX BatchNormalization
        return batch_norm_nd(c, n, x, w, bias, mean, var, eps)
    params = {"running_mean": mean.array, "running_var": var.array, "weight": None if w is None else w.array,
              "bias": None if bias is None else bias.array}
    return c.b.emit(c.name(n), "batch_norm2d", [x], {"num_features": int(mean.array.shape[0]), "eps": float(eps)}, params)


def _bn_legit(c: _Ctx, n: Any, a: list[Any], k: dict[str, Any]) -> list[Any]:
    return [_batch_norm(c, n, a[0], a[1], a[2], a[3], a[4], a[6]), None, None]


def _bn(c: _Ctx, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    if a[5]:
        raise c.fail(n, "runs batch norm in training mode; call module.eval() before importing")
    return _batch_norm(c, n, a[0], a[1], a[2], a[3], a[4], a[7])


def _layer_norm(c: _Ctx, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    w, bias = (a[2] if len(a) > 2 else None), (a[3] if len(a) > 3 else None)
    eps = float(a[4]) if len(a) > 4 else 1e-5
    if not all(v is None or isinstance(v, Const) for v in (w, bias)):
        return _layer_norm_inputs(c, n, a[0], tuple(int(d) for d in a[1]), w, bias, eps)
    params = {"weight": None if w is None else w.array, "bias": None if bias is None else bias.array}
    return c.b.emit(c.name(n), "layer_norm", [a[0]], {"normalized_shape": tuple(int(d) for d in a[1]), "eps": eps}, params)


def _layer_norm_inputs(c: _Ctx, n: Any, x: Value, normalized: tuple[int, ...], w: Any, bias: Any, eps: float) -> Value:
    """layer_norm whose weight or bias is computed at run time (a conditioning network's output):
    the opset's ONNX LayerNormalization, which takes them as inputs (a missing weight is ones)."""
    dtype = c.b.spec(x).dtype
    scale = Const(np.ones(normalized, np.float32 if dtype == "bfloat16" else np.dtype(dtype))) if w is None else w
    inputs = [x, scale] + ([] if bias is None else [bias])
    return c.b.emit(c.name(n), "layer_normalization", inputs, {"axis": -len(normalized), "epsilon": eps})


def _softmax(op: str) -> Handler:
    return lambda c, n, a, k: c.b.emit(c.name(n), op, [a[0]], {"axis": int(a[1])})


def _reduce(op: str) -> Handler:
    def run(c: _Ctx, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
        dims = a[1] if len(a) > 1 else k.get("dim")
        keep = bool(a[2]) if len(a) > 2 else bool(k.get("keepdim", False))
        axes = None if dims is None or dims == [] else (tuple(dims) if isinstance(dims, (list, tuple)) else (int(dims),))
        x = a[0]
        if op in ("reduce_sum", "reduce_prod") and "val" in n.meta:
            # PyTorch sums bool and small integers in int64 (a count of True values): cast
            # first, or the sum of a bool tensor would stay bool (a count of 2 read as 1)
            x = c.b.cast_to(c.name(n) + ".in", x, c.meta(n)[1])
        return c.b.emit(c.name(n), op, [x], {"axes": axes, "keepdims": keep})

    return run


def _reshape(c: _Ctx, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    return c.b.reshape(c.name(n), a[0], c.sym_shape(n), c.sym_shape(n.args[0]))


def _expand(c: _Ctx, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    return c.b.emit(c.name(n), "expand", [a[0]], {"shape": c.sym_shape(n)})


def _static_axis(c: _Ctx, n: Any, dim: int) -> int:
    """The size of axis ``dim`` of the node's first input, which must not be dynamic."""
    size = c.sym_shape(n.args[0])[dim]
    if isinstance(size, SymDim):
        raise NotSymbolicError(f"node {c.name(n)!r} cuts dynamic axis {dim} into a fixed number of parts")
    return size


def _permute(c: _Ctx, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    return c.b.emit(c.name(n), "transpose", [a[0]], {"perm": tuple(int(d) for d in a[1])})


def _transpose(c: _Ctx, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    ndim = len(c.b.spec(a[0]).shape)
    if ndim == 0:  # torch takes dims 0 and -1 of a 0-d tensor (x.t(), x.transpose(0, -1)): the tensor itself
        if int(a[1]) not in (0, -1) or int(a[2]) not in (0, -1):
            raise UnsupportedOperationError(f"{c.name(n)}: transpose of a 0-d tensor takes dims 0 or -1, got {a[1]} and {a[2]}")
        return a[0]
    perm = list(range(ndim))
    i, j = _axis(int(a[1]), ndim), _axis(int(a[2]), ndim)
    perm[i], perm[j] = perm[j], perm[i]
    return c.b.emit(c.name(n), "transpose", [a[0]], {"perm": tuple(perm)})


def _t(c: _Ctx, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """torch.t: a 0-d or 1-d tensor as it is, a matrix transposed."""
    return a[0] if len(c.b.spec(a[0]).shape) < 2 else _transpose(c, n, [a[0], 0, 1], k)


def _squeeze(c: _Ctx, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    shape = c.b.spec(a[0]).shape
    if not shape:  # squeeze(0) / squeeze(-1) of a 0-d tensor: nothing to remove
        return a[0]
    dims = a[1] if len(a) > 1 else None
    dims = None if dims is None else (tuple(dims) if isinstance(dims, (list, tuple)) else (int(dims),))
    # PyTorch ignores squeeze of a non-1 axis; ONNX refuses it: keep only the size-1 ones.
    axes = None if dims is None else tuple(d for d in dims if shape[_axis(d, len(shape))] == 1)
    if axes == ():
        return a[0]
    return c.b.emit(c.name(n), "squeeze", [a[0]], {"axes": axes})


def _select(c: _Ctx, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    return c.b.emit(c.name(n), "gather", [a[0], Const(np.asarray(int(a[2]), np.int64))], {"axis": int(a[1])})


def _slice(c: _Ctx, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    dim = int(a[1]) if len(a) > 1 else 0
    start = a[2] if len(a) > 2 and a[2] is not None else 0
    end = a[3] if len(a) > 3 and a[3] is not None else _BIG
    step = int(a[4]) if len(a) > 4 else 1
    start, end = c.dim(start), c.dim(end)
    end = min(end, _BIG) if isinstance(end, int) else end
    return c.b.emit(c.name(n), "slice", [a[0]], {"starts": (start,), "ends": (end,), "axes": (dim,), "steps": (step,)})


def _arange(c: _Ctx, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """arange with a symbolic length: a slice of the arange up to the length's upper bound (a
    dynamic axis capped by the model, such as a sequence axis by max_position_embeddings);
    any other symbolic arange (a start or end computed from several sizes, a step) is counted
    at run time (:func:`_runtime_arange`)."""
    start, end, step = (0, a[0], 1) if len(a) == 1 else (a[0], a[1], a[2] if len(a) > 2 else k.get("step", 1))
    if any(isinstance(v, float) for v in (start, end, step)):
        raise NotSymbolicError(f"node {c.name(n)!r}: arange({start}, {end}, {step}) with a fractional bound and a symbolic one")
    start, end = c.dim(start), c.dim(end)
    if not isinstance(step, int) or step <= 0:
        raise NotSymbolicError(f"node {c.name(n)!r}: arange({start}, {end}, {step}) with a symbolic or negative step")
    if not isinstance(start, int) or step != 1 or not isinstance(end, SymDim):
        return _runtime_arange(c, n, start, end, step)
    bound = _upper_bound(c, end)
    if bound is None:
        if len(end.variables) != 1 or _upper_bound_var(c, end) is None:
            return _runtime_arange(c, n, start, end, step)
        # An unbounded axis (the batch): cap it, and say so at run time past the cap.
        bound = max(ARANGE_CAP, c.b.example(end))
        (key,) = end.variables
        c.b.limits[key] = min(c.b.limits.get(key, bound), bound)
    dtype = c.meta(n)[1]
    full = Const(np.arange(start, max(bound, start), step, dtype=np.dtype(dtype)))
    return c.b.emit(c.name(n), "slice", [full], {"starts": (0,), "ends": (SymDim(f"({end.expr}) - {start}"),), "axes": (0,), "steps": (1,)})


def _runtime_arange(c: _Ctx, n: Any, start: int | SymDim, end: int | SymDim, step: int) -> Value:
    """arange(start, end, step) for sizes no one input axis bounds (the attention mask's length
    as torch.export sees it, (mask batch * mask length) // ids batch), or a symbolic start (a
    cache position): the cumulative sum of ones minus one is 0..end-1, cut to [start:end:step].
    Once the input shapes are known, ``nx.compile`` folds it to a constant (integer arithmetic),
    so no device runs the cumsum."""
    length = end - start if isinstance(start, int) else end  # an int start: 0..end-start-1, then + start
    ones = c.b.emit(c.name(n) + ".ones", "expand", [Const(np.ones((1,), np.int64))], {"shape": (length,)})
    counted = c.b.emit(c.name(n) + ".count", "cumsum", [ones], {"axis": 0})
    offset = Const(np.asarray((start if isinstance(start, int) else 0) - 1, np.int64))
    values = c.b.emit(c.name(n) + ".from0", "add", [counted, offset])
    if not isinstance(start, int) or step != 1:
        first = start if not isinstance(start, int) else 0
        values = c.b.emit(c.name(n) + ".step", "slice", [values], {"starts": (first,), "ends": (_BIG,), "axes": (0,), "steps": (step,)})
    return c.b.cast_to(c.name(n), values, c.meta(n)[1])


def _upper_bound_var(c: _Ctx, d: SymDim) -> str | None:
    return next((sym for sym, var in c.symbols.items() if d.expr == var), None)


def _upper_bound(c: _Ctx, d: SymDim) -> int | None:
    """The largest value of a SymDim that is one input dimension (its range constraint)."""
    for sym, var in c.symbols.items():
        if d.expr == var:
            return c.bounds.get(sym)
    return None


def _full(c: _Ctx, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """full/ones/zeros/new_* with a symbolic size: a scalar constant expanded to the size."""
    name = _packet_name(n.target)
    value = {"ones": 1, "new_ones": 1, "zeros": 0, "new_zeros": 0}.get(name)
    if value is None:
        value = a[-1] if name in ("full", "new_full") else k.get("fill_value")
    if not isinstance(value, (int, float, bool)):
        raise NotSymbolicError(f"node {c.name(n)!r}: {name} with a fill value computed at run time")
    shape, dtype = c.sym_shape(n), c.meta(n)[1]
    scalar = Const(np.full((1,) * len(shape), value, dtype=np.dtype(dtype)))
    return c.b.emit(c.name(n), "expand", [scalar], {"shape": shape})


def _cat(c: _Ctx, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    dim = int(a[1]) if len(a) > 1 else 0
    rank = len(c.sym_shape(n))
    # torch.cat skips 1-D empty tensors next to higher-rank ones (a transformers DynamicCache
    # layer starts as torch.tensor([]) and is concatenated with the first keys it gets)
    parts = [v for v, fx in zip(a[0], n.args[0]) if rank == 1 or _sym_shape_of(c, fx) != (0,)]
    if len(parts) == 1:
        return parts[0]
    return c.b.emit(c.name(n), "concat", parts, {"axis": dim})


def _sym_shape_of(c: _Ctx, arg: Any) -> tuple[int | SymDim, ...] | None:
    """The symbolic shape of an fx argument (None for a Python value)."""
    val: Any = getattr(arg, "meta", {}).get("val")
    return tuple(c.dim(d) for d in val.shape) if hasattr(val, "shape") else None


def _stack(c: _Ctx, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    dim = int(a[1]) if len(a) > 1 else 0
    parts = [c.b.emit(f"{c.name(n)}.{i}", "unsqueeze", [t], {"axes": (dim,)}) for i, t in enumerate(a[0])]
    return c.b.emit(c.name(n), "concat", parts, {"axis": dim})


def _split_parts(c: _Ctx, n: Any, x: Value, sizes: Sequence[int], dim: int) -> list[Value]:
    sizes = [int(s) for s in sizes]
    return [c.b.emit(f"{c.name(n)}.{i}", "split", [x], {"axis": dim, "sizes": tuple(sizes), "index": i}) for i in range(len(sizes))]


def _split(c: _Ctx, n: Any, a: list[Any], k: dict[str, Any]) -> list[Value]:
    dim = int(a[2]) if len(a) > 2 else 0
    total = _static_axis(c, n, dim)
    size = a[1]
    sizes = list(size) if isinstance(size, (list, tuple)) else [min(int(size), total - i) for i in range(0, total, int(size))]
    return _split_parts(c, n, a[0], sizes, dim)


def _unbind(c: _Ctx, n: Any, a: list[Any], k: dict[str, Any]) -> list[Value]:
    dim = int(a[1]) if len(a) > 1 else 0
    parts = _split_parts(c, n, a[0], [1] * _static_axis(c, n, dim), dim)
    return [c.b.emit(f"{c.name(n)}.{i}.squeeze", "squeeze", [p], {"axes": (dim,)}) for i, p in enumerate(parts)]


def _embedding(c: _Ctx, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    w, idx = a[0], a[1]
    if not isinstance(w, Const):
        return c.b.emit(c.name(n), "gather", [w, idx], {"axis": 0})
    return c.b.emit(c.name(n), "embedding", [idx], {}, {"weight": w.array})


def _sdpa(c: _Ctx, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    mask = a[3] if len(a) > 3 else k.get("attn_mask")
    causal = bool(a[5] if len(a) > 5 else k.get("is_causal", False))
    scale = k.get("scale", a[6] if len(a) > 6 else None)
    q, key, value = a[:3]
    if k.get("enable_gqa", False) or (len(a) > 7 and a[7]):
        key, value = (_repeat_heads(c, n, v, c.sym_shape(n.args[0])[-3], tag) for v, tag in ((key, "k"), (value, "v")))
    inputs = [q, key, value] + ([] if mask is None else [mask])
    return c.b.emit(c.name(n), "scaled_dot_product_attention", inputs, {"scale": None if scale is None else float(scale), "is_causal": causal})


def _repeat_heads(c: _Ctx, n: Any, x: Value, heads: int | SymDim, tag: str) -> Value:
    """``enable_gqa``: each key/value head repeated for its group of query heads (repeat_interleave
    on axis -3), written as transformers' ``repeat_kv`` (unsqueeze, expand, reshape) so that
    ``grouped_attention.fold_repeated_kv`` removes the copy again where it compiles."""
    shape = c.sym_shape(n.args[1])
    kv = shape[-3]
    if not isinstance(heads, int) or not isinstance(kv, int) or heads % kv:
        raise c.fail(n, f"uses enable_gqa with {heads} query heads over {kv} key/value heads")
    if heads == kv:
        return x
    lead = tuple(shape[:-3])
    wide = c.b.emit(f"{c.name(n)}.{tag}.heads", "unsqueeze", [x], {"axes": (len(shape) - 2,)})
    wide = c.b.emit(f"{c.name(n)}.{tag}.expand", "expand", [wide], {"shape": lead + (kv, heads // kv) + tuple(shape[-2:])})
    return c.b.reshape(f"{c.name(n)}.{tag}.repeat", wide, lead + (heads,) + tuple(shape[-2:]), lead + (kv, heads // kv) + tuple(shape[-2:]))


def _cast(c: _Ctx, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    return c.b.cast_to(c.name(n), a[0], c.meta(n)[1])


def _clamp(c: _Ctx, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    lo = a[1] if len(a) > 1 else k.get("min")
    hi = a[2] if len(a) > 2 else k.get("max")
    if isinstance(lo, (str, Const)) or isinstance(hi, (str, Const)):
        out = a[0]
        if lo is not None:
            out = c.b.emit(c.name(n) + ".min", "maximum", [out, c.tensor_value(lo, out)])
        if hi is not None:
            out = c.b.emit(c.name(n) + ".max", "minimum", [out, c.tensor_value(hi, out)])
        return out
    return c.b.emit(c.name(n), "clip", [a[0]], {"min": None if lo is None else float(lo), "max": None if hi is None else float(hi)})


def _where(c: _Ctx, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    x, y = a[1], a[2]
    x = c.tensor_value(x, y if isinstance(y, (str, Const)) else None)
    return c.b.emit(c.name(n), "where", [a[0], x, c.tensor_value(y, x)])


def _masked_fill(c: _Ctx, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    return c.b.emit(c.name(n), "where", [a[1], c.tensor_value(a[2], a[0]), a[0]])


def _index(c: _Ctx, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """x[..., i, ..., j, ...] (aten.index.Tensor: None for a full slice). The indexed axes are
    moved to the front, indexed there (:func:`_index_leading`), and the broadcast index axes
    moved back where torch puts them: in place of the indexed axes when these are adjacent,
    first otherwise (NumPy's rule)."""
    x, indices = a[0], list(a[1])
    sym_in = tuple(c.sym_shape(n.args[0]))
    indices += [None] * (len(sym_in) - len(indices))
    axes = [i for i, v in enumerate(indices) if v is not None]
    if not axes:
        return x
    if axes == list(range(len(axes))):
        return _index_leading(c, n, x, indices[:len(axes)], sym_in, tuple(c.sym_shape(n)), c.name(n))
    others = [i for i in range(len(sym_in)) if i not in axes]
    moved = c.b.emit(c.name(n) + ".front", "transpose", [x], {"perm": tuple(axes + others)})
    out_sym = tuple(c.sym_shape(n))
    rest = tuple(sym_in[i] for i in others)
    count = len(out_sym) - len(rest)  # the broadcast index axes
    first = axes[0] if axes == list(range(axes[0], axes[-1] + 1)) else 0
    front_sym = out_sym[first:first + count] + out_sym[:first] + out_sym[first + count:]
    if first == 0:
        return _index_leading(c, n, moved, [indices[i] for i in axes], tuple(sym_in[i] for i in axes + others), front_sym, c.name(n))
    picked = _index_leading(c, n, moved, [indices[i] for i in axes], tuple(sym_in[i] for i in axes + others), front_sym,
                            c.name(n) + ".picked")
    perm = tuple(count + j for j in range(first)) + tuple(range(count)) + tuple(count + j for j in range(first, len(rest)))
    return c.b.emit(c.name(n), "transpose", [picked], {"perm": perm})


def _index_leading(c: _Ctx, n: Any, x: Value, indices: list[Any], sym: tuple[Any, ...], out_shape: tuple[Any, ...],
                   name: str) -> Value:
    """x[i0, i1, ...] with index tensors on the leading axes (``sym``: x's symbolic shape,
    ``out_shape``: the result's)."""
    lead = len(indices)
    if not all(isinstance(i, Const) for i in indices):
        return _index_nd(c, n, x, indices, out_shape, name)
    if is_symbolic(sym[:lead]):
        raise NotSymbolicError(f"node {c.name(n)!r} indexes dynamic leading axes with constant indices")
    shape = c.b.spec(x).shape
    arrays = [i.array.astype(np.int64) for i in indices]
    arrays = [np.where(i < 0, i + shape[d], i) for d, i in enumerate(arrays)]
    if lead > 1 and 0 in shape[lead:]:  # no merging reshape beside an empty axis (the opset's reshape reads 0 as "keep")
        return _index_nd(c, n, x, [Const(i) for i in arrays], out_shape, name)
    # Advanced indexing on the leading axes = one gather on those axes merged (flat indices).
    flat = np.ravel_multi_index(np.broadcast_arrays(*arrays), shape[:lead]).astype(np.int64)
    merged = c.b.emit(name + ".merge", "reshape", [x], {"shape": (-1,) + tuple(sym[lead:])}) if lead > 1 else x
    return c.b.emit(name, "gather", [merged, Const(flat)], {"axis": 0})


def _index_nd(c: _Ctx, n: Any, x: Value, indices: list[Value], out_shape: tuple[Any, ...], name: str) -> Value:
    """x[i0, i1, ...] with index tensors computed at run time (the attention-mask lookups of
    Hugging Face models): the indices broadcast to one shape and stacked on a last axis, then
    gather_nd (non-negative indices, as arange-built ones are)."""
    lead = len(indices)
    rank = len(out_shape) - (len(c.b.spec(x).shape) - lead)
    common = out_shape[:rank]
    parts = []
    for i, idx in enumerate(indices):
        idx = c.b.cast_to(f"{name}.i{i}", idx, "int64")
        if tuple(c.b.spec(idx).shape) != tuple(c.b.example(common)) or is_symbolic(common):
            idx = c.b.emit(f"{name}.i{i}.expand", "expand", [idx], {"shape": common})
        parts.append(c.b.emit(f"{name}.i{i}.unsqueeze", "unsqueeze", [idx], {"axes": (-1,)}))
    stacked = parts[0] if lead == 1 else c.b.emit(f"{name}.indices", "concat", parts, {"axis": -1})
    return c.b.emit(name, "gather_nd", [x, stacked], {"batch_dims": 0})


def _index_select(c: _Ctx, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """index_select(input, dim, index): a 0-d index keeps the axis (size 1), and a 0-d input is
    read as its one element (a 1-element index gives a 0-d result), as torch does."""
    x, index = a[0], a[2]
    if not c.b.spec(index).shape:
        index = c.b.reshape(c.name(n) + ".index", index, (1,))
    if c.b.spec(x).shape:
        return c.b.emit(c.name(n), "gather", [x, index], {"axis": int(a[1])})
    picked = c.b.emit(c.name(n) + ".gather", "gather", [c.b.reshape(c.name(n) + ".in", x, (1,)), index], {"axis": 0})
    return c.b.reshape(c.name(n), picked, c.sym_shape(n))


def _gather(c: _Ctx, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    """torch.gather(input, dim, index): ONNX GatherElements semantics; a 0-d input is read as a
    1-element vector (its index, 0-d or (1,), holds zeros: torch checks it)."""
    if k.get("sparse_grad"):
        raise c.fail(n, "asks for sparse_grad, which inference does not use")
    x, index = a[0], a[2]
    if c.b.spec(x).shape and c.b.spec(index).shape:
        return c.b.emit(c.name(n), "gather_elements", [x, index], {"axis": int(a[1])})
    flat_x, flat_i = (c.b.reshape(f"{c.name(n)}.{tag}", v, (-1,)) for tag, v in (("in", x), ("index", index)))
    picked = c.b.emit(c.name(n) + ".gather", "gather_elements", [flat_x, flat_i], {"axis": 0})
    return c.b.reshape(c.name(n), picked, c.sym_shape(n))


def _pad(c: _Ctx, n: Any, a: list[Any], k: dict[str, Any], mode: str = "constant") -> Value:
    flat = [int(p) for p in a[1]]
    ndim = len(c.b.spec(a[0]).shape)
    pairs = [(0, 0)] * ndim
    for i in range(len(flat) // 2):  # PyTorch lists (before, after) from the last axis backwards
        pairs[ndim - 1 - i] = (flat[2 * i], flat[2 * i + 1])
    if mode == "from_args":
        mode = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}[a[2] if len(a) > 2 else "constant"]
        value = a[3] if len(a) > 3 and a[3] is not None else 0.0
    else:
        value = a[2] if len(a) > 2 else 0.0
    if any(p < 0 for pair in pairs for p in pair):
        return _negative_pad(c, n, a[0], pairs, mode, float(value))
    return c.b.emit(c.name(n), "pad", [a[0]], {"pads": tuple(pairs), "mode": mode, "value": float(value)})


def _negative_pad(c: _Ctx, n: Any, x: Value, pairs: list[tuple[int, int]], mode: str, value: float) -> Value:
    """Pads with negative entries, which crop (the opset's pad takes none below 0). Constant
    mode pads then crops, as torch does; the other modes read each output position's source
    with a gather per padded axis, as torch's kernels do: output i <- input i - before, clamped
    (replicate: a crop past the input's end still repeats its edge) or reflected; circular crops
    first and wraps around what is left."""
    if mode == "constant":
        grown = [(max(lo, 0), max(hi, 0)) for lo, hi in pairs]
        out = c.b.emit(c.name(n) + ".pad", "pad", [x], {"pads": tuple(grown), "mode": mode, "value": value})
        crop = [(axis, max(-lo, 0), hi if hi < 0 else _BIG) for axis, (lo, hi) in enumerate(pairs) if lo < 0 or hi < 0]
        return c.b.emit(c.name(n), "slice", [out], {"starts": tuple(v[1] for v in crop), "ends": tuple(v[2] for v in crop),
                                                    "axes": tuple(v[0] for v in crop), "steps": (1,) * len(crop)})
    shape, out = c.sym_shape(n.args[0]), x
    for axis, (lo, hi) in enumerate(pairs):
        if lo == hi == 0:
            continue
        size = shape[axis]
        if isinstance(size, SymDim):
            raise NotSymbolicError(f"node {c.name(n)!r} crops dynamic axis {axis} with a negative pad")
        source = np.arange(size + lo + hi, dtype=np.int64) - lo
        if mode == "edge":
            source = np.clip(source, 0, size - 1)
        elif mode == "wrap":  # torch crops first, then wraps around what is left
            kept = size - max(-lo, 0) - max(-hi, 0)
            source = (np.arange(size + lo + hi, dtype=np.int64) - max(lo, 0)) % kept + max(-lo, 0)
        else:  # reflect: about the first and last element, which are not repeated
            source = np.abs(source)
            source = np.where(source > size - 1, 2 * (size - 1) - source, source)
        out = c.b.emit(f"{c.name(n)}.axis{axis}", "gather", [out, Const(source)], {"axis": axis})
    return out


def _identity(c: _Ctx, n: Any, a: list[Any], k: dict[str, Any]) -> Value:
    return a[0]


HANDLERS: dict[str, Handler] = {
    # elementwise
    "add": _binary("add"), "sub": _binary("sub"), "mul": _binary("mul"), "rsub": _rsub,
    "eq": _binary("equal"), "ne": _binary("not_equal"), "lt": _binary("less"), "le": _binary("less_equal"),
    "gt": _binary("greater"), "ge": _binary("greater_equal"),
    "logical_not": _unary("logical_not"),
    "neg": _unary("neg"), "abs": _unary("abs"), "exp": _unary("exp"), "log": _unary("log"), "sqrt": _unary("sqrt"),
    "rsqrt": _unary("rsqrt"), "reciprocal": _unary("reciprocal"), "sin": _unary("sin"), "cos": _unary("cos"),
    "erf": _unary("erf"), "floor": _unary("floor"), "ceil": _unary("ceil"), "sign": _unary("sign"),
    "relu": _unary("relu"), "sigmoid": _unary("sigmoid"), "tanh": _unary("tanh"), "silu": _unary("silu"),
    "hardswish": _unary("hardswish"), "hardsigmoid": _unary("hardsigmoid"),
    "gelu": lambda c, n, a, k: c.b.emit(c.name(n), "gelu", [a[0]], {"approximate": k.get("approximate", a[1] if len(a) > 1 else "none")}),
    "leaky_relu": lambda c, n, a, k: c.b.emit(c.name(n), "leaky_relu", [a[0]], {"alpha": float(a[1]) if len(a) > 1 else 0.01}),
    "hardtanh": lambda c, n, a, k: c.b.emit(c.name(n), "clip", [a[0]], {"min": float(a[1]) if len(a) > 1 else -1.0, "max": float(a[2]) if len(a) > 2 else 1.0}),
    "relu6": lambda c, n, a, k: c.b.emit(c.name(n), "clip", [a[0]], {"min": 0.0, "max": 6.0}),
    "clamp": _clamp, "clamp_min": lambda c, n, a, k: _clamp(c, n, [a[0], a[1], None], k),
    "clamp_max": lambda c, n, a, k: _clamp(c, n, [a[0], None, a[1]], k),
    "where": _where, "masked_fill": _masked_fill,
    "softmax": _softmax("softmax"), "_softmax": _softmax("softmax"), "log_softmax": _softmax("log_softmax"),
    "_log_softmax": _softmax("log_softmax"),
    # linear algebra
    "linear": _linear, "matmul": _binary("matmul"), "mm": _binary("matmul"), "bmm": _binary("matmul"), "addmm": _addmm,
    "conv2d": lambda c, n, a, k: _conv(c, n, a, k, 2), "conv1d": lambda c, n, a, k: _conv(c, n, a, k, 1),
    "convolution": _convolution, "conv_transpose2d": _conv_transpose,
    "scaled_dot_product_attention": _sdpa,
    # normalisation and pooling
    "_native_batch_norm_legit_no_training": _bn_legit, "batch_norm": _bn, "layer_norm": _layer_norm,
    # reductions
    "mean": _reduce("reduce_mean"), "sum": _reduce("reduce_sum"), "amax": _reduce("reduce_max"), "amin": _reduce("reduce_min"),
    "prod": _reduce("reduce_prod"),
    # shapes
    "view": _reshape, "reshape": _reshape, "_unsafe_view": _reshape, "flatten": _reshape, "expand": _expand,
    "permute": _permute, "transpose": _transpose, "t": _t,
    "unsqueeze": lambda c, n, a, k: c.b.emit(c.name(n), "unsqueeze", [a[0]], {"axes": (int(a[1]),)}),
    "squeeze": _squeeze, "select": _select, "slice": _slice, "cat": _cat, "concat": _cat, "stack": _stack,
    "split": _split, "split_with_sizes": _split, "unbind": _unbind,
    "index": _index, "index_select": _index_select, "gather": _gather, "embedding": _embedding,
    "constant_pad_nd": _pad, "pad": lambda c, n, a, k: _pad(c, n, a, k, "from_args"),
    "reflection_pad2d": lambda c, n, a, k: _pad(c, n, a, k, "reflect"), "replication_pad2d": lambda c, n, a, k: _pad(c, n, a, k, "edge"),
    "_to_copy": _cast, "to": _cast, "type_as": _cast,
    "arange": _arange, "full": _full, "ones": _full, "zeros": _full, "new_full": _full, "new_ones": _full, "new_zeros": _full,
    # no-ops at inference
    "clone": _identity, "contiguous": _identity, "alias": _identity, "detach": _identity, "lift_fresh_copy": _identity,
    "dropout": _identity, "feature_dropout": _identity,
}
HANDLERS.update(_MORE_HANDLERS)  # the wider ATen coverage (torch_ops), replacing entries of the same name
# torch.special, torch.linalg, order statistics / scans / scatter reductions, and torch.fft: one module each
for _family in (_SPECIAL_HANDLERS, _LINALG_HANDLERS, _REDUCTION_HANDLERS, _FFT_HANDLERS):
    HANDLERS.update(_family)


def _accepts_unbatched(handler: Handler) -> Handler:
    """A convolution handler that also takes an unbatched input (C, *S): one rank below its weight."""
    def run(c: _Ctx, n: Any, a: list[Any], k: dict[str, Any]) -> Any:
        if isinstance(a[1], (Value, Const)) and len(c.b.spec(a[0]).shape) == len(c.b.spec(a[1]).shape) - 1:
            return unbatched(c, n, a[0], lambda x: handler(c, n, [x, *a[1:]], k))
        return handler(c, n, a, k)

    return run


for _name in ("conv1d", "conv2d", "conv3d", "convolution", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"):
    if _name in HANDLERS:
        HANDLERS[_name] = _accepts_unbatched(HANDLERS[_name])
HANDLERS.update(_GRADIENT_HANDLERS)  # the gradient ops AOTAutograd's backward graphs keep (torch.compile training)
_SKIP = {"_assert_tensor_metadata", "_assert_scalar", "sym_constrain_range_for_size", "_assert_async"}


# ----------------------------------------------------------------------------- the walk
def _packet_name(target: Any) -> str:
    packet = getattr(target, "overloadpacket", None)
    return str(getattr(packet, "__name__", _target_name(target)))


def _flat_values(args: Any) -> list[Any]:
    if isinstance(args, (list, tuple)):
        return [v for a in args for v in _flat_values(a)]
    if isinstance(args, dict):
        return [v for a in args.values() for v in _flat_values(a)]
    return [args]


def _fold(c: _Ctx, n: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    """Run an op whose inputs are all constants in PyTorch, at import time."""
    torch = c.torch

    def to_torch(v: Any) -> Any:
        if isinstance(v, Const):
            return _torch_tensor(torch, v.array)
        if isinstance(v, (list, tuple)):
            return type(v)(to_torch(i) for i in v)
        return v

    out = n.target(*to_torch(list(args)), **{k: to_torch(v) for k, v in kwargs.items()})

    def back(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return Const(_host_array(v, share=False))
        if isinstance(v, (list, tuple)):
            return [back(i) for i in v]
        return v

    return back(out)


def _resolve(c: _Ctx, a: Any) -> Any:
    from torch import fx

    if isinstance(a, fx.Node):
        return c.env[a]
    if isinstance(a, (list, tuple)):
        return [_resolve(c, v) for v in a]
    return a


def _check_spec(c: _Ctx, n: Any, value: Any) -> Any:
    """Keep the graph's dtypes equal to PyTorch's (scalar promotion differs in a few places)."""
    if not isinstance(value, str) or "val" not in n.meta or not hasattr(n.meta["val"], "shape"):
        return value
    shape, dtype = carried(*c.meta(n))  # a complex value is carried as a real (..., 2) one (torch_fft)
    spec = c.b.spec(value)
    if spec.shape != shape:
        raise c.fail(n, f"imported with shape {spec.shape}, but PyTorch computes {shape} (an importer bug: please report it)")
    return c.b.cast_to(c.name(n), value, dtype) if spec.dtype != dtype else value


def _call(c: _Ctx, n: Any) -> Any:
    name = _packet_name(n.target)
    if n.target is operator.getitem:
        seq = c.env[n.args[0]]
        return seq[int(n.args[1])]
    if name in _SKIP:
        return None
    val = n.meta.get("val")
    if isinstance(val, c.torch.SymInt):  # sym_size and size arithmetic: the size itself, symbolically
        try:
            return c.dim(val)
        except NotSymbolicError as exc:  # a value read out of a tensor (.item()): refused where a later op reads it
            if name not in ("_local_scalar_dense", "item"):
                raise
            return Unavailable(f"a value read out of a tensor at run time ({exc})")
    if isinstance(val, (c.torch.SymBool, c.torch.SymFloat)):
        return None  # only guards use these; a real op that reads one fails below on the None
    args = _resolve(c, list(n.args))
    kwargs = {k: _resolve(c, v) for k, v in n.kwargs.items()}
    flat = _flat_values([args, kwargs])
    missing = next((v for v in flat if isinstance(v, Unavailable)), None)
    if missing is not None:
        raise c.fail(n, f"reads {missing.why}, which the import does not compute")
    if not any(isinstance(v, str) for v in flat):
        if not any(isinstance(v, SymDim) for v in flat):
            return _fold(c, n, args, kwargs)
        if name not in HANDLERS:
            raise NotSymbolicError(f"node {c.name(n)!r} ({name}) computes a constant from a dynamic size")
    if touches_complex(n):  # complex values, carried as real (..., 2) ones: torch_fft
        return _check_spec(c, n, complex_call(c, n, name, HANDLERS.get(name), args, kwargs))
    handler = HANDLERS.get(name)
    if handler is None:
        raise c.fail(n, "has no mapping to the neurenix opset")
    out = handler(c, n, args, kwargs)
    return _check_spec(c, n, out)


#: Set by ``import_module(share_weights=True)``: the graph's weights are read-only views of the
#: module's CPU tensors instead of copies (the model is imported for inference only and outlives
#: the graph, as ``nx.generate``'s step model: a 135M-parameter model then costs no second 540 MB).
_SHARE_WEIGHTS: ContextVar[bool] = ContextVar("neurenix_share_weights", default=False)


def _constants(ep: Any) -> dict[str, np.ndarray]:
    """Parameters, buffers and lifted constants by placeholder name, as NumPy."""
    sig = ep.graph_signature
    state = dict(ep.state_dict) | dict(getattr(ep, "constants", {}) or {})
    share = _SHARE_WEIGHTS.get()
    out: dict[str, np.ndarray] = {}
    for spec in sig.input_specs:
        if spec.target is not None and spec.target in state:
            out[spec.arg.name] = _host_array(state[spec.target], share)
    return out


def _host_array(t: Any, share: bool) -> np.ndarray:
    """A torch tensor's data as NumPy: a copy, or (``share``, a CPU tensor) a read-only view of it.
    bfloat16 (a constant Recurrent Gemma keeps, a bf16 checkpoint's weights), which ``Tensor.numpy``
    refuses, is read through its 16 bits as ml_dtypes' bfloat16 (the graph's bfloat16)."""
    t = t.detach()
    if not share or t.device.type != "cpu":
        return np.array(_numpy_view(t.cpu()))
    view = _numpy_view(t)
    view.flags.writeable = False  # never written through: the module's weights are the user's
    return view


def _numpy_view(t: Any) -> np.ndarray:
    """A CPU tensor's memory as NumPy (no copy); bfloat16 as ml_dtypes' bfloat16."""
    import torch

    if t.dtype != torch.bfloat16:
        return t.numpy()
    import ml_dtypes  # a core dependency, loaded only for bfloat16 tensors

    return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)


def _torch_tensor(torch: Any, array: np.ndarray) -> Any:
    """A NumPy constant as a torch tensor (a copy); ml_dtypes' bfloat16 as torch.bfloat16."""
    if array.dtype.name == "bfloat16":
        return torch.from_numpy(np.array(array).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(np.array(array))


def _export(torch: Any, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], dynamic_shapes: Any) -> tuple[Any, Any]:
    """The exported program as traced (its ShapeEnv names what fixed a size) and decomposed."""
    from neurenix_core.graph.importers.torch_quiet import quiet_export

    with quiet_export():  # torch's internal FutureWarning and its 0/1-specialisation log line (torch_quiet)
        ep = torch.export.export(module, args, kwargs, dynamic_shapes=dynamic_shapes)
        return ep, ep.run_decompositions(_decompositions())


@functools.cache
def _decompositions() -> dict[Any, Any]:
    """PyTorch's own decompositions to core ATen, for the ops the importer does not map: a
    composite it maps whole (``linear``, ``layer_norm``, ``scaled_dot_product_attention``) stays
    one node, every other one (``logaddexp``, ``diagonal``, ``index_put``, ``new_empty``...)
    arrives as the ops it is made of, as PyTorch itself computes it."""
    from torch._decomp import core_aten_decompositions, decomposition_table

    table = dict(decomposition_table) | dict(core_aten_decompositions())  # the core table's choice where both have one
    return {op: fn for op, fn in table.items() if _packet_name(op) not in HANDLERS}


def _refuse(module: Any, exc: Exception) -> UnsupportedOperationError:
    # torch.export refuses data-dependent control flow and the like
    return UnsupportedOperationError(
        f"from_torch: torch.export could not capture {type(module).__name__}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}; "
        "make forward traceable (no Python branching on tensor values) or export it to ONNX and use nx.nn.from_onnx"
    )


def _static_fallback(module: Any, plan: AxisPlan, why: str) -> None:
    """Say (or refuse, under policy 'error') that every axis meant dynamic keeps the example's size."""
    warn_fixed(module, [(a, f"the whole model was imported with the example's static shapes, because {why}") for a in plan.meant])


def _with_example_shapes(graph: Graph, plan: AxisPlan) -> Graph:
    """The graph with the user's example shapes on its inputs (a widened axis is dynamic, so
    any size fits it; the graph was built at size 2 there)."""
    from dataclasses import replace

    if not plan.widened or len(graph.inputs) != len(plan.shapes):
        return graph
    inputs = tuple(replace(s, shape=shape) for s, shape in zip(graph.inputs, plan.shapes))
    return replace(graph, inputs=inputs)


def _static(torch: Any, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Graph:
    try:
        return _import(torch, module, _export(torch, module, args, kwargs, None)[1])
    except UnsupportedOperationError:
        raise
    except Exception as exc:
        raise _refuse(module, exc) from exc


def _export_planned(torch: Any, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                    spec: Any, as_given: str = "") -> tuple[AxisPlan, Any, Any]:
    """Export with the axes ``spec`` marks dynamic, size-1 ones widened to 2. Where the widened
    trace fixes a widened axis (the model's code needs its size), or fails, or ``as_given``
    already says why it does not work, export the user's example as it is: torch then fixes
    the size-1 axes, and the warning names them with that reason."""
    plan = plan_axes(torch, module, args, kwargs, spec, widen=not as_given)
    if plan.widened:
        try:
            traced, ep = _export(torch, module, plan.args, plan.kwargs, spec)
        except Exception as exc:  # noqa: BLE001 - kept as the warning's reason; the user's example is exported next
            failure = f"the export failed ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
        else:
            fixed = [(a, why) for a, why in fixed_axes(torch, traced, plan) if (a.leaf, a.axis) in plan.widened]
            if not fixed:
                return plan, traced, ep
            failure = "it came out fixed there too (" + "; ".join(why for _, why in fixed) + ")"
        plan, as_given = plan_axes(torch, module, args, kwargs, spec, widen=False), failure
    plan.widen_failure = as_given
    traced, ep = _export(torch, module, plan.args, plan.kwargs, spec)
    return plan, traced, ep


def import_module(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], *, dynamic_shapes: Any = None,
                  static: bool = False, share_weights: bool = False, written: list[int] | None = None,
                  input_names: Sequence[str] | None = None) -> Graph:
    """The Graph of ``module`` called as ``module(*args, **kwargs)`` (example inputs).

    Dynamic axes: ``dynamic_shapes`` as torch.export takes it, else the default (axis 0 of every
    input, axis 1 of rank-2 integer inputs), whatever their example sizes (a size-1 axis is
    traced at size 2: torch_axes); each one that comes out fixed is named in one warning.
    ``static=True`` exports the example's shapes only. ``share_weights=True``: the graph's
    weights are read-only views of the module's CPU tensors, not copies (see ``_SHARE_WEIGHTS``).
    ``written`` (a list): a forward that writes to its inputs in place is imported with their new
    values as the first outputs, and their positions appended to the list (``_WRITTEN``).
    ``input_names``: the graph's input names, one per tensor input in order, instead of
    torch.export's (``args_0``... for a ``forward(*args)``, as torch.compile's graphs have).
    """
    token, mark, names = _SHARE_WEIGHTS.set(share_weights), _WRITTEN.set(written), _INPUT_NAMES.set(input_names)
    try:
        return _import_module(module, args, kwargs, dynamic_shapes, static)
    finally:
        _SHARE_WEIGHTS.reset(token)
        _WRITTEN.reset(mark)
        _INPUT_NAMES.reset(names)


def _import_module(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], dynamic_shapes: Any, static: bool) -> Graph:
    import torch

    if module.training:
        module = module.eval()  # inference graphs: dropout off, batch norm on running statistics
    if static:
        return _static(torch, module, args, kwargs)
    explicit = dynamic_shapes is not None
    spec = dynamic_shapes if explicit else default_spec(torch, module, args, kwargs)
    return _import_dynamic(torch, module, args, kwargs, spec, explicit)


def _import_dynamic(torch: Any, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], spec: Any, explicit: bool,
                    as_given: str = "") -> Graph:
    """The dynamic import of ``spec``'s axes (size-1 ones widened to 2, unless ``as_given`` says
    why the example is exported as it is), else the static one with the warning."""
    try:
        plan, traced, ep = _export_planned(torch, module, args, kwargs, spec, as_given)
    except Exception as exc:
        if explicit:
            raise _refuse(module, exc) from exc
        why = f"torch.export refused dynamic axes ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
        graph = _static(torch, module, args, kwargs)
        _static_fallback(module, plan_axes(torch, module, args, kwargs, spec, widen=False), why)
        return graph
    try:
        graph = _import(torch, module, ep)
    except NotSymbolicError as exc:
        why = str(exc)
    except UnsupportedOperationError as exc:
        # Dynamic export can route a model through ops the static one folds away; if the
        # static import works, the user still gets a model (and is told), else its error.
        why = f"the dynamic graph has an unsupported part ({exc})"
    else:
        graph = _with_example_shapes(graph, plan)
        differs = differs_at_example(torch, module, graph, args, kwargs) if plan.widened else ""
        if differs:  # the size-2 trace is not the model at the example's size 1
            return _import_dynamic(torch, module, args, kwargs, spec, explicit, f"the import {differs}")
        warn_fixed(module, fixed_axes(torch, traced, plan))
        return graph
    graph = _static(torch, module, args, kwargs)
    _static_fallback(module, plan, why)
    return graph


def _axis_symbols(c: _Ctx, inputs: list[Any]) -> None:
    """Map PyTorch's size symbols to the input axes they first appear on."""
    for index, n in enumerate(inputs):
        for axis, d in enumerate(n.meta["val"].shape):
            if isinstance(d, c.torch.SymInt) and d.node.expr.is_Symbol and str(d.node.expr) not in c.symbols:
                c.symbols[str(d.node.expr)] = variable(index, axis)


def _input_symbols(c: _Ctx, ep: Any, inputs: list[Any]) -> None:
    """Map torch.export's size symbols to the input axes they first appear on, with bounds."""
    _axis_symbols(c, inputs)
    for sym, vr in ep.range_constraints.items():
        upper = vr.upper
        c.bounds[str(sym)] = int(upper) if getattr(upper, "is_Integer", False) or type(upper) is int else None


def _import(torch: Any, module: Any, ep: Any) -> Graph:
    c = _Ctx(GraphBuilder(f"from_torch({type(module).__name__})"), torch)
    consts = _constants(ep)
    user_inputs = set(ep.graph_signature.user_inputs)
    # Python values among the example inputs (use_cache=False, return_dict=True): torch.export
    # baked them into the graph; their placeholders are read by nothing that runs.
    baked = {s.arg.name for s in ep.graph_signature.input_specs if type(s.arg).__name__ == "ConstantArgument"}
    # Effect tokens order side effects (torch.linalg's error checks, see torch_linalg); they carry no data.
    tokens = {s.arg.name for s in ep.graph_signature.input_specs if s.kind.name == "TOKEN"}
    inputs = [n for n in ep.graph.nodes if n.op == "placeholder" and n.name not in consts and n.name in user_inputs]
    _input_symbols(c, ep, inputs)
    refuse_complex_inputs(c.b.source, inputs)
    for n in ep.graph.nodes:
        if n.op == "placeholder":
            if n.name in consts:
                c.env[n] = Const(consts[n.name])
            elif n.name in baked or n.name in tokens:
                c.env[n] = None
            elif n.name in user_inputs:
                shape, dtype = _example_shape(n), _dtype(n.meta["val"].dtype)
                dynamic = [a for a, d in enumerate(c.sym_shape(n)) if isinstance(d, SymDim)]
                c.env[n] = c.b.add_input(_input_name(n, inputs), shape, dtype, dynamic)
            else:
                raise c.fail(n, "is an input torch.export lifted that neurenix cannot supply (a token or custom object)")
        elif n.op == "call_function":
            c.env[n] = _call(c, n)
        elif n.op == "output":
            unchanged = _unchanged_buffers(c, ep, n.args[0])
            _refuse_mutations(module, ep, unchanged)
            refuse_complex_outputs(c.b.source, n.args[0])
            kinds = [s.kind.name for s in ep.graph_signature.output_specs]
            outs = [c.env[o] for i, (o, kind) in enumerate(zip(n.args[0], kinds, strict=True)) if kind != "TOKEN" and i not in unchanged]
            missing = [o for o in outs if isinstance(o, Unavailable)]
            if missing:
                raise UnsupportedOperationError(f"from_torch({type(module).__name__}): an output is {missing[0].why}, which the "
                                                "import does not compute; return the values only, or run this model in PyTorch")
            if any(o is None for o in outs):
                raise UnsupportedOperationError(f"from_torch({type(module).__name__}): an output is not a tensor")
            return c.b.graph(outs)
    raise UnsupportedOperationError(f"from_torch({type(module).__name__}): the exported program has no output")


def import_fx(gm: Any, source: str) -> tuple[Graph, list[tuple[str, Any]]]:
    """An ATen FX graph that is not an exported program (AOTAutograd's forward or backward, whose
    weights are placeholders like the data), and how its outputs map to the Graph's.

    The tensor placeholders are the Graph's inputs, in order, their symbolic axes dynamic; a
    SymInt (or, traced at sizes, int) placeholder is the size of the input axis it names. The
    graph's outputs are its tensors; the second value has one entry per FX output: ("graph", k)
    for the Graph's output k, ("input", i) for a placeholder returned as it is, ("value", v) for
    a None or a size.
    """
    import torch

    c = _Ctx(GraphBuilder(source), torch)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    _axis_symbols(c, [n for n in placeholders if isinstance(n.meta.get("val"), torch.Tensor)])
    position = {n: i for i, n in enumerate(placeholders)}
    refuse_complex_inputs(source, placeholders)
    for n in placeholders:
        val = n.meta.get("val")
        if isinstance(val, torch.Tensor):
            dynamic = [a for a, d in enumerate(c.sym_shape(n)) if isinstance(d, SymDim)]
            c.env[n] = c.b.add_input(n.name, _example_shape(n), _dtype(val.dtype), dynamic)
        elif isinstance(val, (int, torch.SymInt)):  # a size: symbolic, or fixed where the graph was traced at sizes
            c.env[n] = c.dim(val)
        else:
            raise c.fail(n, f"is a {type(val).__name__} input; the graph takes tensors and their sizes")
    for n in gm.graph.nodes:
        if n.op == "call_function":
            c.env[n] = _call(c, n)
        elif n.op == "output":
            return _outputs(c, n.args[0], position, source)
        elif n.op != "placeholder":
            raise c.fail(n, f"is an FX {n.op} node; an ATen graph has only call_function nodes")
    raise UnsupportedOperationError(f"{source}: the graph has no output")


def _outputs(c: _Ctx, outs: Sequence[Any], position: dict[Any, int], source: str) -> tuple[Graph, list[tuple[str, Any]]]:
    from torch import fx

    values: list[Value] = []
    template: list[tuple[str, Any]] = []
    refuse_complex_outputs(source, outs)
    for o in outs:
        if isinstance(o, fx.Node) and o in position:
            template.append(("input", position[o]))  # a saved input: the caller hands back its own tensor
            continue
        v = c.env[o] if isinstance(o, fx.Node) else o
        if v is None or isinstance(v, (int, float, SymDim)):
            template.append(("value", v))
        elif isinstance(v, Unavailable):
            raise UnsupportedOperationError(f"{source}: an output reads {v.why}, which the import does not compute")
        else:
            template.append(("graph", len(values)))
            values.append(v)
    if not values:
        raise UnsupportedOperationError(f"{source}: no output is computed by the graph")
    return c.b.graph(values), template


#: Set by ``import_module(input_names=...)``: the user inputs' names in the graph, in order.
_INPUT_NAMES: ContextVar[Sequence[str] | None] = ContextVar("neurenix_input_names", default=None)

#: Set by ``import_module(written=[])``: the positions of the user inputs forward writes in place
#: are appended there, and their new values are the graph's first outputs (torch.compile copies
#: them back); unset, such a forward is refused.
_WRITTEN: ContextVar[list[int] | None] = ContextVar("neurenix_written_inputs", default=None)


def _input_name(n: Any, inputs: list[Any]) -> str:
    names = _INPUT_NAMES.get()
    return str(names[inputs.index(n)]) if names is not None and len(names) == len(inputs) else str(n.name)


def _unchanged_buffers(c: _Ctx, ep: Any, outputs: Sequence[Any]) -> set[int]:
    """The positions of buffer writes that store the buffer's own values back (CTRL's forward
    reassigns ``self.pos_encoding = self.pos_encoding.to(device, dtype)``): folded at import to a
    constant equal to the buffer, value, shape and dtype, they change nothing and can be left out."""
    state = dict(ep.state_dict) | dict(getattr(ep, "constants", {}) or {})
    same = set()
    for i, (spec, o) in enumerate(zip(ep.graph_signature.output_specs, outputs, strict=True)):
        value = c.env.get(o) if spec.kind.name == "BUFFER_MUTATION" else None
        if isinstance(value, Const) and spec.target in state:
            before = _host_array(state[spec.target], share=False)
            if value.array.dtype == before.dtype and np.array_equal(value.array, before, equal_nan=before.dtype.kind == "f"):
                same.add(i)
    return same


def _refuse_mutations(module: Any, ep: Any, unchanged: set[int]) -> None:
    """A forward that writes to a buffer or an input in place: the exported program returns the
    new values before the outputs, and the Graph, which is functional, would give them as outputs.
    ``unchanged``: output positions of buffer writes that store the buffer's own values."""
    specs = ep.graph_signature.output_specs
    written = _WRITTEN.get()
    refused = [s for i, s in enumerate(specs) if i not in unchanged and s.kind.name not in ("USER_OUTPUT", "TOKEN")
               and (written is None or s.kind.name != "USER_INPUT_MUTATION")]
    if refused:
        what = ", ".join(f"{s.kind.name.lower().replace('_', ' ')} of {s.target}" for s in refused)
        raise UnsupportedOperationError(
            f"from_torch({type(module).__name__}): forward writes in place ({what}); a neurenix graph computes "
            "outputs only: return the new value instead of assigning it, or run the model in PyTorch")
    if written is not None:
        users = list(ep.graph_signature.user_inputs)
        written[:] = [users.index(s.target) for s in specs if s.kind.name == "USER_INPUT_MUTATION"]  # a re-import replaces them


def _example_shape(n: Any) -> tuple[int, ...]:
    """An input's example shape: a symbolic axis at the value PyTorch traced it with."""
    out = []
    for d in n.meta["val"].shape:
        hint = d.node.hint if hasattr(d, "node") else d
        out.append(int(hint))
    return tuple(out)
