"""THE contract between the neurenix core and its backend plugins.

A plugin is a distribution with one entry point in the group ``neurenix.backends``::

    [project.entry-points."neurenix.backends"]
    npu = "neurenix_npu_openvino.plugin"

The named module holds ``@hookimpl`` functions and imports nothing heavy (no torch, jax,
openvino, LiteRT): it is imported by ``import neurenix_core``. The built-in CPU backend uses
exactly this mechanism (``cpu = "neurenix_core.backends.cpu"``).

The hooks run in three phases, each isolated by the core. A plugin that fails in any phase is
recorded (plugin, distribution, phase, cause), shown by ``neurenix doctor`` and
``nx.backends()``, and skipped; it never breaks ``import neurenix_core``
(``NEURENIX_STRICT=1`` turns records into an error).

1. Manifest  -- ``neurenix_manifest``: static data, read at discovery. The API range it declares
   is checked before any other hook of the plugin is called.
2. Probe     -- ``neurenix_probe`` (and optionally ``neurenix_native_probe``): cheap hardware
   detection at import, bounded in time.
3. Backend   -- ``neurenix_backend``: the lazy factory, called on first use of a device; the only
   place where the framework is imported. ``neurenix_compile`` lowers whole models;
   ``neurenix_host_runtime`` (API 1.2) offers the plugin's runtime to compile graphs for ``cpu:0``;
   ``neurenix_save_compiled`` / ``neurenix_load_compiled`` (API 1.3, optional) write and read
   compiled artifacts (docs/deploy.md).

The core calls each hook on one plugin at a time (never a broadcast), so one plugin's answer
cannot shadow another's. Per-op dispatch never goes through these hooks: the core resolves a
backend once and then uses its op table.

Designed against five consumers: the NumPy CPU backend (eager array), JAX on TPU and PyTorch on
CUDA (eager array + whole-model compile), OpenVINO on NPU and LiteRT on Edge TPU (graph
compilers with a small native eager subset).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from neurenix_core.plugins.manifest import NEURENIX_API_VERSION
from neurenix_core.plugins.markers import HookimplMarker, HookspecMarker

if TYPE_CHECKING:
    from neurenix_core.graph.ir.host import HostRuntime
    from neurenix_core.plugins.backend import Backend, CompiledModel
    from neurenix_core.plugins.manifest import Manifest, ProbeContext, ProbeResult

__all__ = ["NEURENIX_API_VERSION", "PROJECT", "hookimpl", "hookspec"]

PROJECT: Final = "neurenix"

# pluggy's markers, without importing pluggy at every ``import neurenix_core`` (markers.py).
hookspec = HookspecMarker(PROJECT)
#: Decorate a plugin's hook functions with this (``from neurenix_core import hookimpl``).
hookimpl = HookimplMarker(PROJECT)


# -------------------------------------------------------------------------------------------
# Phase 1: manifest (discovery, static)
# -------------------------------------------------------------------------------------------


@hookspec
def neurenix_manifest() -> Manifest | dict[str, Any]:
    """Return the plugin's static manifest.

    Called by: the core's discovery, once per process, right after the entry point's module is
    imported (at ``import neurenix_core``).

    Return: a :class:`~neurenix_core.plugins.manifest.Manifest` (or a ``dict`` of its fields). ``api`` is
    the range of ``NEURENIX_API_VERSION`` the plugin was written for (``">=1.0,<2"``); the core
    refuses the plugin (phase ``api``) before calling any other hook when the range excludes the
    running core. ``band`` and ``priority`` place the plugin in the core's ranking; the core owns
    the bands, so a plugin cannot claim to be first. A malformed manifest is recorded as a
    failure of phase ``manifest``.

    Implement: return constants only. Do not probe hardware, read files or import frameworks.
    """


# -------------------------------------------------------------------------------------------
# Phase 2: probe (import time, cheap, bounded)
# -------------------------------------------------------------------------------------------


@hookspec
def neurenix_probe(context: ProbeContext) -> ProbeResult:
    """Tell whether the plugin's hardware is present, and how many devices there are.

    Called by: the core at import, in a worker thread with a deadline of
    ``context.timeout`` seconds (``NEURENIX_PROBE_TIMEOUT``, default 2). A probe that overruns
    is recorded as a ``probe`` failure and the plugin is skipped.

    ``context.emulate`` is True when the user listed the plugin's ``emulation`` token in
    ``NEURENIX_EMULATE``; the probe should then check that its software runtime is installed
    (``importlib.util.find_spec`` on the top-level name, or ``importlib.metadata.version``; never an
    import: ``find_spec("pkg.sub")`` imports ``pkg``; docs/vendors.md section 7) and answer
    ``ProbeResult.emulating(count)``. Emulated devices are never auto-selected over real hardware
    or the CPU.

    Return: ``ProbeResult.found(count, **details)``, ``ProbeResult.missing(reason)`` where
    ``reason`` is one sentence a user can act on ("no /dev/accel/accel* node: install the Intel
    NPU driver"), or ``ProbeResult.native(reason)`` when driver files exist and only native code
    can tell more; the core then runs :func:`neurenix_native_probe` in a subprocess.

    Implement: look at ``/dev`` nodes, ``/sys``, driver files, ``ctypes.util.find_library`` and
    ``importlib.util.find_spec``. No framework imports, no subprocesses, no network. Never load
    driver code here: a probe that kills the process (``os._exit``, a segfault) does so once, and
    the plugin is then quarantined until ``neurenix doctor --retry NAME`` (docs/plugins.md). The
    ``reason`` is cut to 500 printable characters; changes to ``os.environ`` / ``sys.path`` made
    here are reported as warnings in ``neurenix doctor``.
    """


@hookspec
def neurenix_native_probe(context: ProbeContext) -> ProbeResult:
    """Query native driver code (``ctypes`` into ``libcuda.so.1``, ``libedgetpu.so.1``).

    Called by: the core, only when the manifest says ``native_probe=True`` and
    :func:`neurenix_probe` returned ``ProbeResult.native(...)``. It runs in a separate Python
    process, so a segfault or abort in the driver is recorded as a ``probe`` failure
    ("crashed with SIGSEGV") instead of killing the user's process.

    Return: a ``ProbeResult`` as for :func:`neurenix_probe` (its ``details`` must be JSON-able).
    """


# -------------------------------------------------------------------------------------------
# Phase 3: backend (lazy, first use)
# -------------------------------------------------------------------------------------------


@hookspec
def neurenix_backend(manifest: Manifest, probe: ProbeResult) -> Backend:
    """Create the plugin's backend; this is where the framework is imported.

    Called by: the core, the first time a tensor, model or op uses one of the plugin's devices
    (never at import), in a worker thread while the caller waits at most
    ``NEURENIX_BACKEND_TIMEOUT`` seconds (default 120); an overrun is a
    ``BackendUnavailableError`` naming the plugin, and the abandoned call is never repeated in
    that process. Called at most once per process; the result is cached.

    Return: an instance of a :class:`~neurenix_core.plugins.backend.Backend` subclass serving
    ``manifest.device_types`` with ``probe.device_count`` devices; ``probe.emulated`` says
    whether to run on the host CPU. Raise :class:`~neurenix_core.errors.BackendUnavailableError`
    naming what is missing when the runtime cannot start; the core re-raises it for an explicit
    request and records it (and picks the next device) for an automatic choice.

    Implement: import the framework here, build the op table, start no background work.
    """


@hookspec
def neurenix_compile(backend: Backend, graph: Any, options: Any) -> CompiledModel | None:
    """Lower a whole model graph to the backend's native form.

    Called by: ``nx.compile(model, device=...)`` when the device belongs to this plugin and its
    manifest declares ``capabilities.compiles_models``. ``graph`` is a
    ``neurenix_core.graph.ir.Graph`` (op nodes of ``neurenix_core.graph.opset``, weights as NumPy
    arrays, static input shapes) and ``options`` a ``neurenix_core.graph.ir.CompileOptions``
    (device, precision, quantization parameters from the core's calibration).

    Since API 1.4 ``options.extra`` holds only the options the manifest declares
    (``capabilities.compile_options``, each name, type and value checked by ``nx.compile``) and
    the core's own (``runtime``, ``threads``, ``shape_buckets``); a plugin declaring None gets
    whatever names the core did not recognise, as before.

    Since API 1.1 the core partitions first: ``graph`` holds only ops listed in
    ``capabilities.graph_ops`` (the 17 first-release ops when that is None) on values of
    ``capabilities.graph_dtypes``; undeclared composites were decomposed, the rest runs on the
    CPU backend. A partitioned model calls this hook once per device subgraph, whose inputs are
    the values crossing into it (constants of the model included, unless ``constant`` is declared).

    Return: a :class:`~neurenix_core.plugins.backend.CompiledModel`, or ``None`` to let the core run the
    layers eagerly on the device. Raise ``UnsupportedOperationError`` naming the layer when a
    node cannot be lowered; the core applies the fallback policy.

    Implement: walk ``graph.nodes`` once; cache by (graph fingerprint, input shapes, precision,
    device).
    """


@hookspec
def neurenix_host_runtime() -> HostRuntime:
    """Offer this plugin's runtime to compile graphs for ``cpu:0`` (API 1.2).

    Called by: the core, lazily, the first time a ``cpu:0`` model (or a fallback segment of
    another device's model) is compiled, for plugins whose manifest declares
    ``capabilities.host_runtime``. It is called whether or not the plugin's own device is present:
    OpenVINO's CPU device runs on a laptop without an NPU. Not called for a denied plugin.

    Return: a :class:`~neurenix_core.graph.ir.host.HostRuntime`. Raise
    ``BackendUnavailableError`` naming what is missing when the runtime cannot start (the core
    records it and uses the next runtime, the NumPy interpreter last).

    Implement: import the framework here (never at module import); keep one runtime object per
    process (the core caches what this returns).
    """


@hookspec
def neurenix_save_compiled(backend: Backend, model: CompiledModel, directory: Any) -> dict[str, Any]:
    """Write the plugin's native artifact of one compiled model (API 1.3, optional).

    Called by: ``compiled.save(path)`` (``neurenix_core.deploy``), once per compiled model the
    plugin returned from :func:`neurenix_compile` (one per input shape, one per device segment of
    a partitioned model). ``directory`` is an empty ``pathlib.Path`` owned by this one model.

    Return: a JSON-able dict the core stores in the artifact's manifest and hands back to
    :func:`neurenix_load_compiled`: the file names written, the runtime version, whatever the
    load needs (edge layouts, precision). Raise ``ArtifactUnsupportedError`` naming the plugin
    and the remedy for a model it cannot write (e.g. a data-parallel program).

    Implement: write the runtime's own format (OpenVINO IR, a .tflite, a serialized
    ``jax.export`` module, a ``torch.export`` program), never pickle. A plugin without this hook
    gets an ``ArtifactUnsupportedError`` naming it.
    """


@hookspec
def neurenix_load_compiled(backend: Backend, directory: Any, meta: dict[str, Any], options: Any) -> CompiledModel:
    """Load what :func:`neurenix_save_compiled` wrote (API 1.3, optional).

    Called by: ``nx.load_compiled(path)``, with the same ``directory`` layout and ``meta`` dict,
    and ``options`` a ``CompileOptions`` for the device it is loaded onto. The core has checked
    the artifact's plugin name and version, device type and format version already.

    Return: a :class:`~neurenix_core.plugins.backend.CompiledModel` that behaves as the saved one.
    Raise ``ArtifactFormatError`` for a missing or corrupted file and ``ArtifactMismatchError``
    when the runtime cannot use it (another runtime version for a version-bound blob), each
    naming the plugin and the remedy (``neurenix export`` it again).

    Implement: import only this plugin's runtime; never the framework the model came from.
    """
