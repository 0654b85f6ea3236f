"""Host runtimes: a plugin's runtime offered to compile graphs for ``cpu:0`` (API 1.2).

OpenVINO's CPU device, LiteRT with XNNPACK, XLA:CPU and PyTorch CPU are production CPU runtimes,
not only the way their plugins emulate an accelerator. A plugin whose runtime runs on the host
declares ``Capabilities.host_runtime`` (the runtime's name, e.g. ``"openvino"``) and implements
the ``neurenix_host_runtime`` hook, which returns a :class:`HostRuntime`. The core then may
compile a ``cpu:0`` model, or a fallback segment of another device's model, on it
(``neurenix_core.graph.compile.host_select`` chooses among the installed ones, the NumPy interpreter
being the last resort). ``cpu:0`` stays the CPU device: nothing here is emulation.

Contract for implementers:

* ``HostRuntime.compile(graph, options)`` gets a ``neurenix_core.graph.ir.Graph`` with static
  input shapes, holding only ops in ``graph_ops`` on values of ``graph_dtypes``, and returns a
  :class:`HostModel`: NumPy arrays in (the graph inputs' dtypes, C-contiguous), a tuple of NumPy
  arrays out (one per graph output, the opset's dtypes and shapes). fp32 results must match the
  core's float64 reference within 1e-5 relative: set the runtime's precision explicitly (OpenVINO
  defaults to bf16 on CPUs that have it).
* ``options.threads`` (None: the runtime's default) is applied where the runtime allows it per
  model; ``HostModel.threads`` reads back what the runtime uses (None where it cannot say).
* ``weight_schemes``: the weight-only quantization schemes (``"int4-weights"``, ...:
  ``neurenix_core.graph.quantization.weights``) the runtime computes with its own integer-weight
  kernels. A model quantized so gets the core's plan in ``options.weights`` (its ``weights`` map:
  the planned linear nodes' scales, ``weight_codes`` gives the integer codes); each planned layer
  must compute with exactly those dequantized weights. A runtime that lists none is not offered
  such a model (the core runs it dequantized elsewhere).
* ``quantized_precisions`` (API 1.5): the static quantization precisions (``"int8"``,
  ``"int16"``) the runtime lowers with its own integer kernels. A model compiled with such a
  precision for ``cpu:0`` gets the core's static plan in ``options.plan`` (``options.precision``
  names it): every scale and zero point is the core's, and the runtime must compute what the
  core's integer reference (``run_quantized``) computes up to its own rounding. The core checks
  that on the measurement inputs with the same bound as ``Compiled.verify`` (device vs integer
  reference) and skips a runtime outside it. A runtime that lists none is never offered a
  quantized model (the core's integer reference runs it).
* Raise ``UnsupportedOperationError`` for a graph the runtime cannot take and
  ``BackendUnavailableError`` when the runtime is not installed or cannot start; the core records
  the reason and uses the next runtime. Import the framework inside the hook or ``compile``,
  never at module import.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np

    from neurenix_core.graph.ir import Graph
    from neurenix_core.graph.ir.host_state import StatefulModel, StateSpec

__all__ = ["HostModel", "HostOptions", "HostRuntime"]


@dataclass(frozen=True)
class HostOptions:
    """What the core asks of a host compile: fp32, or int8/int16 with the core's static plan;
    threads; and the weight-only quantization plan where the runtime lowers its scheme."""

    #: "fp32", or the static plan's precision ("int8", "int16") when ``plan`` is set.
    precision: str = "fp32"
    threads: int | None = None
    #: A weight-only quantization plan (``is_weight_plan``) for a runtime listing its scheme in
    #: ``HostRuntime.weight_schemes``; None: float weights.
    weights: Any = None
    #: A static int8/int16 quantization plan (``QuantizationPlan``, not dynamic) for a runtime
    #: listing ``precision`` in ``HostRuntime.quantized_precisions`` (API 1.5); None: float.
    plan: Any = None


class HostModel(ABC):
    """A graph compiled by a host runtime for ``cpu:0``."""

    #: One line for ``compiled.summary``: the runtime, its device or delegate, precision, threads.
    summary: str = ""
    #: Threads the runtime uses for this model, read back (None where it cannot say).
    threads: int | None = None

    @abstractmethod
    def __call__(self, *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
        """Run on host arrays; one host array per graph output. The inputs are the caller's
        arrays, not copies: read them during the call, never write them."""

    def call_one(self, x: np.ndarray) -> np.ndarray:
        """The output of a one-input, one-output graph: ``self(x)[0]``. ``nx.compile`` calls this on
        its per-call hot path for such graphs, so a runtime may override it with a leaner call (no
        tuples, no loops over inputs); the result must be the same fresh array ``__call__`` gives."""
        return self(x)[0]


class HostRuntime(ABC):
    """A CPU runtime a plugin offers for ``cpu:0`` (returned by ``neurenix_host_runtime``)."""

    #: Short lower-case name users pass as ``runtime=`` (``"openvino"``, ``"litert"``, ``"xla"``, ``"torch"``).
    name: str = ""
    #: The runtime's own version (part of the compile-choice cache key).
    version: str = ""
    #: Graph ops (``neurenix_core.graph.opset`` names) and value dtypes ``compile`` lowers.
    graph_ops: frozenset[str] = frozenset()
    graph_dtypes: frozenset[str] = frozenset({"float32"})
    #: Weight-only quantization schemes ``compile`` lowers natively (``options.weights``).
    weight_schemes: frozenset[str] = frozenset()
    #: Static quantization precisions (``"int8"``, ``"int16"``) ``compile`` lowers with the
    #: core's plan (``options.plan``) on the runtime's integer kernels (API 1.5).
    quantized_precisions: frozenset[str] = frozenset()
    #: Whether ``compile_stateful`` keeps a step graph's cache between calls (API 1.7, host_state.py).
    keeps_state: bool = False
    #: Whether ``compile_stateful(..., folder=)`` writes the model into ``folder`` and
    #: ``load_stateful`` compiles it from there (API 1.8, host_state.py).
    stores_state_models: bool = False

    @abstractmethod
    def compile(self, graph: Graph, options: HostOptions) -> HostModel:
        """Compile ``graph`` (static shapes) for the host CPU."""

    def compile_stateful(self, graph: Graph, other: Graph, states: tuple[StateSpec, ...], options: HostOptions,
                         folder: Path | None = None) -> StatefulModel:
        """One model for ``graph`` at every input size, keeping ``states`` between calls
        (``neurenix_core.graph.ir.host_state`` has the contract); for runtimes with ``keeps_state``.
        ``folder`` (given only to runtimes with ``stores_state_models``): an empty folder to write
        the model into, for ``load_stateful``."""
        from neurenix_core.errors import UnsupportedOperationError

        raise UnsupportedOperationError(f"host runtime {self.name} keeps no state between calls; "
                                        "generate with cache='fixed' (the cache on the host, fed to every step)")

    def load_stateful(self, folder: Path, options: HostOptions) -> StatefulModel:
        """The model ``compile_stateful(..., folder=folder)`` wrote, compiled with ``options``
        (threads: the weights' scheme is the one it was written with); for runtimes with
        ``stores_state_models``. Raises ``ModelFormatError`` where the folder cannot be read."""
        from neurenix_core.errors import UnsupportedOperationError

        raise UnsupportedOperationError(f"host runtime {self.name} stores no stateful models; prepare the model again")

    def covers(self, graph: Graph) -> str | None:
        """Why this runtime cannot take ``graph`` (None: it can): an op or a value dtype it lacks."""
        from neurenix_core.graph.ir.shapes import infer_values

        missing = sorted({n.op for n in graph.nodes if n.op not in self.graph_ops})
        if missing:
            return f"{self.name} does not lower op(s) {', '.join(missing[:4])}"
        dtypes = sorted({str(v.dtype) for v in infer_values(graph).values() if str(v.dtype) not in self.graph_dtypes})
        return f"{self.name} does not take {', '.join(dtypes)} values" if dtypes else None

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version}
