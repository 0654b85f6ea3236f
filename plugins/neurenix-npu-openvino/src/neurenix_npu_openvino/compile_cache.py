"""The npu plugin's piece of the persistent compile cache (``neurenix_core.graph.compile.cache``).

An entry holds OpenVINO's own export of the compiled model (``CompiledModel.export_model()``,
the blob OpenVINO's CACHE_DIR would keep), so a later process skips both neurenix's lowering
and OpenVINO's compile: ``Core.import_model`` gives the compiled model back with the same
properties (threads, precision hint, streams) passed again. A model for OpenVINO's CPU device
(the emulated npu, cpu:0's OpenVINO runtime) with ``CPU_IMPORT_LIMIT`` bytes of weights or more is
compiled in each process instead: imported, it would hold its weights twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from neurenix_core.contract import Graph, QuantizationPlan, compile_cache

if TYPE_CHECKING:
    from neurenix_npu_openvino.backend import NPUOpenVINOBackend

__all__ = ["CPU_IMPORT_LIMIT", "compile_cached"]

#: Weight bytes from which a model compiled for OpenVINO's CPU device is not stored. Imported, such
#: a model holds its weights twice (the export's copy and the unpacked one): a 135M-parameter
#: language model's decode step holds 1.23 GB imported against 0.61 GB compiled from the graph
#: (whose constants are views of the model's own arrays), and compiling it takes 2-3 s where the
#: import takes 1.3-1.7 s (measured on a 2-vCPU AMD EPYC). An NPU's compile takes far longer and
#: its blob is the model on the device: every NPU model is stored.
CPU_IMPORT_LIMIT = 128 * 1024 * 1024


def _key(device: str, version: str, graph: Graph, plan: QuantizationPlan | None, props: Mapping[str, Any],
         fingerprint: str | None) -> tuple[str, dict[str, Any]]:
    from neurenix_npu_openvino.plugin import _VERSION

    fingerprint = fingerprint or graph.fingerprint()
    options = {
        "shapes": [(s.name, list(s.shape), s.dtype) for s in graph.inputs],
        "plan": compile_cache.plan_fingerprint(plan),
        "device": device,
        "properties": {k: str(v) for k, v in sorted(props.items())},
    }
    versions = {"neurenix-npu-openvino": _VERSION, "openvino": version}
    meta = {"fingerprint": fingerprint, "device": device, "options": options, "versions": versions}
    return compile_cache.cache_key("npu", fingerprint, options, versions), meta


def _cached(core: Any, ov_device: str, label: str, version: str, graph: Graph, plan: QuantizationPlan | None,
            props: Mapping[str, Any], build: Callable[[], Any], fingerprint: str | None) -> compile_cache.CacheResult[Any]:
    from neurenix_core.contract import registry

    key, meta = _key(label, version, graph, plan, props, fingerprint)
    weights = graph.param_bytes if ov_device == "CPU" else 0
    if weights >= CPU_IMPORT_LIMIT:
        start = time.perf_counter()
        return compile_cache.CacheResult(build(), "off", key, time.perf_counter() - start, reason=(
            f"{weights / 2**20:,.0f} MiB of weights: OpenVINO's CPU device would hold an imported copy beside its own, "
            "so this model is compiled in each process"))

    def load(blob: bytes) -> Any:
        # The bytes themselves, not a BytesIO around them: OpenVINO then reads one buffer instead
        # of pulling the blob through Python's file interface (about half the import time for a
        # 17 MB BERT-tiny blob here).
        return core.import_model(blob, ov_device, dict(props))

    def dump(compiled: Any) -> memoryview:
        # A view of OpenVINO's export buffer, not a copy of it: a compiled fp32 language model's
        # export is about its weights' size (650 MB for 135M parameters), and each copy adds that
        # much to the process's peak while the entry is stored.
        return compiled.export_model().getbuffer()

    return compile_cache.cached("npu", key, build=build, dump=dump, load=load, meta=meta,
                                state_dir=registry().config.state_dir)


def compile_cached(backend: NPUOpenVINOBackend, graph: Graph, plan: QuantizationPlan | None, props: Mapping[str, Any],
                   build: Callable[[], Any], fingerprint: str | None = None) -> compile_cache.CacheResult[Any]:
    """The compiled model of ``graph`` from the persistent cache, else ``build()`` (lower and
    compile with ``props``) stored there. ``props`` are the exact compile properties;
    ``fingerprint`` the graph's, when the caller has it already (hashing the weights costs)."""
    return _cached(backend.core, backend.ov_device, f"npu ({backend.ov_device})", backend.ov.get_version(), graph, plan, props, build,
                   fingerprint)


def host_compile_cached(core: Any, version: str, graph: Graph, props: Mapping[str, Any],
                        build: Callable[[], Any], plan: QuantizationPlan | None = None) -> compile_cache.CacheResult[Any]:
    """The same for the cpu:0 host runtime (OpenVINO's CPU device, fp32, or int8/int16 with ``plan``)."""
    return _cached(core, "CPU", "cpu:0 (OpenVINO CPU)", version, graph, plan, props, build, None)
