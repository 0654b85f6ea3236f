"""A model imported from another framework: a Graph whose float weights are Module parameters.

``nx.nn.from_torch`` (through torch.export) and ``nx.nn.from_onnx`` return a GraphModule. Its
weights are parameters named ``"<node>.<param>"`` (so ``state_dict``, ``save``/``load`` and
``to(device)`` work as for any Module); calling it compiles the graph for the model's device
once per input shape (``nx.compile``) and runs it.

A model with value inputs (an ONNX graph input used as a Reshape target, Slice bounds, reduction
axes ...) has no single graph: ``values`` builds one per call's shapes and values of those
inputs (``graph_for_values``), and ``nx.compile`` caches each. Its weights live in those graphs,
not in parameters.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from neurenix_core.graph.ir import Graph, Node
from neurenix_core.graph.opset.schema import STORAGE_DTYPES
from neurenix_core.nn.module import Module

__all__ = ["GraphModule"]


def _is_weight(arr: Any) -> bool:
    # float8 / float4 constants are data in a storage dtype (no Tensor holds them), not parameters
    return isinstance(arr, np.ndarray) and arr.dtype.kind == "f" and arr.ndim > 0 and str(arr.dtype) not in STORAGE_DTYPES


def _parameter(arr: np.ndarray) -> Any:
    """A weight as a Tensor sharing the graph's buffer where the default device holds host memory
    (one copy of a model's weights, not one in the graph and one in the parameters)."""
    from neurenix_core.errors import TransferError
    from neurenix_core.tensor.creation import asarray

    try:
        return asarray(arr, copy=False)
    except TransferError:  # a device with its own memory: the parameter is necessarily a copy there
        return asarray(arr)


def _host(t: Any) -> np.ndarray:
    """A parameter's current value as NumPy: its own buffer on a host-memory device, else a copy."""
    from neurenix_core.errors import TransferError

    try:
        return np.asarray(t, copy=False)
    except TransferError:  # device memory: copied to the host (what compiling it needs)
        return t.numpy()


class GraphModule(Module):
    """An imported graph as a Module. ``input_names``/``output_names`` say what it takes and returns."""

    def __init__(self, graph: Graph, source: str = "graph", *, values: Any = None, quantization_plan: Any = None) -> None:
        super().__init__()
        object.__setattr__(self, "_graph", graph)
        # The scales a pre-quantized import carried (ONNX QDQ, PT2E): nx.compile lowers them as
        # they are instead of calibrating (neurenix_core.graph.compile.compiler.compile).
        object.__setattr__(self, "quantization_plan", quantization_plan)
        object.__setattr__(self, "_source", source)
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "_compiled", {})
        for node in graph.nodes:
            for key, arr in node.params.items():
                if _is_weight(arr):  # its own dtype: float16 stays float16
                    self.register_parameter(f"{node.name}.{key}", _parameter(arr))

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self._graph.inputs)

    @property
    def output_names(self) -> tuple[str, ...]:
        return self._graph.outputs

    def input_count(self) -> int:
        return len(self._graph.inputs)

    @property
    def value_inputs(self) -> tuple[str, ...]:
        """Inputs whose values the graph is built for (empty for an ordinary graph)."""
        return () if self._values is None else tuple(self._values.value_inputs)

    def graph_for_values(self, shapes: Any, values: Any) -> Graph:
        """The static graph for these input shapes and input values (models with value inputs)."""
        if self._values is None:
            raise TypeError(f"{self._source} has no value inputs; use symbolic_graph()")
        return self._values.build(shapes, values)

    def symbolic_graph(self) -> Graph:
        """The graph with the current weights, dynamic input axes kept (SymDim attributes):
        what ``nx.compile`` specializes per input shape."""
        nodes = []
        for node in self._graph.nodes:
            params = {k: (_host(self._parameters[f"{node.name}.{k}"]) if f"{node.name}.{k}" in self._parameters else v)
                      for k, v in node.params.items()}
            nodes.append(Node(node.name, node.op, node.inputs, node.output, node.attrs, params))
        return replace(self._graph, nodes=tuple(nodes))

    def to_graph(self, *shapes: tuple[int, ...] | None, inputs: int | None = None) -> Graph:
        """The graph with the current weights as a static graph: at ``shapes`` if given, else at
        the import's example shapes (what a backend's own conversion APIs take; ``nx.compile``
        uses :meth:`symbolic_graph` and specializes per call)."""
        graph = self.symbolic_graph()
        dynamic = graph.dynamic
        if shapes and all(s is not None for s in shapes):
            graph = graph.with_input_shapes(*shapes)  # type: ignore[arg-type]
        elif dynamic:
            graph = graph.with_input_shapes(*(s.shape for s in graph.inputs))
        if dynamic:
            from neurenix_core.graph.ir.specialize import fold_size_constants

            graph = fold_size_constants(graph)
        return graph

    def to_onnx(self, path: Any, *shapes: tuple[int, ...], opset_version: int = 21) -> Any:
        """Write the model as a standard ONNX file (``neurenix_core.graph.exporters.onnx_export``),
        atomically; returns the path. Input shapes are static: ``shapes`` (one per input), else
        the import's example shapes. ``nx.nn.from_onnx`` reads the file back to the same results;
        ``nx.nn.save(model, "m.nxm")`` keeps the dynamic axes and the quantization plan instead."""
        try:
            from neurenix_core.graph.exporters.onnx_export import write_onnx
        except ImportError as exc:
            if exc.name != "onnx":
                raise
            from neurenix_core.errors import UnsupportedOperationError

            raise UnsupportedOperationError(f"{self._source}.to_onnx needs the onnx package: pip install onnx") from exc
        return write_onnx(self, path, *shapes, opset_version=opset_version)

    def forward(self, *inputs: Any) -> Any:
        from neurenix_core.graph.compile.compiler import compile as compile_graph

        key = str(self.device)
        compiled = self._compiled.get(key)
        if compiled is None:
            compiled = compile_graph(self.symbolic_graph() if self._values is None else self, device=self.device)
            self._compiled[key] = compiled
        return compiled(*inputs)

    def _as_input(self, value: Any) -> Any:
        return value  # the compiled model places NumPy input itself, keeping integer dtypes

    def to(self, device: Any) -> Module:
        self._compiled.clear()
        return super().to(device)

    def load_state_dict(self, state: Any, strict: bool = True) -> None:
        self._compiled.clear()
        super().load_state_dict(state, strict)

    def extra_repr(self) -> str:
        inputs = ", ".join(f"{s.name}{s.display_shape}" for s in self._graph.inputs)  # None marks a dynamic axis
        built = f"{len(self._graph.nodes)} nodes" if self._values is None else f"built per value of {', '.join(self.value_inputs)}"
        return f"{self._source}, {built}, inputs=[{inputs}], outputs={len(self.output_names)}"

    def __repr__(self) -> str:
        return f"GraphModule({self.extra_repr()})"
