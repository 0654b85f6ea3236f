"""Discovery, isolation, ranking and selection of backend plugins.

entry points -> reserved names -> quarantine -> import -> register (pluggy validates
signatures; plain hook functions it would accept register without it, hooktable.py) -> manifest ->
api check -> probe (bounded) -> ranking. Every step is wrapped: a
failing plugin becomes a record with its phase and cause, never an exception out of
``import neurenix_core`` (unless strict mode). Third-party code that kills the process instead of
raising is caught by the crash journal (journal.py) on the next import; text a plugin hands over is
cleaned by sanitize.py; changes to os.environ / sys.path are recorded by envwatch.py; backend
factories run under a deadline (factory.py).
"""

from __future__ import annotations

import _thread
import functools
import types
import warnings
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final

from neurenix_core.config import Config
from neurenix_core.device import Device, DeviceType, suggest_device
from neurenix_core.errors import (
    BackendUnavailableError,
    DeviceNotFoundError,
    NeurenixWarning,
    StrictModeError,
)
from neurenix_core.plugins import envwatch, hookspecs
from neurenix_core.plugins.entrypoints import EntryPoint
from neurenix_core.plugins.ep_cache import cached_entry_points
from neurenix_core.plugins.hooktable import Impl, PlainImpl, plain_hooks, plugin_manager, spec_names
from neurenix_core.plugins.manifest import (
    NEURENIX_API_VERSION,
    Manifest,
    ProbeContext,
    ProbeResult,
    api_compatible,
    validate_manifest,
)
from neurenix_core.plugins.names import RESERVED, alias_of, is_own, squatting
from neurenix_core.plugins.probing import ProbeFailure, ProbeTimeout, run_all_bounded, run_native_probe
from neurenix_core.plugins.records import Failure, Status
from neurenix_core.plugins.sanitize import CAUSE_LIMIT, NAME_LIMIT, clean, clean_manifest, clean_probe, describe

if TYPE_CHECKING:
    import pluggy

    from neurenix_core.plugins.backend import Backend
    from neurenix_core.plugins.backend_info import BackendInfo
    from neurenix_core.plugins.journal import Journal

__all__ = ["ENTRY_POINT_GROUP", "Failure", "PluginRecord", "Registry", "Status"]

ENTRY_POINT_GROUP: Final = "neurenix.backends"
BUILTIN_DISTRIBUTION: Final = "neurenix-core"
BUILTIN_CPU_MODULE: Final = "neurenix_core.backends.cpu"
_REQUIRED_HOOKS: Final = ("neurenix_manifest", "neurenix_probe", "neurenix_backend")

# Our own first-party plugins, so an error about a device type nobody serves names the package.
FIRST_PARTY_HINTS: Final = {
    "cuda": "pip install neurenix-cuda-tc",
    "tpu": "pip install neurenix-tpu",
    "npu": "pip install neurenix-npu-openvino",
    "edgetpu": "pip install neurenix-edgetpu",
}


class PluginRecord:
    """Mutable per-plugin state inside the registry; users see :class:`BackendInfo` snapshots.

    A plain slotted class rather than a dataclass: it is built at every ``import neurenix_core``.
    """

    __slots__ = (
        "alias",
        "backend",
        "builtin",
        "denied",
        "distribution",
        "failure",
        "lock",
        "manifest",
        "module",
        "module_name",
        "name",
        "probe",
        "squatter",
        "stuck",
        "trusted",
        "version",
        "warnings",
    )

    def __init__(
        self, name: str, module_name: str, distribution: str | None, version: str | None, builtin: bool, trusted: bool = False
    ) -> None:
        self.name = name
        #: The other name users may type for it (names.alias_of: ``npu-openvino`` for ``npu``).
        self.alias: str | None = None
        self.module_name = module_name
        self.distribution = distribution
        self.version = version
        self.builtin = builtin
        #: One of this repository's own plugins exactly as shipped (names.RESERVED): reviewed here,
        #: so its code is not journaled (a typical install then writes no journal at import).
        self.trusted = trusted
        #: Claimed a reserved name that belongs to another distribution.
        self.squatter = False
        self.module: ModuleType | None = None
        self.manifest: Manifest | None = None
        self.probe: ProbeResult | None = None
        self.failure: Failure | None = None
        self.denied: str | None = None
        self.backend: Backend | None = None
        #: Why the factory was abandoned (still running in its thread): never start a second one.
        self.stuck: str | None = None
        #: Things the plugin did that work but deserve the user's attention (environment changes).
        self.warnings: list[str] = []
        self.lock = _thread.allocate_lock()  # threading.Lock itself; threading is not imported at import

    def __repr__(self) -> str:
        return f"PluginRecord(name={self.name!r}, distribution={self.distribution!r}, failure={self.failure!r}, denied={self.denied!r})"

    @property
    def usable(self) -> bool:
        return self.failure is None and self.denied is None and self.probe is not None and self.probe.available

    @property
    def emulated(self) -> bool:
        return self.probe is not None and self.probe.emulated


def _hook_namespace(module: ModuleType) -> types.SimpleNamespace:
    """The module's ``@hookimpl`` functions only, for pluggy to register.

    pluggy inspects every attribute of what it registers (``inspect.getattr_static``); a plugin
    module also holds everything it imported, which made registration the largest cost of
    discovery. The marker attribute finds hook functions under any name (``specname`` works).
    """
    marker = f"{hookspecs.PROJECT}_impl"
    hooks = {name: obj for name, obj in vars(module).items() if callable(obj) and hasattr(obj, marker)}
    return types.SimpleNamespace(__name__=module.__name__, **hooks)


class Registry:
    """All discovered plugins of this process, ranked; resolves devices to backends."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.records: list[PluginRecord] = []
        self.notes: list[str] = []
        # pluggy's manager, built when a plugin needs it (hooktable.py): plain plugins register in _plain.
        self._pm: pluggy.PluginManager | None = None
        self._plain: dict[str, dict[str, PlainImpl]] = {}
        self._ranked: list[PluginRecord] = []
        self._auto_default: Device | None = None
        self._journal: Journal | None = None
        self._env: envwatch.Snapshot = ({}, [])
        #: Plugins whose probe overran its deadline (abandoned in its thread) in this discovery.
        self._abandoned: set[str] = set()

    # ------------------------------------------------------------------ discovery
    def discover(self, eps: Iterable[EntryPoint] | None = None) -> None:
        eps = list(cached_entry_points(ENTRY_POINT_GROUP, self.config.state_dir) if eps is None else eps)
        to_load = self._admit(eps)
        self._journal = self._open_journal([(r, ep) for r, ep in to_load if not r.trusted])
        try:
            self._env = envwatch.snapshot()
            for record, ep in to_load:
                if record.failure is None:
                    self._load(record, ep)
            if not any(r.builtin and r.name == "cpu" for r in self.records):
                self._register_builtin_cpu()
            self._probe_all([r for r in self.records if r.manifest is not None and r.failure is None and r.denied is None])
        finally:
            if self._journal is not None:
                self._journal.finish()
        self._check_emulate_tokens()
        self._rank()
        if self.config.strict:
            self._raise_if_failed()

    def _admit(self, eps: list[EntryPoint]) -> list[tuple[PluginRecord, EntryPoint]]:
        """A record per entry point; squatters and duplicates fail here, denied ones are marked."""
        seen: set[str] = set()
        names = {ep.name for ep in eps}
        to_load: list[tuple[PluginRecord, EntryPoint]] = []
        for ep in eps:
            record = self._record_for(ep)
            alias = alias_of(record.name, record.distribution)
            # A plugin's own name always wins: an alias equal to another plugin's name is dropped,
            # and a reserved name is an alias of this repository's own plugin only (a package
            # calling itself neurenix-cuda-tc does not receive NEURENIX_BACKENDS=cuda-tc).
            record.alias = alias if alias not in names and (record.trusted or alias not in RESERVED) else None
            self.records.append(record)
            clash = squatting(ep.name, ep.dist_name, ep.value)
            if clash is not None:
                record.squatter = True
                self._fail(record, "register", clash)
                continue
            if record.name in seen:
                self._fail(record, "import", f"another installed distribution already provides plugin {record.name!r}")
                continue
            seen.add(record.name)
            record.denied = self.config.is_denied(record.name, record.builtin, record.alias)
            if record.denied is None:
                to_load.append((record, ep))
        return to_load

    def _open_journal(self, pairs: list[tuple[PluginRecord, EntryPoint]]) -> Journal | None:
        """Quarantine plugins that killed an earlier process, try unseen versions in a child first,
        and journal the rest while they run.

        Nothing happens (no file is read or written) when every plugin is this repository's own.
        """
        if not pairs:
            return None
        # Loaded only here: an install whose plugins are all this repository's never needs it.
        from neurenix_core.plugins.journal import lift, quarantine_cause, read_quarantine

        untrusted = [r for r, _ in pairs]
        quarantined = read_quarantine(self.config.state_dir)
        for record in untrusted:
            entry = quarantined.get(record.name)
            if entry is None:
                continue
            if entry.matches(record.distribution, record.version):
                self._fail(record, entry.phase, quarantine_cause(entry))
            else:  # another version is installed now: it gets its chance, and the list stays short
                lift(self.config.state_dir, record.name)
        self._first_runs([(r, ep) for r, ep in pairs if r.failure is None])
        if all(r.failure is not None for r in untrusted):
            return None
        return self._start_journal()

    def _first_runs(self, pairs: list[tuple[PluginRecord, EntryPoint]]) -> None:
        """A third-party version never seen to return is imported and probed in a child first.

        The journal alone protects only the second import: on a fresh machine a probe calling
        ``os._exit`` would take the first one down (first_run.py). Needs the state folder and
        ``flock`` (the quarantine); without them plugins load here as before and doctor notes why.
        """
        from neurenix_core.plugins.journal import read_seen, supported

        state_dir = self.config.state_dir
        if state_dir is None or not supported():
            return
        seen = read_seen(state_dir)
        fresh = [(r, ep) for r, ep in pairs if seen.get(r.name) != (r.distribution or "-", r.version or "-")]
        if not fresh:
            return
        # Loaded only for an unseen version: subprocess and json cost import time otherwise.
        from neurenix_core.plugins.first_run import first_run

        for record, ep in fresh:
            verdict = first_run(ep, (record.name, record.distribution or "-", record.version or "-"), state_dir, self.config.probe_timeout)
            if verdict is not None:
                self._fail(record, *verdict)

    def _start_journal(self) -> Journal | None:
        from neurenix_core.plugins.journal import open_journal

        journal = open_journal(self.config.state_dir)
        if isinstance(journal, str):
            self.notes.append(journal)
            return None
        return journal

    def trial(self, ep: EntryPoint) -> bool:
        """Import, register and probe one plugin in this process, journaled, as discovery would.

        The body of the first-run child (first_run_child.py), where dying is safe. Returns whether
        the probe overran its deadline (it has then not been seen to return).
        """
        record = self._record_for(ep)
        self.records.append(record)
        self._journal = None if record.trusted else self._start_journal()
        try:
            self._env = envwatch.snapshot()
            self._load(record, ep)
            if record.manifest is not None and record.failure is None:
                self._probe_all([record])
        finally:
            if self._journal is not None:
                self._journal.finish()
        return record.name in self._abandoned

    def _record_for(self, ep: EntryPoint) -> PluginRecord:
        # Names, distributions and versions come from files a package installed: cleaned here,
        # once, so that the doctor table and error messages never carry escapes or megabytes.
        own = is_own(ep.name, ep.dist_name, ep.value)
        return PluginRecord(
            name=clean(ep.name, NAME_LIMIT),
            module_name=clean(ep.value, NAME_LIMIT),
            distribution=None if ep.dist_name is None else clean(ep.dist_name, NAME_LIMIT),
            version=None if ep.dist_version is None else clean(ep.dist_version, NAME_LIMIT),
            builtin=own and ep.name == "cpu",
            trusted=own,
        )

    def _register_builtin_cpu(self) -> None:
        # A source checkout that was never pip-installed has no entry points; the host backend is
        # part of the core and must exist, so it is registered directly and the fact is noted.
        ep = EntryPoint("cpu", BUILTIN_CPU_MODULE, ENTRY_POINT_GROUP, BUILTIN_DISTRIBUTION, None)
        record = PluginRecord(name="cpu", module_name=BUILTIN_CPU_MODULE, distribution=BUILTIN_DISTRIBUTION, version=None, builtin=True, trusted=True)
        self.records.append(record)
        if any(r.squatter and r.name == "cpu" for r in self.records):
            self.notes.append("the built-in cpu backend was registered directly: the 'cpu' entry point found on sys.path belongs to another package")
        else:
            self.notes.append("the built-in cpu backend was registered directly: neurenix-core's entry points are not installed (pip install -e .)")
        self._load(record, ep)

    def _load(self, record: PluginRecord, ep: EntryPoint) -> None:
        journal = None if record.trusted else self._journal
        steps = (("import", self._import), ("register", self._register), ("manifest", self._read_manifest), ("api", self._check_api))
        try:
            for phase, step in steps:
                if journal is not None:
                    journal.enter(record.name, record.distribution, record.version, phase)
                if not step(record, ep):
                    return
        finally:
            if journal is not None:
                journal.leave(record.name)
            self._watch(record, "import")

    def _watch(self, record: PluginRecord, phase: str) -> None:
        """Record changes to os.environ / sys.path made while ``record``'s code ran."""
        after = envwatch.snapshot()
        for change in envwatch.changes(self._env, after):
            record.warnings.append(clean(f"{change} during {phase}"))
        self._env = after

    def _fail(self, record: PluginRecord, phase: str, cause: str) -> bool:
        record.failure = Failure(phase, cause)
        return False

    def _import(self, record: PluginRecord, ep: EntryPoint) -> bool:
        try:
            loaded = ep.load()
        except BaseException as exc:  # a plugin's import must not break ours
            if isinstance(exc, KeyboardInterrupt):
                raise
            return self._fail(record, "import", f"importing {record.module_name} raised {describe(exc)}")
        if not isinstance(loaded, ModuleType):
            return self._fail(record, "import", f"entry point {ep.value!r} must name a module of hook functions")
        record.module = loaded
        return True

    def _register(self, record: PluginRecord, ep: EntryPoint) -> bool:
        assert record.module is not None
        try:
            namespace = _hook_namespace(record.module)
            plain = plain_hooks(namespace, hookspecs.PROJECT)
            if plain is None:
                self._manager().register(namespace, name=record.name)
            else:
                self._plain[record.name] = plain
        except Exception as exc:  # noqa: BLE001 - PluginValidationError, or a hostile attribute lookup
            return self._fail(record, "register", clean(exc, CAUSE_LIMIT))
        missing = [h for h in _REQUIRED_HOOKS if self._impl(record, h) is None]
        if missing:
            if self._plain.pop(record.name, None) is None:
                self._manager().unregister(name=record.name)
            return self._fail(record, "register", f"module {record.module_name} does not implement {', '.join(missing)}")
        return True

    def _read_manifest(self, record: PluginRecord, ep: EntryPoint) -> bool:
        try:
            raw = self.call(record, "neurenix_manifest")
            record.manifest = clean_manifest(validate_manifest(raw))
        except ValueError as exc:
            return self._fail(record, "manifest", f"malformed manifest: {clean(exc, CAUSE_LIMIT)}")
        except BaseException as exc:  # recorded, plugin skipped (sys.exit() included)
            if isinstance(exc, KeyboardInterrupt):
                raise
            return self._fail(record, "manifest", f"neurenix_manifest raised {describe(exc)}")
        if record.manifest.name != record.name:
            return self._fail(record, "manifest", f"manifest name {record.manifest.name!r} differs from entry point name {record.name!r}")
        for device_type in record.manifest.device_types:
            DeviceType(device_type)  # registers vendor types so Device("ort:0") parses
        return True

    def _check_api(self, record: PluginRecord, ep: EntryPoint) -> bool:
        assert record.manifest is not None
        if api_compatible(record.manifest.api):
            return True
        have = ".".join(map(str, NEURENIX_API_VERSION))
        return self._fail(
            record,
            "api",
            f"written for neurenix API {record.manifest.api} but this core serves {have}: "
            f"upgrade {record.distribution or record.name} or install a neurenix-core it supports",
        )

    def _context(self, record: PluginRecord) -> ProbeContext:
        assert record.manifest is not None
        asked = bool(record.manifest.emulation) and not self.config.emulate.isdisjoint(emulation_names(record))
        return ProbeContext(emulate=asked, timeout=self.config.probe_timeout)

    def _probe_all(self, records: list[PluginRecord]) -> None:
        """Probe every plugin, each bounded by NEURENIX_PROBE_TIMEOUT, in one worker thread."""
        contexts = [self._context(r) for r in records]
        calls = [self._guarded(r, functools.partial(self.call, r, "neurenix_probe", context=c)) for r, c in zip(records, contexts)]
        # The built-in CPU backend is probed inline, without a deadline: it is this package's own
        # code and every process needs it, so no NEURENIX_PROBE_TIMEOUT may leave a process without it.
        bounded = iter(run_all_bounded([c for r, c in zip(records, calls) if not r.builtin], self.config.probe_timeout))
        outcomes = [_probe_inline(c) if r.builtin else next(bounded) for r, c in zip(records, calls)]
        for record, ctx, outcome in zip(records, contexts, outcomes):
            try:
                if isinstance(outcome, ProbeTimeout):
                    self._abandoned.add(record.name)
                    if self._journal is not None and not record.trusted:
                        self._journal.abandon(record.name)
                if isinstance(outcome, ProbeFailure):
                    raise outcome
                result = self._check_probe(outcome)
                if result.needs_native:
                    result = self._native(record, ctx)
            except ProbeFailure as exc:
                self._fail(record, "probe", str(exc))
                continue
            record.probe = result

    def _guarded(self, record: PluginRecord, call: functools.partial[Any]) -> functools.partial[Any]:
        """``call`` journaled (third-party plugins) and watched for environment changes.

        Runs in the probe worker thread, one probe after another, so each change is attributed to
        the plugin whose probe made it.
        """
        journal = None if record.trusted else self._journal
        return functools.partial(self._run_guarded, record, call, journal)

    def _run_guarded(self, record: PluginRecord, call: functools.partial[Any], journal: Journal | None) -> Any:
        if journal is not None:
            journal.enter(record.name, record.distribution, record.version, "probe")
        try:
            return call()
        finally:
            if journal is not None:
                journal.leave(record.name)
            self._watch(record, "probe")

    def _native(self, record: PluginRecord, ctx: ProbeContext) -> ProbeResult:
        assert record.manifest is not None
        if not record.manifest.native_probe or self._impl(record, "neurenix_native_probe") is None:
            raise ProbeFailure("probe asked for a native probe but the plugin declares none (native_probe=True and neurenix_native_probe)")
        native_ctx = ProbeContext(emulate=ctx.emulate, timeout=self.config.native_probe_timeout)
        return self._check_probe(run_native_probe(record.module_name, native_ctx))

    @staticmethod
    def _check_probe(result: object) -> ProbeResult:
        if not isinstance(result, ProbeResult):
            raise ProbeFailure(f"probe returned {type(result).__name__}, not ProbeResult")
        count = result.device_count
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ProbeFailure(f"probe returned device_count={count!r}; expected an int >= 0")
        if result.available and count == 0:
            raise ProbeFailure("probe said available but reported 0 devices")
        return clean_probe(result)

    def _check_emulate_tokens(self) -> None:
        tokens = {t for r in self.records for t in emulation_names(r)}
        for token in sorted(self.config.emulate - tokens):
            self.notes.append(f"NEURENIX_EMULATE lists {token!r} but no loaded plugin emulates it (known: {', '.join(sorted(tokens)) or 'none'})")

    def _raise_if_failed(self) -> None:
        failed = [r for r in self.records if r.failure is not None]
        if failed:
            lines = "; ".join(f"{r.name} ({r.distribution}) failed at {r.failure.phase}: {r.failure.cause}" for r in failed if r.failure)
            raise StrictModeError(f"NEURENIX_STRICT=1 and {len(failed)} plugin(s) failed: {lines}. Fix or uninstall them, or unset NEURENIX_STRICT.")

    # ------------------------------------------------------------------ hooks
    def _manager(self) -> pluggy.PluginManager:
        if self._pm is None:
            self._pm = plugin_manager(hookspecs.PROJECT)
        return self._pm

    def _impl(self, record: PluginRecord, hook: str) -> Impl | None:
        plain = self._plain.get(record.name)
        if plain is not None and hook in plain:
            return plain[hook]
        # A specified hook has a caller in pluggy's manager: none registered there, or the plugin
        # registered without it, means no implementation (an unknown name still asks pluggy).
        if hook in spec_names() and (plain is not None or self._pm is None):
            return None
        for impl in getattr(self._manager().hook, hook).get_hookimpls():
            if impl.plugin_name == record.name:
                return impl
        return None

    def call(self, record: PluginRecord, hook: str, **kwargs: Any) -> Any:
        """Call ``hook`` on one plugin only (never a broadcast), passing the arguments it asks for."""
        impl = self._impl(record, hook)
        if impl is None:
            raise LookupError(f"plugin {record.name} does not implement {hook}")
        return impl.function(*(kwargs[name] for name in impl.argnames))

    def implements(self, record: PluginRecord, hook: str) -> bool:
        return self._impl(record, hook) is not None

    # ------------------------------------------------------------------ ranking
    def _rank(self) -> None:
        usable = [r for r in self.records if r.usable]
        allow = self.config.allow

        def key(r: PluginRecord) -> tuple[int, int, int, int, str]:
            assert r.manifest is not None
            user = min((allow.index(n) for n in (r.name, r.alias) if n in allow), default=len(allow))
            # Emulated devices are never chosen automatically over real hardware or the CPU.
            return (int(r.emulated), user, -int(r.manifest.band), -r.manifest.priority, r.name)

        self._ranked = sorted(usable, key=key)
        self._auto_default = None
        for r in self._ranked:
            if not r.emulated or r.builtin:
                assert r.manifest is not None
                self._auto_default = Device(r.manifest.device_types[0], 0)
                break

    @property
    def ranked(self) -> list[PluginRecord]:
        return list(self._ranked)

    @property
    def auto_default(self) -> Device:
        assert self._auto_default is not None, "the cpu backend is always usable"
        return self._auto_default

    # ------------------------------------------------------------------ devices
    def record_named(self, name: str) -> PluginRecord | None:
        """The plugin ``name`` or the plugin whose alias it is (names.alias_of), never a squatter
        that claimed a reserved name."""
        records = [r for r in self.records if not r.squatter]
        return next((r for r in records if r.name == name), None) or next((r for r in records if r.alias == name), None)

    def plugin_names(self) -> str:
        """Every name a plugin answers to, for an error about an unknown one: "cpu, cuda (alias
        cuda-tc), npu (alias npu-openvino), tpu"."""
        return ", ".join(f"{r.name} (alias {r.alias})" if r.alias else r.name for r in sorted(self.records, key=lambda r: r.name)
                         if not r.squatter)

    def _serving(self, device_type: str) -> list[PluginRecord]:
        return [r for r in self.records if r.manifest is not None and device_type in r.manifest.device_types]

    def plugin_for(self, device: Device) -> PluginRecord:
        """The best-ranked usable plugin serving ``device``; raises with the remedy when there is none."""
        for r in self._ranked:
            assert r.manifest is not None
            if device.type in r.manifest.device_types:
                assert r.probe is not None
                if device.index >= r.probe.device_count:
                    count = r.probe.device_count
                    have = ", ".join(f"{device.type}:{i}" for i in range(count))
                    raise DeviceNotFoundError(
                        f"{device} does not exist: plugin {r.name} found {count} {device.type} device(s) ({have}); "
                        f"use an index below {count}"
                    )
                return r
        raise self._unserved(device)

    def _unserved(self, device: Device) -> Exception:
        candidates = self._serving(str(device.type)) or [
            r for r in self.records if r.manifest is None and r.name.split("-")[0] == str(device.type)
        ]
        if not candidates:
            text = str(device.type) if str(device.type)[-1:].isdigit() else f"{device.type}{device.index or ''}"
            meant = self.device_hint(text)
            hint = FIRST_PARTY_HINTS.get(str(device.type), "" if meant else "install the neurenix plugin that serves it")
            known = ", ".join(sorted({t for r in self._ranked if r.manifest for t in r.manifest.device_types}))
            return DeviceNotFoundError(f"no installed backend serves {device.type!s} devices ({device}).{meant} Available types: {known}"
                                       + (f". Remedy: {hint}" if hint else ""))
        reasons = "; ".join(self._why_unusable(r) for r in candidates)
        return BackendUnavailableError(f"{device} is not available: {reasons}")

    def served_types(self) -> dict[str, int]:
        """Each device type a usable plugin serves (its best-ranked one), with its device count."""
        served: dict[str, int] = {}
        for r in self._ranked:
            assert r.manifest is not None and r.probe is not None
            for t in r.manifest.device_types:
                served.setdefault(t, r.probe.device_count)
        return served

    def device_hint(self, text: str) -> str:
        """" Did you mean 'npu:0' (plugin npu)?" for a device string nothing serves
        ("npu0", "gpu", "cuda0", "edge-tpu"), naming the plugin that serves the suggestion; where
        only an installed plugin that is not usable serves it, why not; where none is installed,
        the package that would. Spellings of a type (``npu0``, aliases) come before misspellings.
        A plugin's name or alias that is not a device type (``npu-openvino``, ``onnxruntime``)
        names the plugin's device instead."""
        kind, _, index = text.strip().lower().partition(":")
        named = self.record_named(kind)
        if named is not None and named.manifest is not None and named.manifest.device_types and kind not in named.manifest.device_types:
            device = f"{named.manifest.device_types[0]}:{index if index.isdigit() else 0}"
            return f" Did you mean {device!r}? {kind!r} names plugin {named.name}, not a device type."
        usable = self.served_types()
        installed = {t: 1 for r in self.records if r.manifest is not None and not r.squatter for t in r.manifest.device_types}
        for fuzzy in (False, True):
            meant = suggest_device(text, usable, fuzzy=fuzzy)
            if meant is not None and meant != text:
                return f" Did you mean {meant!r} (plugin {self.plugin_for(Device(meant)).name})?"
            meant = suggest_device(text, installed, fuzzy=fuzzy)
            if meant is not None:
                why = "; ".join(self._why_unusable(r) for r in self._serving(meant.split(":")[0]))
                return f" Did you mean {meant!r}? It is not available: {why}."
            meant = None if fuzzy else suggest_device(text, dict.fromkeys(FIRST_PARTY_HINTS, 1), fuzzy=False)
            if meant is not None:
                return f" Did you mean {meant!r}? No installed plugin serves it: {FIRST_PARTY_HINTS[meant.split(':')[0]]}."
        return ""

    def _why_unusable(self, r: PluginRecord) -> str:
        if r.denied:
            return f"plugin {r.name} is {r.denied}"
        if r.failure:
            return f"plugin {r.name} ({r.distribution}) failed at {r.failure.phase}: {r.failure.cause}"
        assert r.probe is not None and r.manifest is not None
        emu = ""
        if r.manifest.emulation and "NEURENIX_EMULATE" not in r.probe.reason:
            emu = f"; to run its software stack on the host CPU set NEURENIX_EMULATE={r.manifest.emulation}"
        return f"plugin {r.name} found no device: {r.probe.reason}{emu}"

    def has_device(self, device: Device) -> bool:
        try:
            self.plugin_for(device)
        except (DeviceNotFoundError, BackendUnavailableError):
            return False
        return True

    def is_emulated(self, device: Device) -> bool:
        return self.plugin_for(device).emulated

    def devices(self, type: str | DeviceType | None = None) -> list[Device]:
        wanted = None if type is None else DeviceType(type)
        out: list[Device] = []
        for r in self._ranked:
            assert r.manifest is not None and r.probe is not None
            for t in r.manifest.device_types:
                if wanted is not None and t != wanted:
                    continue
                if self.plugin_for(Device(t, 0)) is r:  # a type is owned by its best-ranked plugin
                    out.extend(Device(t, i) for i in range(r.probe.device_count))
        return out

    # ------------------------------------------------------------------ backends
    def backend(self, record: PluginRecord) -> Backend:
        """Create (once) and return the plugin's backend; raises BackendUnavailableError on failure."""
        if record.backend is not None:
            return record.backend
        with record.lock:
            if record.stuck is not None:  # its factory is still running in an abandoned thread
                raise BackendUnavailableError(record.stuck)
            if record.backend is None:
                record.backend = self._create(record)
        return record.backend

    def _create(self, record: PluginRecord) -> Backend:
        # Both loaded on the first backend start, not at import (import-time budget, issue 2).
        from neurenix_core.plugins.backend import Backend
        from neurenix_core.plugins.factory import FactoryTimeout, run_with_deadline

        assert record.manifest is not None and record.probe is not None
        manifest, probe = record.manifest, record.probe
        start = functools.partial(self.call, record, "neurenix_backend", manifest=manifest, probe=probe)
        try:
            # The built-in CPU backend starts inline: NEURENIX_BACKEND_TIMEOUT bounds plugins, whose
            # drivers can hang; the host backend is this package's own and must always start.
            backend = start() if record.builtin else run_with_deadline(
                start, name=record.name, package=record.module_name.split(".")[0], timeout=self.config.backend_timeout
            )
        except FactoryTimeout as exc:
            record.stuck = (
                f"plugin {record.name} ({record.distribution}) did not start its backend within "
                f"{self.config.backend_timeout:g}s (NEURENIX_BACKEND_TIMEOUT); it was {exc.doing}. "
                f"The factory was left running in a background thread and is not started again in this process. "
                f"If it is only slow, raise NEURENIX_BACKEND_TIMEOUT; otherwise deny it with NEURENIX_BACKENDS=-{record.name}"
            )
            record.failure = Failure("backend", record.stuck)
            raise BackendUnavailableError(record.stuck) from None
        except BackendUnavailableError as exc:
            record.failure = Failure("backend", clean(exc))
            raise
        except BaseException as exc:  # sys.exit() in a factory must not end the user's program
            if isinstance(exc, KeyboardInterrupt):
                raise
            record.failure = Failure("backend", describe(exc))
            raise BackendUnavailableError(
                f"plugin {record.name} ({record.distribution}) could not start its backend: {describe(exc)}. "
                f"Check the runtime it needs ({manifest.install_hint or 'see the plugin README'}) or deny it with NEURENIX_BACKENDS=-{record.name}"
            ) from exc
        if not isinstance(backend, Backend):
            kind = clean(type(backend).__name__, NAME_LIMIT)
            record.failure = Failure("backend", f"neurenix_backend returned {kind}, not a Backend")
            raise BackendUnavailableError(f"plugin {record.name} returned {kind} from neurenix_backend, not a neurenix_core.Backend")
        backend._attach(record.name, record.manifest, record.probe)
        return backend

    def backend_for(self, device: Device, *, auto: bool = False) -> Backend:
        """Backend serving ``device``. For an automatically chosen device a failing backend is
        recorded and the next ranked device is used, with a warning; an explicit one raises."""
        record = self.plugin_for(device)
        try:
            return self.backend(record)
        except BackendUnavailableError as exc:
            if not auto or record.builtin:
                raise
            self._ranked.remove(record)
            self._rank_after_failure()
            from neurenix_core.user_frame import user_stacklevel  # sys only; no import at import neurenix_core

            warnings.warn(f"{exc}; automatic selection moved to {self.auto_default}", NeurenixWarning, stacklevel=user_stacklevel())
            return self.backend_for(self.auto_default, auto=True)

    def _rank_after_failure(self) -> None:
        usable = [r for r in self._ranked if r.failure is None]
        self._ranked = usable
        self._auto_default = next(
            (Device(r.manifest.device_types[0], 0) for r in usable if r.manifest and (not r.emulated or r.builtin)),
            None,
        )

    # ------------------------------------------------------------------ reporting
    def info(self, default: Device | None) -> list[BackendInfo]:
        """One :class:`~neurenix_core.plugins.backend_info.BackendInfo` per plugin, ranked usable ones first."""
        rows = [self._info(r, default) for r in self._ranked]
        rows += [self._info(r, default) for r in self.records if r not in self._ranked]
        return rows

    def _info(self, r: PluginRecord, default: Device | None) -> BackendInfo:
        # Loaded when a report is asked for, not at import (a dataclass costs import time).
        from neurenix_core.plugins.backend_info import BackendInfo

        m, p = r.manifest, r.probe
        return BackendInfo(
            name=r.name,
            aliases=(r.alias,) if r.alias else (),
            distribution=r.distribution or (m.distribution if m else None),
            version=r.version or (m.version if m else None),
            status=self._status(r, default),
            device_types=m.device_types if m else (),
            device_count=p.device_count if p and r.usable else 0,
            emulated=r.emulated,
            band=m.band.name.lower() if m else None,
            priority=m.priority if m else None,
            reason=self._reason(r),
            install_hint=(m.install_hint if m else "") or "",
            failure=r.failure,
            capabilities=m.capabilities.as_dict() if m else None,
            warnings=tuple(r.warnings),
        )

    def _status(self, r: PluginRecord, default: Device | None) -> Status:
        if r.denied:
            return Status.DENIED
        if r.failure:
            return Status.FAILED
        if not r.usable:
            return Status.UNAVAILABLE
        if (default is not None and r.manifest and default.type in r.manifest.device_types and r in self._ranked
                and self._owner(default) is r):
            return Status.SELECTED
        return Status.EMULATED if r.emulated else Status.AVAILABLE

    def _owner(self, device: Device) -> PluginRecord | None:
        try:
            return self.plugin_for(device)
        except (DeviceNotFoundError, BackendUnavailableError):
            return None

    def _reason(self, r: PluginRecord) -> str:
        if r.denied:
            return f"{r.denied}; its module was not imported"
        if r.failure:
            return f"failed at {r.failure.phase}: {r.failure.cause}"
        assert r.probe is not None
        if r.emulated:
            return r.probe.reason or "emulated: runs the plugin's software stack on the host CPU"
        if r.usable:
            return r.probe.reason or f"{r.probe.device_count} device(s) found"
        return self._why_unusable(r).split(": ", 1)[-1]


def emulation_names(record: PluginRecord) -> tuple[str, ...]:
    """What NEURENIX_EMULATE may list to emulate ``record``: its emulation token (``npu``), its
    name and its alias (``npu-openvino``); nothing for a plugin that cannot emulate."""
    if record.manifest is None or not record.manifest.emulation:
        return ()
    return tuple(dict.fromkeys(n for n in (record.manifest.emulation, record.name, record.alias) if n))


def _probe_inline(call: Callable[[], Any]) -> Any:
    """``call()``'s result, or the ProbeFailure that run_all_bounded would have returned for it."""
    try:
        return call()
    except Exception as exc:  # noqa: BLE001 - reported as the probe's failure, like a bounded probe's
        failure = ProbeFailure(f"probe raised {describe(exc)}")
        failure.__cause__ = exc
        return failure
