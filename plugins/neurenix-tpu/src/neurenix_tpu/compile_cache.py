"""The tpu plugin's piece of the persistent compile cache (``neurenix_core.graph.compile.cache``).

Two layers. :func:`cached_lowering` keeps neurenix's lowering as a serialized ``jax.export``
module (StableHLO, the weights its first argument) with the weights in TPU layout: a later process
traces nothing (``jax.jit`` of the module's call lowers in milliseconds). The module is exported
for one padded input shape; the lowered function dispatches on the shapes it is traced for, so a
program asked for another shape lowers the graph then, as without the cache.

XLA's compile is the expensive step of a TPU compile, and JAX has a persistent cache for it:
:func:`use_jax_cache` points ``jax_compilation_cache_dir`` at a folder inside neurenix's compile
cache (counted against its size limit and evicted with it), with the minimum compile time and
entry size set to zero so that small models are kept too (JAX's defaults keep only compiles over
a second). JAX's cache key covers the program (StableHLO), the compile options, the jaxlib
version and the device kind, so a changed model, precision or shape is a miss by construction.

A folder the user already set (``JAX_COMPILATION_CACHE_DIR`` or ``jax.config.update``) is kept:
that user manages their own cache. ``NEURENIX_COMPILE_CACHE=0`` leaves JAX's settings alone.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from neurenix_core.contract import Graph, QuantizationPlan, compile_cache

if TYPE_CHECKING:
    from neurenix_tpu.lowering import Lowered

__all__ = ["cache_phrase", "cached_lowering", "jax_cache_state", "use_jax_cache", "xla_cache_counts"]

#: Name of the runtime folder inside neurenix's compile cache.
FOLDER: Final = "jax"

_lock = threading.Lock()
_state: str | None = None  # what use_jax_cache decided, for the summary
#: JAX's monitoring events, counted: compiles that asked the persistent cache, and its hits.
_REQUESTS: Final = "/jax/compilation_cache/compile_requests_use_cache"
_HITS: Final = "/jax/compilation_cache/cache_hits"
_counts: dict[str, int] = {_REQUESTS: 0, _HITS: 0}


def _listen(event: str, **_: object) -> None:
    if event in _counts:
        _counts[event] += 1


def xla_cache_counts() -> tuple[int, int]:
    """(compiles that used JAX's persistent cache, of which hits) in this process so far."""
    return _counts[_REQUESTS], _counts[_HITS]


def cache_phrase(before: tuple[int, int]) -> str:
    """What the persistent cache did for the compiles since ``before`` (xla_cache_counts())."""
    requests, hits = (a - b for a, b in zip(xla_cache_counts(), before))
    if requests == 0:
        return "" if _state is None or not _state.startswith("XLA compile cache: /") else "compile cache: XLA program already compiled in this process"
    if hits == requests:
        return "compile cache: hit (XLA's compiled program loaded from the persistent cache)"
    return f"compile cache: miss, XLA compiled {requests - hits} program(s) and stored them in the persistent cache"


def use_jax_cache() -> str:
    """Turn JAX's persistent compilation cache on in neurenix's cache folder (once per process);
    a phrase for ``compiled.summary`` saying where XLA's compiled programs are kept."""
    global _state
    with _lock:
        if _state is None:
            _state = _configure()
        return _state


def _configure() -> str:
    import jax

    from neurenix_core.contract import compile_cache, registry

    own = jax.config.jax_compilation_cache_dir
    if own:
        return f"XLA compile cache: the user's ({own})"
    folder = compile_cache.runtime_folder(FOLDER, registry().config.state_dir)
    if folder is None:
        return "XLA compile cache: off (NEURENIX_COMPILE_CACHE=0 or no state folder)"
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    jax.monitoring.register_event_listener(_listen)
    return f"XLA compile cache: {folder}"


def jax_cache_state() -> str | None:
    """What :func:`use_jax_cache` decided in this process (None before the first compile)."""
    return _state


# ---------------------------------------------------------------------------- the lowering, exported
class _Entry:
    """A lowering rebuilt around an exported module, and the payload it was stored as."""

    __slots__ = ("lowered", "payload")

    def __init__(self, lowered: Lowered, payload: bytes) -> None:
        self.lowered, self.payload = lowered, payload


def _canonical(dtype: str) -> Any:
    import jax

    return jax.dtypes.canonicalize_dtype(np.dtype(dtype))  # int64 ids are int32 unless jax_enable_x64


def _export(graph: Graph, precision: str | None, plan: QuantizationPlan | None, shapes: Sequence[tuple[int, ...]]) -> _Entry:
    """Lower ``graph``, export it for ``shapes`` (padded) and pack module, weights and layout."""
    import jax

    from neurenix_tpu.lowering import lower_graph, on_leaves

    lowered = lower_graph(graph, precision, plan)
    flat, treedef = jax.tree_util.tree_flatten_with_path(lowered.params)
    leaves = [np.asarray(a) for _, a in flat]
    specs = tuple(jax.ShapeDtypeStruct(a.shape, a.dtype) for a in leaves)
    args = [jax.ShapeDtypeStruct(s, _canonical(i.dtype)) for s, i in zip(shapes, graph.inputs)]
    exported = jax.export.export(jax.jit(on_leaves(lowered.fn, treedef)))(specs, *args)
    layout = {"paths": [[k.key for k in path] for path, _ in flat], "mode": lowered.mode.name, "nodes": lowered.node_count,
              "conv_layout": lowered.conv_layout, "shapes": [list(s) for s in shapes]}
    payload = compile_cache.pack({"module": bytes(exported.serialize()), "layout": json.dumps(layout).encode()},
                                 {f"w{i}": a for i, a in enumerate(leaves)})
    return _Entry(_rebuild(exported, leaves, layout, lambda: lowered), payload)


def _load(payload: bytes, relower: Callable[[], Lowered]) -> _Entry:
    import jax

    parts, arrays = compile_cache.unpack(payload)
    exported = jax.export.deserialize(bytearray(parts["module"]))
    layout = json.loads(parts["layout"])
    leaves = [arrays[f"w{i}"] for i in range(len(layout["paths"]))]
    return _Entry(_rebuild(exported, leaves, layout, relower), payload)


def _rebuild(exported: Any, leaves: list[np.ndarray], layout: dict[str, Any], relower: Callable[[], Lowered]) -> Lowered:
    """A Lowered whose function calls ``exported`` when traced for its shapes, and the real
    lowering (made on first need) for any other shape."""
    import jax

    from neurenix_tpu.lowering import Lowered
    from neurenix_tpu.modes import MODES, QUANT_MODES

    params: dict[str, dict[str, np.ndarray]] = {}
    for (layer, name), leaf in zip(layout["paths"], leaves):
        params.setdefault(layer, {})[name] = leaf
    shapes = [tuple(s) for s in layout["shapes"]]
    other: list[Lowered] = []

    def fn(p: Any, *xs: Any) -> Any:
        if [tuple(x.shape) for x in xs] == shapes:  # static while jit traces: decided once per shape
            return exported.call(tuple(jax.tree_util.tree_leaves(p)), *xs)
        if not other:
            other.append(relower())
        return other[0].fn(p, *xs)

    mode = {**MODES, **QUANT_MODES}[layout["mode"]]
    return Lowered(fn, params, mode, int(layout["nodes"]), bool(layout["conv_layout"]))


def cached_lowering(backend: Any, graph: Graph, precision: str | None, plan: QuantizationPlan | None,
                    shapes: Sequence[tuple[int, ...]], index: int) -> compile_cache.CacheResult[Lowered]:
    """The lowering of ``graph`` for the padded input ``shapes``: from the persistent cache (no
    tracing), else lowered, exported and stored."""
    import jax

    from neurenix_core.contract import registry
    from neurenix_tpu import __version__
    from neurenix_tpu.lowering import lower_graph

    fingerprint = graph.fingerprint()
    platform = backend._native_device(index).platform
    options = {"shapes": [list(s) for s in shapes], "dtypes": [str(_canonical(i.dtype)) for i in graph.inputs],
               "precision": precision, "plan": compile_cache.plan_fingerprint(plan), "platform": platform,
               "x64": bool(jax.config.jax_enable_x64)}
    versions = {"neurenix-tpu": __version__, "jax": jax.__version__, "jaxlib": getattr(jax.lib, "__version__", jax.__version__)}
    key = compile_cache.cache_key("tpu", fingerprint, options, versions)
    meta = {"fingerprint": fingerprint, "device": f"tpu ({platform})", "options": options, "versions": versions}
    result = compile_cache.cached(
        "tpu", key,
        build=lambda: _export(graph, precision, plan, shapes),
        dump=lambda entry: entry.payload,
        load=lambda payload: _load(payload, lambda: lower_graph(graph, precision, plan)),
        meta=meta, state_dir=registry().config.state_dir,
    )
    return compile_cache.CacheResult(result.value.lowered, result.state, result.key, result.seconds, result.nbytes, result.reason,
                                     result.store_error)
