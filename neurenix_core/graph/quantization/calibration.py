"""Calibration: run the float reference interpreter over a data iterable and record each value's
range (``minmax``; ``percentile`` to clip outliers; ``histogram``: the range of least quantization
error, ``histogram.py``), with a progress bar; the result is a
:class:`~neurenix_core.graph.ir.QuantizationPlan` that every backend lowers without recomputing it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from neurenix_core.errors import QuantizationError
from neurenix_core.graph.ir import Graph, Node, QuantizationPlan, QuantParams
from neurenix_core.graph.ir.qmath import (
    activation_params,
    constant_weight_axis,
    fixed_output_params,
    int_range,
    passes_through,
    weight_params,
)
from neurenix_core.graph.quantization.histogram import Histogram, best_range
from neurenix_core.graph.reference.run import run_graph, specialized

__all__ = ["METHODS", "batch_arrays", "calibrate", "dynamic_plan", "plan_summary"]


#: The calibration methods :func:`calibrate` takes.
METHODS = ("minmax", "percentile", "histogram")


class _Observer:
    """Running min/max per value, plus a bounded sample of values for percentiles or a histogram."""

    def __init__(self, method: str, sample_per_batch: int = 65536, seed: int = 0) -> None:
        self.method = method
        self.lo: dict[str, float] = {}
        self.hi: dict[str, float] = {}
        self.samples: dict[str, list[np.ndarray]] = defaultdict(list)
        self.histograms: dict[str, Histogram] = defaultdict(Histogram)
        self.k = sample_per_batch
        self.rng = np.random.default_rng(seed)

    def observe(self, name: str, value: np.ndarray, where: str) -> None:
        flat = np.asarray(value, np.float64).ravel()
        if not np.all(np.isfinite(flat)):
            raise QuantizationError(f"calibration: {where} produced NaN or inf in value {name!r}; the model or its data overflow")
        self.lo[name] = min(self.lo.get(name, np.inf), float(flat.min()))
        self.hi[name] = max(self.hi.get(name, -np.inf), float(flat.max()))
        if self.method == "percentile":
            self.samples[name].append(flat if flat.size <= self.k else self.rng.choice(flat, self.k, replace=False))
        elif self.method == "histogram":
            self.histograms[name].add(flat)

    def range(self, name: str, percentile: float, bits: int) -> tuple[float, float]:
        if self.method == "minmax":
            return self.lo[name], self.hi[name]
        if self.method == "histogram":
            return best_range(self.histograms[name], bits)
        data = np.concatenate(self.samples[name])
        return float(np.percentile(data, 100.0 - percentile)), float(np.percentile(data, percentile))


def batch_arrays(batch: Any, n_inputs: int, index: int) -> tuple[np.ndarray, ...]:
    """Calibration batch ``index`` (an array or Tensor, or a tuple of them for a multi-input model)
    as host arrays in their own dtypes (token ids stay integers; verification runs them so)."""
    items = tuple(batch) if isinstance(batch, (tuple, list)) and n_inputs > 1 else (batch,)
    if len(items) != n_inputs:
        raise QuantizationError(f"calibration batch {index} has {len(items)} input(s), the model takes {n_inputs}")
    return tuple(np.asarray(x.numpy() if hasattr(x, "numpy") and not isinstance(x, np.ndarray) else x) for x in items)


def _as_inputs(batch: Any, n_inputs: int, index: int) -> tuple[np.ndarray, ...]:
    out = []
    for x in batch_arrays(batch, n_inputs, index):
        arr = np.asarray(x, np.float64)
        if not np.all(np.isfinite(arr)):
            raise QuantizationError(
                f"calibration batch {index} contains NaN or inf; clean the data (np.nan_to_num) or drop that batch. Nothing was quantized"
            )
        out.append(arr)
    return tuple(out)


def _progress(data: Iterable[Any], enabled: bool) -> Iterable[Any]:
    """``data`` under a "calibrating" bar on stderr, on a terminal only (neurenix_core/_log.py):
    piped, nothing is written, not even the line rich ends a bar with on stdout."""
    from neurenix_core._log import progress

    bar = progress("quantization") if enabled else None
    if bar is None:
        return data
    total = len(data) if hasattr(data, "__len__") else None  # type: ignore[arg-type]
    return _tracked(bar, data, total)


def _tracked(bar: Any, data: Iterable[Any], total: int | None) -> Iterator[Any]:
    with bar:
        yield from bar.track(data, total=total, description="calibrating")


def _graph_of(model: Any) -> Graph:
    if isinstance(model, Graph):
        return model
    to_graph = getattr(model, "to_graph", None)
    if to_graph is None:
        raise QuantizationError(f"calibrate expects a neurenix_core.nn Module or a Graph, got {type(model).__name__}")
    return to_graph()


def calibrate(
    model: Any,
    data: Iterable[Any],
    *,
    bits: int = 8,
    method: str = "minmax",
    percentile: float = 99.99,
    progress: bool = True,
) -> QuantizationPlan:
    """Static quantization parameters for ``model`` (a Module or Graph) from ``data``.

    ``data`` yields batches: an array/Tensor per batch, or a tuple of them for a multi-input
    model. Returns a :class:`QuantizationPlan` keyed by the value and node names of ``model``'s
    graph (fold batch norms first with :func:`fold_batch_norm` if the backend will).
    """
    if method not in METHODS:
        raise QuantizationError(f"calibration method must be one of {', '.join(map(repr, METHODS))}, got {method!r}")
    if not 50.0 < percentile <= 100.0:
        raise QuantizationError(f"percentile must be in (50, 100], got {percentile}")
    int_range(bits)

    graph = _graph_of(model)
    obs = _Observer(method)
    constants = {n.output for n in graph.nodes if n.op == "constant"}
    batches = 0
    shapes: dict[str, tuple[int, ...]] = {}
    for i, batch in enumerate(_progress(data, progress)):
        inputs = _as_inputs(batch, len(graph.inputs), i)
        values = run_graph(graph, *inputs, return_values=True)
        shapes = {name: np.shape(value) for name, value in values.items()}
        # A dynamic graph at these shapes folds what the sizes built (the class token expanded
        # to the batch): constants there too, as in the graph nx.compile lowers.
        folded = {n.output for n in specialized(graph, inputs).nodes if n.op == "constant"} if graph.dynamic else set()
        for name, value in values.items():
            # Activations are the float values computed from the inputs; constants stay float
            # (they feed float ops), integer and bool values (ids, masks) are not quantized.
            if name not in constants and name not in folded and np.asarray(value).dtype.kind == "f":
                obs.observe(name, value, f"batch {i}")
        batches += 1
    if batches == 0:
        raise QuantizationError("calibration data is empty: pass at least one representative input batch")
    from neurenix_core._log import logger

    logger("quantization").debug("calibrated %d value range(s) on %d batch(es) (%s, int%d)", len(obs.lo), batches, method, bits)
    acts = {name: activation_params(*obs.range(name, percentile, bits), bits=bits) for name in obs.lo}
    _tie_parameters(graph, acts, shapes)
    weights = {n.name: weight_params(np.asarray(n.params["weight"])) for n in graph.nodes if n.op in ("linear", "conv2d")}
    weights.update(_matmul_weights(graph))
    return QuantizationPlan(bits=bits, activations=acts, weights=weights, method=method, dynamic=False)


def _matmul_weights(graph: Graph) -> dict[str, QuantParams]:
    """Per-channel parameters for the constant right-hand side of matmul/gemm nodes (fully
    connected layers as ONNX and torch.export write them), keyed by the node's name."""
    producers = {n.output: n for n in graph.nodes}
    out = {}
    for n in graph.nodes:
        axis = constant_weight_axis(n, producers)
        if axis is not None:
            out[n.name] = weight_params(np.asarray(producers[n.inputs[1]].params["value"]), axis)
    return out


#: Producers whose only consumer, a ReLU, an integer runtime fuses into them (TFLite's converter
#: does for these, and writes the ReLU's output parameters for the fused op): calibration gives
#: them the ReLU's parameters, so the integer reference rounds once, as the fused kernel does.
#: A residual ``add`` then ReLU rounded twice was up to 9 steps off the edgetpu writer in a ResNet.
RELU_FUSABLE = frozenset({"linear", "conv2d", "add", "mul", "sub"})


def _tie_parameters(graph: Graph, acts: dict[str, QuantParams], shapes: dict[str, tuple[int, ...]]) -> None:
    """Make the plan what integer kernels need: a linear/conv/add/mul/sub followed only by ReLU takes
    the ReLU's output parameters (the fused ReLU is the clamp at the zero point), and pass-through
    ops (pooling, flatten, dropout) keep their input's parameters, softmax/sigmoid/tanh take
    TFLite's fixed output parameters (``qmath.fixed_output_params``). A global average pool keeps
    its own observed parameters: it is TFLite's MEAN, which requantizes (``qmath.integer_mean``)."""
    consumers: dict[str, list[Node]] = defaultdict(list)
    for n in graph.nodes:
        for i in n.inputs:
            consumers[i].append(n)
    producer = {n.output: n for n in graph.nodes}
    for n in graph.nodes:
        if n.op == "relu":
            src = producer.get(n.inputs[0])
            if src is not None and src.op in RELU_FUSABLE and len(consumers[src.output]) == 1 and src.output not in graph.outputs:
                acts[src.output] = acts[n.output]
    for n in graph.nodes:
        if n.inputs and n.inputs[0] in acts and passes_through(n, shapes.get(n.inputs[0])):
            acts[n.output] = acts[n.inputs[0]]
        elif n.output in acts and (fixed := fixed_output_params(n.op, acts[n.output].bits)) is not None:
            acts[n.output] = fixed  # softmax, sigmoid, tanh: TFLite's fixed output parameters


def dynamic_plan(model: Any) -> QuantizationPlan:
    """Dynamic quantization: int8 per-channel Linear weights; activations quantized at run time."""
    graph = _graph_of(model)
    weights = {n.name: weight_params(np.asarray(n.params["weight"])) for n in graph.nodes if n.op == "linear"}
    if not weights:
        raise QuantizationError("dynamic quantization quantizes Linear weights, and this model has no Linear layer")
    return QuantizationPlan(bits=8, activations={}, weights=weights, method="dynamic", dynamic=True)


def plan_summary(plan: QuantizationPlan) -> str:
    kind = "dynamic" if plan.dynamic else f"static {plan.method}"
    return f"int{plan.bits} {kind}: {len(plan.weights)} weight tensors, {len(plan.activations)} activation ranges"
