"""Compiled models on TPU: one jitted program per (graph, precision, device set), compiled by XLA
once per input shape (or per batch bucket), optionally data parallel over every local core.

A :class:`Program` owns the device-resident weights and the ``jax.jit`` function; the core asks
for a :class:`TPUCompiledModel` per input shape and they all share the program, so the XLA
executable cache (``Program.compiles``) counts real compilations.

The jitted function takes the weights as one flat tuple (``Program.leaves``), not the per-layer
dict the lowering builds: jit flattens its arguments on every call, and a tuple of arrays is the
cheapest pytree to flatten (a dict of dicts sorts its keys each time). ``Program.params`` keeps the
same device arrays by layer name for inspection.
"""

from __future__ import annotations

import bisect
import warnings
import weakref
from collections.abc import Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Final

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from neurenix_core.contract import CompiledModel, Device, Graph, call_runtime, user_stacklevel
from neurenix_core.errors import CompilationError, NeurenixWarning
from neurenix_tpu.compile_cache import cache_phrase, cached_lowering, use_jax_cache, xla_cache_counts
from neurenix_tpu.lowering import Lowered, lower_graph, on_leaves, resolve_mode

if TYPE_CHECKING:
    from neurenix_tpu.backend import JaxTPUBackend

__all__ = ["RECOMPILE_WARN_AFTER", "Program", "RecompilationWarning", "TPUCompiledModel", "bucket_for", "compile_graph"]

#: Distinct input shapes after which an unbucketed program warns that it keeps recompiling.
RECOMPILE_WARN_AFTER: Final = 4


class RecompilationWarning(NeurenixWarning):
    """A compiled model keeps meeting new input shapes, and XLA recompiles for each one."""


def bucket_for(batch: int, buckets: Sequence[int], multiple: int = 1) -> int:
    """The padded batch size: the smallest bucket >= batch (beyond the largest bucket, the next
    multiple of it), rounded up to ``multiple`` (the device count when data parallel)."""
    if buckets:
        i = bisect.bisect_left(buckets, batch)
        size = buckets[i] if i < len(buckets) else -(-batch // buckets[-1]) * buckets[-1]
    else:
        size = batch
    return -(-size // multiple) * multiple


def _structure_key(graph: Graph) -> str:
    # The fingerprint includes input shapes; one program serves every shape, so hash it rank-only.
    return graph.with_input_shapes(*[(0,) * len(s.shape) for s in graph.inputs]).fingerprint()


def _param_bytes(params: Mapping[str, Mapping[str, np.ndarray]]) -> int:
    return sum(int(a.nbytes) for p in params.values() for a in p.values())


class Program:
    """A lowered graph placed on one device (or replicated over a data-parallel mesh)."""

    def __init__(self, backend: JaxTPUBackend, lowered: Lowered, index: int, parallel: int, buckets: tuple[int, ...]) -> None:
        self.backend = backend
        self.lowered = lowered
        self.index = index
        self.parallel = parallel
        self.buckets = buckets
        self.device = backend._native_device(index)
        self.shapes: set[tuple[tuple[int, ...], ...]] = set()
        # Argument signatures compiled ahead of the first call (_warm_up): jit's own cache counts
        # a signature only once it is called.
        self.ahead: set[tuple[Any, ...]] = set()
        self._warned = False
        self.indices = tuple(range(index, index + parallel)) if parallel > 1 else (index,)
        nbytes = _param_bytes(lowered.params)
        for i in self.indices:  # refuse before allocating, like any tensor creation
            backend.memory.check(i, nbytes)
        host_leaves, treedef = jax.tree_util.tree_flatten(lowered.params)
        fn = on_leaves(lowered.fn, treedef)
        if parallel > 1:
            mesh = Mesh(np.array([backend._native_device(i) for i in self.indices]), ("data",))
            replicated, self.batch_sharding = NamedSharding(mesh, PartitionSpec()), NamedSharding(mesh, PartitionSpec("data"))
            self.leaves: tuple[Any, ...] = tuple(jax.device_put(host_leaves, replicated))
            self.jitted = jax.jit(fn, in_shardings=None, out_shardings=self.batch_sharding)
        else:
            self.batch_sharding = None
            self.leaves = tuple(jax.device_put(host_leaves, self.device))
            self.jitted = jax.jit(fn)
        # The same device arrays by layer name (``params["0"]["weight"]``): for inspection only.
        self.params: dict[str, dict[str, Any]] = jax.tree_util.tree_unflatten(treedef, self.leaves)
        for i in self.indices:
            backend.memory.charge(i, nbytes)
        weakref.finalize(self, _release, backend.memory, self.indices, nbytes)

    @property
    def compiles(self) -> int:
        """XLA executables built so far for this program (one per distinct padded input shape):
        those compiled ahead by ``nx.compile`` or by a call, whichever count is larger (a
        signature compiled ahead enters jit's cache on its first call, without compiling again)."""
        return max(int(self.jitted._cache_size()), len(self.ahead))

    def note_shapes(self, shapes: tuple[tuple[int, ...], ...]) -> None:
        self.shapes.add(shapes)
        if self.buckets or self._warned or len(self.shapes) < RECOMPILE_WARN_AFTER:
            return
        self._warned = True
        batches = sorted({s[0][0] for s in self.shapes if s and s[0]})
        warnings.warn(
            f"tpu:{self.index}: this compiled model has been compiled for {len(self.shapes)} input shapes "
            f"(batch sizes {batches}); XLA recompiles for every new shape. Pad to fixed sizes with "
            f"nx.compile(model, device='tpu:{self.index}', buckets=True) (the core's shape buckets: powers of two on every "
            f"dynamic axis, padding proven safe per graph; docs/shape-buckets.md) or this plugin's batch-only "
            f"batch_buckets=(1, 8, 32, 128), so each bucket compiles once.",
            RecompilationWarning,
            stacklevel=user_stacklevel(),
        )

    def padded_batch(self, batch: int) -> int:
        return bucket_for(batch, self.buckets, self.parallel)


def _release(memory: Any, indices: tuple[int, ...], nbytes: int) -> None:
    for i in indices:
        memory.release(i, nbytes)


def _pad(x: Any, size: int) -> Any:
    extra = size - x.shape[0]
    return x if extra == 0 else jnp.pad(x, [(0, extra)] + [(0, 0)] * (x.ndim - 1))


class TPUCompiledModel(CompiledModel):
    """The model for one input shape; ``_run`` takes and returns JAX arrays on ``tpu:index``.

    Called directly (``TPUBackend().compile_graph(...)``): JAX arrays in, JAX arrays out, as
    ``jax.jit`` does; anything else follows the compiled-model rule
    (``neurenix_core.graph.compile.inputs``) and gives tpu tensors.
    """

    def __init__(self, program: Program, input_shapes: tuple[tuple[int, ...], ...], summary: str, precision: str) -> None:
        self.program = program
        self.input_shapes = input_shapes
        self.summary = summary
        self.precision = precision
        self.batch = input_shapes[0][0] if input_shapes and input_shapes[0] else 1
        self.padded = program.padded_batch(self.batch) if input_shapes and input_shapes[0] else self.batch
        if program.parallel == 1 and self.padded == self.batch:
            # The common case goes straight into jit's C++ dispatch: no Python between the core and XLA.
            self._run = partial(program.jitted, program.leaves)  # type: ignore[method-assign]
        self._device = Device("tpu", program.index)
        self._array_type = program.backend.placement(program.index).array_type

    @property
    def compiles(self) -> int:
        return self.program.compiles

    def __call__(self, *inputs: Any) -> Any:
        native = self._array_type
        # jax.Arrays in, jax.Arrays out, as jax.jit does (call_runtime's first rule, inlined; one
        # input, the common case, without a generator).
        if len(inputs) == 1:
            if type(inputs[0]) is native:
                return self._run(inputs[0])
        elif inputs and all(type(a) is native for a in inputs):
            return self._run(*inputs)
        return call_runtime(self._run, inputs, self._device, self.program.backend)

    def _run(self, *inputs: Any) -> Any:
        p = self.program
        xs = [_pad(x, self.padded) for x in inputs] if self.padded != self.batch else list(inputs)
        if p.batch_sharding is not None:
            xs = [jax.device_put(x, p.batch_sharding) for x in xs]  # scatter the batch over the cores
        out = p.jitted(p.leaves, *xs)
        return self._finish(out)

    def _finish(self, out: Any) -> Any:
        if isinstance(out, tuple):
            return tuple(self._finish(o) for o in out)
        if self.padded != self.batch:
            out = out[: self.batch]
        if self.program.batch_sharding is not None:
            out = jax.device_put(out, self.program.device)  # gather: the result lives on tpu:index
        return out


def _options(options: Any) -> tuple[int, str | None, tuple[int, ...], int]:
    from neurenix_core.contract import as_device

    dev = as_device(options.device)
    extra = dict(getattr(options, "extra", {}) or {})
    buckets = extra.get("batch_buckets") or ()
    if buckets and (not all(isinstance(b, int) and b > 0 for b in buckets)):
        raise CompilationError(f"{dev}: batch_buckets must be positive ints, got {buckets!r}")
    parallel = extra.get("data_parallel", False)
    return dev.index, options.precision, tuple(sorted(set(buckets))), parallel


def _parallel_count(backend: JaxTPUBackend, index: int, parallel: Any) -> int:
    if parallel is True:
        return backend.device_count() - index
    if parallel in (False, None, 0, 1):
        return 1
    if not isinstance(parallel, int) or parallel < 1 or index + parallel > backend.device_count():
        raise CompilationError(
            f"tpu:{index}: data_parallel={parallel!r} needs that many devices from tpu:{index}; "
            f"{backend.device_count()} exist (use data_parallel=True for all of them)"
        )
    return parallel


def _summary(backend: JaxTPUBackend, program: Program, default: bool) -> str:
    mode, low = program.lowered.mode, program.lowered
    where = f"{backend.device_info(program.index)['name']} tpu:{program.index}"
    prec = f"precision {mode.name} ({mode.note}"
    prec += "; the TPU default: pass precision='fp32' for float32)" if default else "; as requested)"
    parts = [
        f"JAX/XLA jit on {where}" + (" [emulated on the host CPU]" if backend.emulated else ""),
        prec,
        f"{low.node_count} layers fused into one XLA program",
    ]
    if low.conv_layout:
        parts.append("convolutions in NHWC/HWIO")
    if program.buckets:
        parts.append(f"batch padded to buckets {list(program.buckets)}")
    if program.parallel > 1:
        parts.append(f"data parallel over tpu:{program.indices[0]}..tpu:{program.indices[-1]} ({program.parallel} devices)")
    return ", ".join(parts)


def compile_graph(backend: JaxTPUBackend, graph: Graph, options: Any) -> TPUCompiledModel:
    """The ``neurenix_compile`` hook body: lower (cached per structure), then compile for the shape."""
    index, precision, buckets, parallel_opt = _options(options)
    use_jax_cache()  # before the first XLA compile: JAX reads the folder once
    plan = getattr(options, "quantization", None)
    mode, default = resolve_mode(precision, plan)
    parallel = _parallel_count(backend, index, parallel_opt)
    # The plan is part of the program; nx.compile keeps it alive as long as the program.
    key = (_structure_key(graph), mode.name, id(plan), index, parallel, buckets)
    program = backend.compile_cache.get(key)
    stored = ""
    if program is None:
        lowered, stored = _lowering(backend, graph, precision, plan, index, parallel, buckets)
        program = Program(backend, lowered, index, parallel, buckets)
        backend.compile_cache[key] = program
    if dict(getattr(options, "extra", {}) or {}).get("shape_buckets"):
        program._warned = True  # nx.compile's buckets bound the shapes already: no recompilation advice
    shapes = tuple(tuple(s.shape) for s in graph.inputs)
    model = TPUCompiledModel(program, shapes, _summary(backend, program, default), mode.name)
    model.input_dtypes = tuple(np.dtype(s.dtype) for s in graph.inputs)  # what compiled.save exports for (artifact.py)
    padded = tuple((model.padded, *s[1:]) if s else s for s in shapes)
    program.note_shapes(padded)
    before = xla_cache_counts()
    _warm_up(backend, model, graph)
    phrase = cache_phrase(before)
    model.summary += "".join(f", {p}" for p in (stored, phrase) if p)
    return model


def _lowering(backend: JaxTPUBackend, graph: Graph, precision: str | None, plan: Any, index: int, parallel: int,
              buckets: tuple[int, ...]) -> tuple[Lowered, str]:
    """The lowering, through the persistent cache (compile_cache.py) for one-device programs of
    static shapes; with the cache's phrase for the summary."""
    shapes = [tuple(s.shape) for s in graph.inputs]
    if parallel > 1 or graph.dynamic or not shapes or not all(shapes) or any(not s for s in shapes):
        return lower_graph(graph, precision, plan), ""
    padded = [(bucket_for(s[0], buckets, parallel), *s[1:]) for s in shapes]
    result = cached_lowering(backend, graph, precision, plan, padded, index)
    if result.state == "off":
        return result.value, ""
    return result.value, result.line().replace("compile cache:", "compile cache (lowering):", 1)


def _warm_up(backend: JaxTPUBackend, model: TPUCompiledModel, graph: Graph) -> None:
    # Compile now, inside nx.compile's first call for this shape, so lowering errors surface here
    # (naming the layer) and the first real call is not the slow one. Compiled ahead of time
    # (lower + compile, nothing executed): the first call then finds the executable in jit's
    # caches and runs the model once, not twice. The arguments are the ones _run passes (padded,
    # scattered over the cores when data parallel), so the call's signature is the one compiled.
    p = model.program
    xs = [backend._from_host(np.zeros(s.shape, dtype=np.dtype(s.dtype)), p.index) for s in graph.inputs]
    if model.padded != model.batch:  # as _run pads
        xs = [_pad(x, model.padded) for x in xs]
    if p.batch_sharding is not None:
        xs = [jax.device_put(x, p.batch_sharding) for x in xs]
    signature = tuple((tuple(x.shape), str(x.dtype)) for x in xs)
    if signature not in p.ahead:
        p.jitted.lower(p.leaves, *xs).compile()
        p.ahead.add(signature)
