"""Core ``Graph`` -> ``torch.nn.Module`` (the ``neurenix_compile`` hook of the cuda backend).

The whole op-level opset is lowered (``LOWERED_OPS``). A node with weights becomes a real PyTorch
layer (``nn.Linear``, ``nn.Conv2d``, ``nn.Conv1d``, ``nn.BatchNorm2d``, ``nn.LayerNorm``,
``nn.MultiheadAttention``, ``nn.Embedding``) holding the graph's weights; a ``constant`` node
becomes a buffer; every other op is a torch function (``torch_ops``; attention is
``F.scaled_dot_product_attention``). So every PyTorch tool applies to the result, for imported
models too: dtype conversion, ``channels_last``, ``torch.compile``, the Tensor Core validator and
the padding pass (``torch.fx`` traces the forward: a fixed sequence of layer and function calls). A
QuantizationPlan is lowered as fake quantization (weights rounded per channel once, activations
per tensor at run time) with the plan's own parameters: the backend never recomputes them.
"""

from __future__ import annotations

import functools
import re
import warnings
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import numpy as np

from neurenix_core.contract import opset
from neurenix_core.errors import CompilationError, ShapeError, UnsupportedOperationError
from neurenix_cuda_tc.torch_ops import FUNCTIONS, function_for

if TYPE_CHECKING:
    import torch

    from neurenix_core.contract import Graph, Node, QuantizationPlan, QuantParams

__all__ = ["LOWERED_OPS", "graph_module_classes", "lower_graph", "module_key"]

def module_key(node_name: str) -> str:
    """A ModuleDict key for a node name (``features.3`` -> ``features_3``)."""
    return re.sub(r"\W", "_", node_name) or "node"


#: lower_graph(share_weights=True) in progress: float32 weights become tensors over the graph's
#: own arrays instead of copies (see _t).
_SHARE: ContextVar[bool] = ContextVar("neurenix_cuda_tc_share_weights", default=False)


def _t(array: np.ndarray) -> torch.Tensor:
    import torch

    arr = np.asarray(array)
    if _SHARE.get() and arr.dtype == np.float32 and arr.flags.c_contiguous:
        # The graph's array itself (it may be a read-only view of the caller's model, which the
        # host runtime never writes: it runs under inference_mode and hands out copies of any
        # result that is a weight), so each compiled shape adds no copy of the weights.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable", category=UserWarning)
            return torch.from_numpy(arr)
    # torch.tensor copies (a weight may be a read-only view of someone else's model: never aliased)
    return torch.tensor(np.ascontiguousarray(arr, dtype=np.float32))


def _set(m: torch.nn.Module, name: str, array: np.ndarray) -> None:
    """Give the layer's parameter or buffer ``name`` (dotted: ``out_proj.weight``) the value
    ``array``: copied into the layer's own tensor, or, while sharing, the tensor over the array."""
    import torch

    *path, leaf = name.split(".")
    owner = functools.reduce(getattr, path, m)
    current, value = getattr(owner, leaf), _t(array)
    if tuple(value.shape) != tuple(current.shape):
        raise CompilationError(f"plugin cuda: {name} of shape {tuple(value.shape)} does not fit the layer's {tuple(current.shape)}")
    if not _SHARE.get():
        with torch.no_grad():
            current.copy_(value)
    elif isinstance(current, torch.nn.Parameter):
        setattr(owner, leaf, torch.nn.Parameter(value, requires_grad=False))
    else:  # a registered buffer (BatchNorm's running statistics): Module.__setattr__ replaces it
        setattr(owner, leaf, value)


def _where() -> str:
    """Where a layer whose every weight is then set (``_set``) is built: on the meta device while
    sharing, so its initial random weights are never allocated (freed at once, they would stay in
    the process as heap the allocator keeps: 300 MB per compiled shape of a 135M-parameter model)."""
    return "meta" if _SHARE.get() else "cpu"


def _param(node: Node, key: str, shape: tuple[int, ...]) -> np.ndarray:
    value = node.params.get(key)
    if value is None:
        raise CompilationError(f"plugin cuda: node {node.name!r} ({node.op}) has no parameter {key!r}; the graph is incomplete")
    if tuple(value.shape) != shape:
        raise CompilationError(f"plugin cuda: node {node.name!r} ({node.op}) parameter {key!r} has shape {tuple(value.shape)}, expected {shape}")
    return value


def _loaded(m: torch.nn.Module, node: Node) -> torch.nn.Module:
    """``m`` with the node's weight (and bias, when the layer has one) set (``_set``), each checked
    against the shape of the torch layer built for it."""
    _set(m, "weight", _param(node, "weight", tuple(m.weight.shape)))
    if m.bias is not None:
        _set(m, "bias", _param(node, "bias", tuple(m.bias.shape)))
    return m


def _linear(node: Node) -> torch.nn.Module:
    import torch

    a = opset.attrs_of("linear", node.attrs)
    w = node.params["weight"]  # (out, in): the layer's sizes come from it (the attributes are optional)
    out_f, in_f = (int(w.shape[0]) if a["out_features"] is None else int(a["out_features"]),
                   int(w.shape[1]) if a["in_features"] is None else int(a["in_features"]))
    m = torch.nn.Linear(in_f, out_f, bias=node.params.get("bias") is not None, device=_where())
    return _loaded(m, node)


def _conv2d(node: Node) -> torch.nn.Module:
    import torch

    a = opset.attrs_of("conv2d", node.attrs)
    w = node.params["weight"]
    groups = int(a["groups"])
    m = torch.nn.Conv2d(
        int(w.shape[1]) * groups, int(w.shape[0]), tuple(int(k) for k in w.shape[2:]), stride=tuple(a["stride"]),
        padding=tuple(a["padding"]), dilation=tuple(a["dilation"]), groups=groups, bias=node.params.get("bias") is not None,
        device=_where(),
    )
    return _loaded(m, node)


def _conv_transpose2d(node: Node) -> torch.nn.Module:
    import torch

    a = opset.attrs_of("conv_transpose2d", node.attrs)
    w = node.params["weight"]  # (C, O/groups, kh, kw): torch's layout too
    groups = int(a["groups"])
    m = torch.nn.ConvTranspose2d(
        int(w.shape[0]), int(w.shape[1]) * groups, tuple(int(k) for k in w.shape[2:]), stride=tuple(a["stride"]),
        padding=tuple(a["padding"]), output_padding=tuple(a["output_padding"]), groups=groups,
        bias=node.params.get("bias") is not None, dilation=tuple(a["dilation"]), device=_where(),
    )
    return _loaded(m, node)


def _batch_norm(node: Node) -> torch.nn.Module:
    import torch

    n = int(node.params["running_mean"].shape[0])
    m = torch.nn.BatchNorm2d(n, eps=float(opset.attrs_of("batch_norm2d", node.attrs)["eps"]))
    # weight/bias are optional in the opset: the identity affine stands in for a missing one.
    defaults = {"weight": np.ones(n, np.float32), "bias": np.zeros(n, np.float32)}
    for key in ("weight", "bias", "running_mean", "running_var"):
        value = node.params.get(key)
        _set(m, key, defaults[key] if value is None else _param(node, key, (n,)))
    return m.eval()


def _layer_norm(node: Node) -> torch.nn.Module:
    import torch

    a = opset.attrs_of("layer_norm", node.attrs)
    shape = tuple(int(d) for d in a["normalized_shape"])
    affine = node.params.get("weight") is not None or node.params.get("bias") is not None
    m = torch.nn.LayerNorm(shape, eps=float(a["eps"]), elementwise_affine=affine)
    if affine:
        weight, bias = node.params.get("weight"), node.params.get("bias")
        _set(m, "weight", np.ones(shape, np.float32) if weight is None else _param(node, "weight", shape))
        _set(m, "bias", np.zeros(shape, np.float32) if bias is None else _param(node, "bias", shape))
    return m


def _attention(node: Node) -> torch.nn.Module:
    import torch

    a = opset.attrs_of("multihead_attention", node.attrs)
    e, h = int(node.params["out_proj_weight"].shape[0]), int(a["num_heads"])
    if e % h:
        raise CompilationError(f"plugin cuda: node {node.name!r}: embed_dim {e} is not divisible by num_heads {h}")
    m = torch.nn.MultiheadAttention(e, h, batch_first=bool(a["batch_first"]), device=_where())
    zeros = {"in_proj_bias": np.zeros(3 * e, np.float32), "out_proj_bias": np.zeros(e, np.float32)}

    def bias(key: str, shape: tuple[int, ...]) -> np.ndarray:
        return zeros[key] if node.params.get(key) is None else _param(node, key, shape)

    _set(m, "in_proj_weight", _param(node, "in_proj_weight", (3 * e, e)))
    _set(m, "in_proj_bias", bias("in_proj_bias", (3 * e,)))
    _set(m, "out_proj.weight", _param(node, "out_proj_weight", (e, e)))
    _set(m, "out_proj.bias", bias("out_proj_bias", (e,)))
    return m.eval()


def _conv1d(node: Node) -> torch.nn.Module:
    import torch

    a = opset.attrs_of("conv1d", node.attrs)
    w = node.params["weight"]
    groups = int(a["groups"])
    m = torch.nn.Conv1d(int(w.shape[1]) * groups, int(w.shape[0]), int(w.shape[2]), stride=int(a["stride"][0]), padding=int(a["padding"][0]),
                        dilation=int(a["dilation"][0]), groups=groups, bias="bias" in node.params, device=_where())
    return _loaded(m, node)


def _embedding(node: Node) -> torch.nn.Module:
    import torch

    w = np.asarray(node.params["weight"])
    m = torch.nn.Embedding(int(w.shape[0]), int(w.shape[1]), device=_where())
    _set(m, "weight", w)
    return m


_BUILDERS = {"linear": _linear, "conv2d": _conv2d, "conv1d": _conv1d, "conv_transpose2d": _conv_transpose2d, "batch_norm2d": _batch_norm, "layer_norm": _layer_norm,
             "multihead_attention": _attention, "embedding": _embedding}

#: Every op the cuda plugin lowers: the layers above (weights as parameters and buffers) and the
#: weightless functions of ``torch_ops``; ``constant`` nodes become buffers.
LOWERED_OPS: frozenset[str] = frozenset(_BUILDERS) | frozenset(FUNCTIONS) | {"constant"}


def build_layer(node: Node) -> torch.nn.Module | None:
    """The PyTorch layer for one node with weights (None for the weightless ops: torch functions)."""
    if node.op not in _BUILDERS:
        return None
    try:
        return _BUILDERS[node.op](node)
    except KeyError as exc:
        raise CompilationError(f"plugin cuda: node {node.name!r} ({node.op}) lacks attribute {exc.args[0]!r}") from exc


def _attention_call(layer: torch.nn.Module, args: list[Any], static: tuple[Any, Any] | None) -> Any:
    """nn.MultiheadAttention with the opset's mask: a bool mask keeps True (PyTorch's layer masks
    True out), broadcast to the scores (N, heads, L, S) and passed as (N * heads, L, S).
    ``static``: the inputs' (shapes, dtypes) when the graph has them (fx then traces no size)."""
    import torch

    q, k, v = (args * 3)[:3] if len(args) == 1 else args[:3]
    if len(args) < 4:
        return layer(q, k, v, need_weights=False)[0]
    mask = args[3]
    is_bool = static[1][3] == "bool" if static is not None else mask.dtype == torch.bool
    mask = torch.logical_not(mask) if is_bool else mask.to(q.dtype)
    shapes = static[0] if static is not None else None
    shape_q, shape_k = (shapes[0], shapes[1]) if shapes is not None else (tuple(q.shape), tuple(k.shape))
    if len(shapes[3] if shapes is not None else mask.shape) != 2:
        n, lq, ls = (shape_q[0], shape_q[1], shape_k[1]) if layer.batch_first else (shape_q[1], shape_q[0], shape_k[0])
        h = layer.num_heads
        mask = torch.reshape(torch.broadcast_to(mask, (n, h, lq, ls)), (n * h, lq, ls))
    return layer(q, k, v, attn_mask=mask, need_weights=False)[0]


def _fake_quant(x: torch.Tensor, q: QuantParams) -> torch.Tensor:
    """Per-tensor fake quantization with the core's rounding (half away from zero, as TFLite)."""
    import torch

    scale = float(np.asarray(q.scale, np.float32).reshape(-1)[0])
    zp = float(np.asarray(q.zero_point).reshape(-1)[0])
    v = x / scale
    rounded = torch.sign(v) * torch.floor(torch.abs(v) + 0.5)
    return (torch.clamp(rounded + zp, q.qmin, q.qmax) - zp) * scale


def _with_quantized_weights(node: Node, plan: QuantizationPlan | None) -> Node:
    from dataclasses import replace

    from neurenix_core.contract import fake_quantize

    if plan is None or node.name not in plan.weights or "weight" not in node.params:
        return node
    params = dict(node.params)
    # The core's own math: the plan's parameters are applied, never recomputed.
    params["weight"] = fake_quantize(np.asarray(params["weight"]), plan.weights[node.name]).astype(np.float32)
    return replace(node, params=params)


_Step = tuple[str, str, tuple[str, ...], str, Any]


def _static_specs(graph: Graph) -> dict[str, Any] | None:
    """Every value's static shape and dtype, when the graph's inputs have shapes (imported models)."""
    from neurenix_core.contract import infer_values

    if not all(s.shape for s in graph.inputs):
        return None  # a neurenix model lowered before its input shapes are known: sizes are read at run time
    return infer_values(graph)


def _steps(module: Any, graph: Graph, plan: QuantizationPlan | None) -> list[_Step]:
    """(kind, key, inputs, output, callable) per node; layers land in ``module.layers``, constants
    become buffers ``module.const_<key>`` (so .to(dtype) and channels_last reach them)."""
    import torch

    specs = _static_specs(graph)
    steps: list[_Step] = []
    for node in graph.nodes:
        node = _with_quantized_weights(node, plan)
        key = module_key(node.name)
        ins = None if specs is None else tuple(specs[i].shape for i in node.inputs)
        out = None if specs is None else specs[node.output].shape
        if node.op == "constant":
            value = np.asarray(node.params["value"])
            # float constants are float32 like the weights (Module.to(dtype) then converts them); np.array
            # (not ascontiguousarray, which makes a 0-d scalar 1-d) keeps the shape.
            tensor = torch.from_numpy(np.array(value.astype(np.float32) if value.dtype.kind == "f" else value, order="C", copy=True))
            if hasattr(module, f"const_{key}"):
                raise CompilationError(f"plugin cuda: two constants map to the buffer name const_{key}; rename node {node.name!r}")
            module.register_buffer(f"const_{key}", tensor)
            steps.append(("constant", f"const_{key}", (), node.output, None))
            continue
        layer = build_layer(node)
        if layer is not None:
            if key in module.layers:
                raise CompilationError(f"plugin cuda: two nodes map to the layer name {key!r}; rename node {node.name!r}")
            module.layers[key] = layer
            module.node_names[key] = node.name
            static = None if specs is None else (ins, tuple(specs[i].dtype for i in node.inputs))
            steps.append(("attention" if node.op == "multihead_attention" else "layer", key, tuple(node.inputs), node.output, static))
            continue
        if node.op not in FUNCTIONS:
            raise UnsupportedOperationError(f"plugin cuda cannot lower node {node.name!r}: op {node.op!r} has no PyTorch lowering")
        dts = None if specs is None else tuple(specs[i].dtype for i in node.inputs)
        try:
            fn = function_for(node.op, opset.attrs_of(node.op, node.attrs), ins, out, dts)
        except UnsupportedOperationError as exc:
            # A lowering that would fail in PyTorch at run time refuses here: name the node.
            raise UnsupportedOperationError(f"plugin cuda cannot lower node {node.name!r} ({node.op}): {exc}") from exc
        steps.append(("function", key, tuple(node.inputs), node.output, fn))
    return steps


@functools.cache
def _with_arity(base: type, n: int) -> type:
    """A subclass whose ``forward`` names its ``n`` inputs, so torch.fx (align_model) can trace it."""
    names = [f"input_{i}" for i in range(n)]
    namespace: dict[str, Any] = {}
    # fx reads the forward's signature for its placeholders: it must be real named parameters.
    # "(a, b, )": a tuple for any n, () included (a segment of only computed values: no inputs;
    # forward(*inputs) would be one varargs proxy to fx, whose len() it refuses).
    args = "".join(f"{name}, " for name in names)
    exec(f"def forward(self, {args}):\n    return self._forward(({args}))", namespace)  # noqa: S102
    return type(f"{base.__name__}{n}", (base,), {"forward": namespace["forward"], "__module__": base.__module__})


@functools.cache
def graph_module_classes() -> tuple[type, type]:
    """The ``torch.nn.Module`` subclasses of lowered graphs (any inputs; one input) (defined on first use: torch loads lazily)."""
    import torch

    class _GraphModule(torch.nn.Module):
        """Runs a core Graph's nodes in order: layers with weights live in ``self.layers`` (keys
        from node names), constants are buffers, the other ops are torch functions."""

        def __init__(self, graph: Graph, plan: QuantizationPlan | None = None) -> None:
            super().__init__()
            self.layers = torch.nn.ModuleDict()
            self.node_names: dict[str, str] = {}
            self._steps = _steps(self, graph, plan)
            #: Every size and dtype test was decided at lowering (static input shapes): torch.fx traces it.
            self.static = all(s.shape for s in graph.inputs)
            self._inputs = tuple(s.name for s in graph.inputs)
            self._outputs = tuple(graph.outputs)
            self._act = dict(plan.activations) if plan is not None and not plan.dynamic else {}

        def _q(self, name: str, x: torch.Tensor) -> torch.Tensor:
            q = self._act.get(name)
            return x if q is None else _fake_quant(x, q)

        def forward(self, *inputs: torch.Tensor) -> Any:
            if len(inputs) != len(self._inputs):
                raise ShapeError(f"plugin cuda model takes {len(self._inputs)} input(s) ({', '.join(self._inputs)}), got {len(inputs)}")
            return self._forward(inputs)

        def _forward(self, inputs: tuple[torch.Tensor, ...]) -> Any:
            values = {n: self._q(n, x) for n, x in zip(self._inputs, inputs)}
            for kind, key, ins, out, extra in self._steps:
                if kind == "constant":
                    values[out] = getattr(self, key)
                    continue
                args = [values[i] for i in ins]
                if kind == "function":
                    y = extra(*args)
                elif kind == "attention":
                    y = _attention_call(self.layers[key], args, extra)
                else:
                    y = self.layers[key](*args)
                values[out] = self._q(out, y)
            outs = tuple(values[o] for o in self._outputs)
            return outs[0] if len(outs) == 1 else outs

    class _SingleInputGraphModule(_GraphModule):
        """One named input, so torch.fx (align_model) can trace the forward."""

        def forward(self, x: torch.Tensor) -> Any:  # type: ignore[override]
            return self._forward((x,))

    return _GraphModule, _SingleInputGraphModule


def lower_graph(graph: Graph, plan: QuantizationPlan | None = None, *, share_weights: bool = False) -> torch.nn.Module:
    """A ``torch.nn.Module`` (float32, eval mode, on the CPU) computing ``graph``: every opset op
    (``LOWERED_OPS``), weights as parameters, constants as buffers.

    ``share_weights``: the layers' float32 weights are the graph's arrays themselves (no copy;
    frozen, ``requires_grad=False``), for a caller that only runs the module on the CPU and never
    writes its weights (the host runtime: one copy of the weights for every compiled shape)."""
    generic, single = graph_module_classes()
    n = len(graph.inputs)
    cls = single if n == 1 else _with_arity(generic, n)
    token = _SHARE.set(share_weights)
    try:
        return cls(graph, plan).eval()
    finally:
        _SHARE.reset(token)
