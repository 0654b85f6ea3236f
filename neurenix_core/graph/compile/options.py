"""The options of ``nx.compile`` beyond its own parameters, checked before anything is compiled.

``nx.compile(model, device, options={...})`` (or the same names as keywords, as the docs have
shown since the first release: ``threads=2``, ``runtime="openvino"``, ``stem="plain"``) passes
options to the device's plugin as ``CompileOptions.extra``. The options a device takes are the
core's own (:data:`CORE_OPTIONS`: ``runtime`` and ``threads``, read for every cpu:0 graph and for
the cpu:0 segments of a partitioned model on any device) and those its plugin declares in
``Capabilities.compile_options`` (API 1.4). :func:`checked` refuses, at compile time:

- a name neither declares: TypeError naming it, the closest valid name (nx.compile's parameters
  included: ``devcie`` is ``device``), the device and plugin whose options were checked, and the
  plugin that does declare it where another one does (``stem`` is edgetpu's);
- a key the core sets itself (``shape_buckets``): TypeError naming the parameter that sets it;
- a value of the wrong type or outside the declared values: InvalidOptionError naming them
  (``runtime="onnx"`` lists the host runtimes installed, where before it failed at the first call).

A plugin written before API 1.4 declares nothing (``compile_options=None``): names close to the
core's are still refused, others pass to it unchecked, as that contract promised.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any, Final

from neurenix_core.errors import InvalidOptionError
from neurenix_core.kwargs import closest
from neurenix_core.plugins.manifest import CompileOption

if TYPE_CHECKING:
    from neurenix_core.device import Device
    from neurenix_core.plugins.registry import PluginRecord, Registry

__all__ = ["CORE_OPTIONS", "INTERNAL_OPTIONS", "accepted_options", "checked", "host_runtime_names"]

#: The core's own options, valid on every device (cpu:0 graphs and cpu:0 segments read them).
CORE_OPTIONS: Final = (
    CompileOption(name="runtime", type="str|none",
                  doc="the runtime of cpu:0 graphs and segments: 'auto' (measured), 'numpy' or a host runtime a plugin offers"),
    CompileOption(name="threads", type="int|none",
                  doc="threads of cpu:0 runtimes (and of the device's runtime where its plugin declares threads)"),
)
#: Keys of ``CompileOptions.extra`` the core sets itself, and the parameter that sets each.
INTERNAL_OPTIONS: Final = {"shape_buckets": "buckets="}
#: ``runtime=`` values that name no plugin's runtime.
_RUNTIME_WORDS: Final = ("auto", "numpy")


def accepted_options(record: PluginRecord) -> tuple[CompileOption, ...]:
    """The core's options and those ``record``'s plugin declares (none where it declares None)."""
    declared = record.manifest.capabilities.compile_options if record.manifest is not None else None
    return CORE_OPTIONS + tuple(declared or ())


def host_runtime_names(reg: Registry) -> list[str]:
    """``runtime=`` values: the words, then each host runtime an installed plugin offers (read from
    manifests, as ``graph.host_select`` does; nothing is started)."""
    offered = {
        r.manifest.capabilities.host_runtime for r in reg.records
        if r.manifest is not None and r.failure is None and r.denied is None and r.manifest.capabilities.host_runtime
    }
    return [*_RUNTIME_WORDS, *sorted(n for n in offered if n is not None)]


def checked(device: Device, record: PluginRecord, keywords: Mapping[str, Any], options: object,
            parameters: Collection[str], *, function: str = "nx.compile") -> dict[str, Any]:
    """``keywords`` (nx.compile's ``**extra``) and ``options`` merged into the dict the plugin gets
    as ``CompileOptions.extra``, every name declared and every value accepted (see the module)."""
    from neurenix_core.plugins.state import registry

    merged = _merged(keywords, options, function)
    reg = registry()
    declared = record.manifest.capabilities.compile_options if record.manifest is not None else None
    accepted = accepted_options(record)
    where = _where(device, record, accepted, declared is None)
    for name, value in merged.items():
        source = "option" if name not in keywords else "keyword argument"
        if name in INTERNAL_OPTIONS:
            raise TypeError(f"{function}() got an unexpected {source} {name!r}: nx.compile sets it itself "
                            f"(pass {INTERNAL_OPTIONS[name]}){where}")
        matches = [o for o in accepted if o.name == name]
        if not matches:
            _refuse_name(name, source, parameters if source != "option" else (), accepted, declared is None, reg, record, where, function)
            continue  # a plugin written before API 1.4: passed on unchecked
        for option in matches:
            _check_value(device, record, option, value)
    if merged.get("runtime") is not None:
        _check_runtime(device, merged["runtime"], host_runtime_names(reg), reg)
    threads = merged.get("threads")
    if str(device.type) == "cpu" and threads is not None and threads < 1:  # its type is checked above
        raise InvalidOptionError(f"{device}: threads={threads!r} must be a positive int or None (None: the process's BLAS pool "
                                 "as its environment sized it)")
    return merged


def _merged(keywords: Mapping[str, Any], options: object, function: str) -> dict[str, Any]:
    if options is None:
        return dict(keywords)
    if not isinstance(options, Mapping) or not all(isinstance(k, str) for k in options):
        raise TypeError(f"{function}(options=...) takes a dict of option names to values, got {type(options).__name__}")
    twice = sorted(set(options) & set(keywords))
    if twice:
        raise TypeError(f"{function}() got option {twice[0]!r} twice: as a keyword argument and in options=; pass it once")
    return {**keywords, **options}


def _where(device: Device, record: PluginRecord, accepted: tuple[CompileOption, ...], legacy: bool) -> str:
    core = ", ".join(o.name for o in CORE_OPTIONS)
    own = [o.name for o in accepted[len(CORE_OPTIONS):]]
    plugin = ("declares no options (it predates plugin API 1.4)" if legacy
              else f"declares {', '.join(own)}" if own else "declares none")
    return f" (checked the options {device} takes: the core's {core}; plugin {record.name} {plugin})"


def _refuse_name(name: str, source: str, parameters: Collection[str], accepted: tuple[CompileOption, ...], legacy: bool,
                 reg: Registry, record: PluginRecord, where: str, function: str) -> None:
    valid = [*parameters, *(o.name for o in accepted)]
    near = closest(name, valid)
    if legacy and near is None:
        return  # nothing close to a name the core knows: the old plugin may read it
    hint = f"; did you mean {near!r}?" if near is not None else f"; valid: {', '.join(sorted(set(valid)))}"
    elsewhere = _declared_elsewhere(name, reg, record)
    what = "keyword argument" if source == "keyword argument" else "option"
    raise TypeError(f"{function}() got an unexpected {what} {name!r}{hint}{where}{elsewhere}")


def _declared_elsewhere(name: str, reg: Registry, record: PluginRecord) -> str:
    owners = [
        f"plugin {r.name} ({', '.join(r.manifest.device_types)})" for r in reg.records
        if r is not record and r.manifest is not None and any(o.name == name for o in r.manifest.capabilities.compile_options or ())
    ]
    return f"; {name!r} is an option of {' and '.join(owners)}" if owners else ""


def _check_value(device: Device, record: PluginRecord, option: CompileOption, value: Any) -> None:
    if option.accepts(value):
        return
    who = "the core" if option in CORE_OPTIONS else f"plugin {record.name}"
    near = closest(value, [v for v in option.values or () if isinstance(v, str)]) if isinstance(value, str) else None
    hint = f"; did you mean {near!r}?" if near is not None else ""
    raise InvalidOptionError(f"{device}: {option.name}={value!r} is refused by {who}: {option.name} takes {option.expected()}{hint} "
                             f"({option.name}: {option.doc})")


def _check_runtime(device: Device, value: str, names: list[str], reg: Registry) -> None:
    if value in names:
        return
    # runtime= names a runtime (the library: 'onnxruntime', 'openvino'), not a plugin or device
    # type ('ort', 'npu'): a plugin's name is answered with the runtime it offers, not taken for it.
    plugin = reg.record_named(value)
    offered = plugin.manifest.capabilities.host_runtime if plugin is not None and plugin.manifest is not None else None
    if plugin is not None and offered in names:
        hint = f" {value!r} names plugin {plugin.name}, not a runtime: the runtime it offers for cpu:0 is runtime={offered!r}."
    else:
        near = closest(value, names)
        hint = f" Did you mean {near!r}?" if near is not None else ""
    raise InvalidOptionError(f"{device}: runtime={value!r} names no host runtime installed here: runtime takes one of "
                             f"{', '.join(repr(n) for n in names)}.{hint} A plugin offers its runtime for cpu:0 once it "
                             "is installed (docs/cpu.md)")
