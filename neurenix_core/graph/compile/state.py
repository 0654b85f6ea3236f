"""The state every concern of a compiled model shares (docs/architecture.md): what was compiled
for which input shapes, the plugin parts kept for saving, the placements and summaries reported.

``Compiled`` (compiler.py) is built from one class per concern, each in its own file, all on this
state: ``runners`` (a lowered graph as a callable on the device or cpu:0), ``lowering`` (per-shape
compilation and placement), ``compiler`` (the call path), with saving (``artifact``),
verification (``verification``) and reporting (``report``) as functions of it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from neurenix_core.device import Device
from neurenix_core.graph.ir import Graph, QuantizationPlan
from neurenix_core.graph.opset import _np_dtype as opset_dtype
from neurenix_core.graph.opset.schema import VALUE_KINDS
from neurenix_core.tensor.tensor import Tensor

__all__ = ["CompiledState", "HostValue", "Runner", "part_key"]

#: Runs one compiled shape: backend-native input arrays in, Tensors on the device out.
Runner = Callable[..., tuple[Tensor, ...]]


class HostValue:
    """A result kept in host memory because the device cannot hold its dtype (outputs="host")."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray) -> None:
        self.array = array


class CompiledState:
    """The fields of a compiled model (set once here; the concerns read and fill them)."""

    def __init__(self, graph: Graph, device: Device, backend: Any, record: Any, precision: str | None,
                 plan: QuantizationPlan | None, extra: Mapping[str, Any], *, outputs: str = "device") -> None:
        self.graph = graph
        self.outputs = outputs
        self.device = device
        self.precision = precision
        self.plan = plan
        # A weight-only plan (graph.quantization.weights) its plugin lowers natively, and the
        # summary's line about it (also set where the core runs the dequantized graph instead).
        self.weights: QuantizationPlan | None = None
        self.weights_note: str | None = None
        self.extra = dict(extra)
        self._backend = backend
        self._record = record
        self._runners: dict[tuple[tuple[int, ...], ...], Runner] = {}
        self._summaries: dict[tuple[tuple[int, ...], ...], str] = {}
        self._natives: dict[tuple[tuple[int, ...], ...], Any] = {}
        # One-input models compiled by a plugin, for the first shape compiled: (placement, shape
        # reader or None, input shape, the plugin's entry, array type, dtype reader or None, input
        # dtype), all resolved once (``_set_fast``).
        self._fast: tuple[Any, Callable[[Any], Any] | None, tuple[int, ...], Callable[[Any], Any], type[Any],
                          Callable[[Any], Any] | None, np.dtype[Any] | None] | None = None
        self._eager: Any = None
        # A model with value inputs (GraphModule.value_inputs): graphs are built per shapes and values.
        self._values: Any = None
        self._placements: dict[tuple[tuple[int, ...], ...], Any] = {}
        # Every input in the dtype the model declares (float32 for nn models and most imports;
        # a float16 or float64 model's inputs stay float16 or float64, token ids int64).
        # A sequence / optional input (an ONNX import's) has None: it is passed as it is (list, array or None).
        self._input_dtypes = [None if s.dtype in VALUE_KINDS else opset_dtype(s.dtype) for s in graph.inputs]
        # Shape buckets (graph.buckets): the policy, the padding proof per bucket shape, and per
        # bucket the calls it served (BucketStats); None when the model compiles per shape.
        self._buckets: Any = None
        self._proofs: dict[tuple[tuple[int, ...], ...], Any] = {}
        self._bucket_stats: dict[tuple[tuple[int, ...], ...], Any] = {}
        self._verification: Any = None  # graph.verify.Verification of a quantized compile
        self._host_lines: list[str] = []  # which host runtime runs each cpu:0 graph or segment, and why
        # Compiled artifacts (neurenix_core.deploy): every plugin-compiled model and host-runtime
        # choice by part key (_part_key), so save() finds them; nx.load_compiled fills _restored
        # and _host_pins so the same parts come back without the plugin compiling again.
        self._parts: dict[str, Any] = {}
        self._host_parts: dict[str, str] = {}
        self._restored: dict[str, Any] = {}
        self._host_pins: dict[str, str] = {}
        # Why a runtime= passed in options was chosen, where a library chose it for the user (the
        # summary says that instead of "runtime='torch' asked"): nx.generation on cpu:0.
        self.runtime_reason: str | None = None
        self._bucket_args: tuple[Any, Any] | None = None  # buckets= and pad_values= as given, for the artifact manifest

    @property
    def compiled_shapes(self) -> list[tuple[tuple[int, ...], ...]]:
        return list(self._runners)

    def _tensors(self, natives: tuple[Any, ...]) -> tuple[Any, ...]:
        """Natives as Tensors on the device; a sequence as a list of them, an empty optional as None."""
        from neurenix_core.tensor.tensor import wrap_on

        p = self._backend.placement(self.device.index)

        def one(n: Any) -> Any:
            if isinstance(n, HostValue):  # a result in a dtype the device cannot hold (outputs="host" only)
                return n.array
            return None if n is None else [one(e) for e in n] if isinstance(n, list) else wrap_on(n, p)

        return tuple(one(n) for n in natives)

    def _host_only(self, name: str, array: np.ndarray) -> Any:
        """An output the device cannot hold (an int4 result on cuda ...): delivered from host
        memory with outputs="host"; with outputs="device" there is no Tensor to return."""
        from neurenix_core.errors import UnsupportedDTypeError

        if self.outputs != "host":
            raise UnsupportedDTypeError(
                f"{self.device}: output {name!r} is {array.dtype}, which the device (plugin {self._record.name}) cannot hold; "
                "compile with outputs='host' to receive it as a NumPy array")
        return HostValue(array)


def part_key(graph: Graph) -> str:
    """One compiled part of a model (the whole graph or a segment) at its input shapes: its input
    names, shapes and dtypes and its outputs. Unique within one model; the artifact's index."""
    inputs = ",".join(f"{s.name}:{'x'.join(map(str, s.shape))}:{s.dtype}" for s in graph.inputs)
    return f"{inputs}->{','.join(graph.outputs)}"
