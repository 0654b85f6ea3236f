"""The npu plugin's piece of the persistent compile cache (``neurenix_core.graph.compile.cache``).

An entry holds OpenVINO's own export of the compiled model (``CompiledModel.export_model()``,
the blob OpenVINO's CACHE_DIR would keep), so a later process skips both neurenix's lowering
and OpenVINO's compile: ``Core.import_model`` gives the compiled model back with the same
properties (threads, precision hint, streams) passed again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from neurenix_core.contract import Graph, QuantizationPlan, compile_cache

if TYPE_CHECKING:
    from neurenix_npu_openvino.backend import NPUOpenVINOBackend

__all__ = ["compile_cached"]


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

    def load(blob: bytes) -> Any:
        # The bytes themselves, not a BytesIO around them: OpenVINO then reads one buffer instead
        # of pulling the blob through Python's file interface (about half the import time for a
        # 17 MB BERT-tiny blob here).
        return core.import_model(blob, ov_device, dict(props))

    def dump(compiled: Any) -> bytes:
        return bytes(compiled.export_model().getvalue())

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
