"""XLA:CPU as a host runtime for ``cpu:0`` (``runtime="xla"``, API 1.2).

The tpu device's JAX lowering (``lowering.lower_graph``: the whole opset, fused into one XLA
program) compiled for **JAX's CPU device** (``jax.devices("cpu")[0]``, never the default backend:
on a Cloud TPU VM that is the TPU, and ``cpu:0`` must run on the CPU). This is XLA:CPU doing what
it is for, not TPU emulation: the device stays ``cpu:0``.

* Precision: the lowering's ``fp32`` mode (float32 weights and activations, every dot and
  convolution at ``Precision.HIGHEST``). XLA:CPU computes float32 as float32 anyway (no bf16 or
  TF32 passes on the CPU); HIGHEST only makes that explicit.
* Compiled once per graph, ahead of time (``jit(...).lower(...).compile()``), inside
  ``compile``: the first call runs, it does not compile.
* Threads: XLA:CPU's intra-op thread pool is created once per process when JAX starts its CPU
  client (sized by XLA to the schedulable CPUs) and cannot be set per model, so ``threads=`` is
  not applied and ``HostModel.threads`` is None (JAX does not expose the pool's size); the
  summary says so.
* 64-bit values: the lowering keeps int64 as int64 (the tpu backend enables ``jax_enable_x64``
  process-wide). Here the scoped ``jax.enable_x64(True)`` is entered around tracing, compiling
  and each call instead, so compiling a cpu:0 model never changes the user's JAX defaults.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any, Final

import numpy as np

from neurenix_core.contract import Graph, HostModel, HostOptions, HostRuntime
from neurenix_core.errors import BackendUnavailableError, CompilationError

__all__ = ["XLAHostModel", "XLAHostRuntime"]

_WHO: Final = "host runtime xla (plugin tpu)"


class XLAHostModel(HostModel):
    """One AOT-compiled XLA:CPU executable; its weights live in JAX CPU buffers, put there once."""

    threads = None  # XLA:CPU's pool is process-wide and JAX cannot read its size back

    def __init__(self, executable: Any, leaves: tuple[Any, ...], x64: Callable[[], Any], summary: str) -> None:
        self._executable = executable
        self._leaves = leaves
        self._x64 = x64
        self.summary = summary

    def __call__(self, *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
        # The executable was compiled with 64-bit types on: called without, JAX would turn an
        # int64 input into int32 and refuse it. The scope is per call and per thread.
        with self._x64():
            out = self._executable(self._leaves, *inputs)
        outs = out if isinstance(out, tuple) else (out,)
        # np.asarray of a CPU jax.Array is a read-only view of XLA's buffer; a cpu:0 tensor may
        # be written in place, so each result is copied once into an ordinary NumPy array.
        return tuple(np.array(o) for o in outs)


class XLAHostRuntime(HostRuntime):
    """JAX's CPU client, started once per process."""

    name = "xla"

    def __init__(self, graph_dtypes: Iterable[str]) -> None:
        # The dtypes come from the manifest (plugin.py hands them over): importing plugin.py here
        # would make the two modules import each other.
        jax = _import_jax()
        from neurenix_tpu.optable import LOWERINGS

        self.jax = jax
        self.device = _cpu_device(jax)
        self.version = f"jax {jax.__version__}, jaxlib {_jaxlib_version()}"
        self.graph_ops = frozenset(LOWERINGS)
        self.graph_dtypes = frozenset(graph_dtypes)

    def compile(self, graph: Graph, options: HostOptions) -> XLAHostModel:
        from neurenix_tpu.compile_cache import cache_phrase, use_jax_cache, xla_cache_counts
        from neurenix_tpu.lowering import lower_graph, on_leaves

        use_jax_cache()  # XLA's compiled programs kept in neurenix's compile cache, as for tpu devices
        before = xla_cache_counts()
        if options.precision != "fp32":
            raise CompilationError(f"{_WHO} compiles cpu:0 graphs in fp32, not {options.precision!r}")
        jax = self.jax
        with jax.enable_x64(True):
            lowered = lower_graph(graph, "fp32")  # raises UnsupportedOperationError naming the layer
            leaves, treedef = jax.tree_util.tree_flatten(lowered.params)
            leaves = tuple(jax.device_put(leaves, self.device))
            try:
                executable = jax.jit(on_leaves(lowered.fn, treedef)).lower(leaves, *_input_specs(jax, graph, self.device)).compile()
            except (TypeError, ValueError, RuntimeError) as exc:  # XlaRuntimeError is a RuntimeError
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise CompilationError(f"{_WHO} could not compile the cpu:0 graph: {first}; pass runtime='auto' to use another") from exc
        summary = (f"XLA:CPU (JAX {jax.__version__}) on cpu:0, fp32 (Precision.HIGHEST), {lowered.node_count} layers fused into one "
                   f"program, XLA's process-wide thread pool{_threads_note(options.threads)}")
        phrase = cache_phrase(before)
        summary += f", {phrase}" if phrase else ""
        return XLAHostModel(executable, leaves, lambda: jax.enable_x64(True), summary)


def _import_jax() -> Any:
    try:
        import jax
    except ImportError as exc:
        raise BackendUnavailableError(f"{_WHO}: JAX is not importable ({exc}); pip install jax") from exc
    return jax


def _jaxlib_version() -> str:
    import jaxlib

    return str(getattr(jaxlib, "__version__", "unknown"))


def _cpu_device(jax: Any) -> Any:
    """JAX's first CPU device, refusing to start JAX where that would also claim a TPU."""
    _refuse_claiming_a_tpu(jax)
    try:
        return jax.local_devices(backend="cpu")[0]  # this process's, also under jax.distributed
    except RuntimeError as exc:
        raise BackendUnavailableError(
            f"{_WHO}: JAX has no CPU platform ({exc}); include 'cpu' in JAX_PLATFORMS (e.g. JAX_PLATFORMS=tpu,cpu)"
        ) from exc


def _refuse_claiming_a_tpu(jax: Any) -> None:
    # JAX starts every platform it finds at once, so asking for its CPU device on a TPU VM would
    # open the TPU too: seconds of start-up, and the chips locked against other processes, for a
    # cpu:0 model. Only when JAX has not started yet and JAX_PLATFORMS leaves the choice to it.
    if os.environ.get("JAX_PLATFORMS", "").strip() or _jax_started(jax):
        return
    from neurenix_tpu.probe import scan

    if scan().has_nodes:
        raise BackendUnavailableError(
            f"{_WHO}: a Cloud TPU is attached and starting JAX for cpu:0 would also claim it; set JAX_PLATFORMS=cpu "
            "(a process using cpu:0 only) or JAX_PLATFORMS=tpu,cpu, or use the tpu device first"
        )


def _jax_started(jax: Any) -> bool:
    try:
        from jax._src import xla_bridge
    except ImportError:  # a future JAX moved it: assume not started, the safe answer
        return False
    started = getattr(xla_bridge, "backends_are_initialized", None)
    return bool(started()) if callable(started) else False


def _input_specs(jax: Any, graph: Graph, device: Any) -> list[Any]:
    """The graph inputs as abstract values placed on the CPU device: the executable then puts
    NumPy inputs there itself, whatever JAX's default device is."""
    sharding = jax.sharding.SingleDeviceSharding(device)
    return [jax.ShapeDtypeStruct(tuple(int(d) for d in s.shape), np.dtype(s.dtype), sharding=sharding) for s in graph.inputs]


def _threads_note(threads: int | None) -> str:
    if threads is None:
        return ""
    return f" (threads={threads} not applied: XLA:CPU's pool is fixed at JAX start, not per model)"
