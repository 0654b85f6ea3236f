"""PyTorch PT2E pre-quantized models onto the core's int8 plan, with the model's own scales.

A model quantized with PyTorch's PT2E flow (``prepare_pt2e`` / ``convert_pt2e`` from
``torchao.quantization.pt2e.quantize_pt2e``, e.g. with the XNNPACK quantizer) is a
``torch.fx.GraphModule`` of float ATen ops with ``quantized_decomposed`` ops around them:
``quantize_per_tensor`` -> ``dequantize_per_tensor`` pairs on activations (constant scales and
zero points as arguments) and ``dequantize_per_channel`` / ``dequantize_per_tensor`` of int8
weight constants. That is the ONNX QDQ format written in fx, so ``nx.nn.from_torch(model,
example_inputs)`` reads it the way ``from_onnx`` reads a QDQ file:

1. :func:`export_qdq` exports the converted model to ONNX in memory (``torch.onnx.export``,
   dynamo exporter, optimized). PyTorch's exporter writes each ``quantized_decomposed`` op as
   the ONNX ``QuantizeLinear`` / ``DequantizeLinear`` with the same scale, zero point and axis,
   and the optimizer folds the scale/zero-point casts to constants; the ONNX nodes are renamed
   after the fx nodes they come from, so the graph's node names (and the plan's keys and the
   errors) are the PT2E model's own (``conv2d``, ``relu``, ``linear``).
2. ``onnx_import.import_onnx_quantized`` folds the Q/DQ into a float graph plus a
   :class:`~neurenix_core.graph.ir.QuantizationPlan` (``onnx_qdq``): activations per tensor,
   symmetric int8 weights per tensor or per channel checked to requantize to the model's
   integers, pooling and reshape keeping their input's parameters, fixed softmax/sigmoid/tanh
   parameters, and every value the core's int8 kernels read quantized. PT2E keeps the bias in
   float; the core rounds it to int32 with ``input_scale * weight_scale``, as XNNPACK does.

Why this route and not handlers for ``quantized_decomposed`` in ``torch_export`` plus a graph-level
fold: the exporter's mapping of these ops is PyTorch's own and maintained with them, and
``onnx_qdq`` already holds every check the core's int8 scheme needs, keyed on ONNX nodes; a
native mapping would need Q/DQ ops in the opset and a second fold over the core's IR that repeats
those checks in another form. The cost is that the PT2E import needs ``onnx`` and ``onnxscript``
(the ``onnx`` extra plus what ``torch.onnx.export`` needs), imported only when such a model is
given, and one export (about a second for a small CNN).

What the export would change is refused before it runs (:func:`check_pt2e`), with
:class:`QuantizationError` naming the fx node and the way out: dynamic quantization
(``choose_qparams``, scales computed at run time), scales passed as tensors, an activation range
narrower than its type (ONNX ``QuantizeLinear`` saturates at the type's range, PT2E at
``quant_min``/``quant_max``), torchao's affine ops, and types other than int8/uint8. What the
core's int8 scheme cannot hold (asymmetric weights ...) is refused by ``onnx_qdq``, worded for
``from_torch`` (:data:`READER`). Nothing runs with other numbers than the model's: no
calibration, no re-rounding.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from neurenix_core.errors import QuantizationError, UnsupportedOperationError
from neurenix_core.graph.importers import onnx_qdq
from neurenix_core.graph.importers.torch_axes import default_spec
from neurenix_core.graph.ir import Graph, QuantizationPlan

__all__ = ["METHOD", "READER", "check_pt2e", "export_qdq", "import_pt2e", "is_pt2e"]

#: ``QuantizationPlan.method`` of a plan read from a PT2E model (no calibration ran).
METHOD = "pt2e"
_REMEDY = ("or give nx.nn.from_torch the float model (before prepare_pt2e) and quantize with "
           "nx.compile(model, device=..., quantize='int8', calibration=batches); PT2E with "
           "XNNPACKQuantizer and get_symmetric_quantization_config(is_per_channel=..., is_dynamic=False) "
           "gives models the core reads as they are")
READER = onnx_qdq.Reader(call="from_torch", remedy=_REMEDY)
#: the quantized_decomposed overloads a static PT2E model is made of (constant scales).
_STATIC = frozenset({"quantize_per_tensor.default", "dequantize_per_tensor.default",
                     "quantize_per_channel.default", "dequantize_per_channel.default"})
_QUANT_NAMESPACES = frozenset({"quantized_decomposed", "torchao"})
_RANGES = {"torch.int8": (-128, 127), "torch.uint8": (0, 255)}


def _quant_nodes(module: Any) -> Iterator[Any]:
    """The fx nodes of ``module`` that call a quantization op (PT2E's or torchao's)."""
    graph = getattr(module, "graph", None)
    for node in getattr(graph, "nodes", ()):
        if node.op == "call_function" and getattr(node.target, "namespace", None) in _QUANT_NAMESPACES:
            yield node


def is_pt2e(module: Any) -> bool:
    """``module`` is a converted PT2E model (an fx GraphModule with quantization ops)."""
    return next(_quant_nodes(module), None) is not None


def _refuse(node: Any, why: str) -> QuantizationError:
    return QuantizationError(f"from_torch(PT2E model): node {node.name!r} ({node.target}) {why}; {_REMEDY}")


def check_pt2e(module: Any) -> None:
    """Refuse what the ONNX export would turn into other numbers, or cannot hold as constants."""
    for node in _quant_nodes(module):
        overload = f"{node.target._opname}.{node.target._overloadname}"
        if node.target.namespace != "quantized_decomposed":
            raise _refuse(node, "is torchao's affine quantization; the core reads PT2E's quantized_decomposed Q/DQ")
        if overload not in _STATIC:
            raise _refuse(node, "computes or passes its scale at run time (dynamic quantization); the core's int8 plan "
                                "needs constant scales")
        dtype = str(node.args[-1])
        if dtype not in _RANGES:
            raise _refuse(node, f"quantizes to {dtype}; the core's int8 plan holds int8 and uint8")
        qmin, qmax = int(node.args[-3]), int(node.args[-2])
        if overload.startswith("quantize_per_tensor") and (qmin, qmax) != _RANGES[dtype]:
            # ONNX QuantizeLinear saturates at the type's range: a narrower range would not be kept.
            raise _refuse(node, f"clamps an activation to [{qmin}, {qmax}], narrower than {dtype}; the core's "
                                "activations use the type's whole range")


def _rename_after_fx(proto: Any) -> None:
    """Name every ONNX node after its first output, which the exporter names after the fx node
    (``conv2d``, ``relu``): the imported graph then speaks the PT2E model's names."""
    for n in proto.graph.node:
        if n.output:
            n.name = n.output[0]


def export_qdq(torch: Any, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], *, dynamic_shapes: Any = None,
               static: bool = False) -> Any:
    """The converted PT2E ``module`` as a QDQ ``onnx.ModelProto`` (in memory), with axis 0 of
    every input dynamic by default (as ``from_torch`` does), ``dynamic_shapes`` as given, or the
    example's shapes with ``static=True``."""
    try:
        import onnxscript  # noqa: F401  (torch.onnx.export's dynamo exporter needs it)
    except ImportError as exc:
        raise UnsupportedOperationError("from_torch on a PT2E-quantized model exports it to ONNX in memory: "
                                        "pip install onnx onnxscript") from exc
    spec = None if static else (dynamic_shapes if dynamic_shapes is not None else default_spec(torch, module, args, kwargs))
    from neurenix_core.graph.importers.torch_quiet import quiet_export

    with quiet_export(), warnings.catch_warnings():  # torch's own noise through logging (torch_quiet)
        # A converted PT2E module reports training mode, but its graph is already captured for
        # inference (batch norm folded), so the flag changes nothing in the export.
        warnings.filterwarnings("ignore", message="Exporting a model while it is in training mode")
        program = torch.onnx.export(module, args, kwargs=kwargs or None, dynamic_shapes=spec, dynamo=True,
                                    optimize=True, verbose=False)
    proto = program.model_proto
    _rename_after_fx(proto)
    proto.graph.name = "PT2E model"  # errors and warnings then read from_torch(PT2E model), as check_pt2e's do
    return proto


def import_pt2e(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any], *, dynamic_shapes: Any = None,
                static: bool = False) -> tuple[Graph, QuantizationPlan]:
    """The float graph of a converted PT2E model and its int8 plan with the model's scales."""
    import torch

    from neurenix_core.graph.importers.onnx_import import import_onnx_quantized

    check_pt2e(module)
    proto = export_qdq(torch, module, args, kwargs, dynamic_shapes=dynamic_shapes, static=static)
    graph, _, plan = import_onnx_quantized(proto, static=static, reader=READER)
    if plan is None or not isinstance(graph, Graph):
        raise QuantizationError("from_torch(PT2E model): no conv or linear weight is quantized with an activation "
                                f"Q/DQ pair, so there is no int8 plan to read; {_REMEDY}")
    return graph, replace(plan, method=METHOD)
