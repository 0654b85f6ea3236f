"""Value types of the plugin contract: Manifest, Capabilities, PriorityBand, ProbeResult.

They are plain data so that discovery stays static and cheap: nothing here runs plugin code.
A plugin may return a ``Manifest`` or a ``dict`` with the same keys; :func:`validate_manifest`
turns either into a ``Manifest`` or raises ``ValueError`` naming the bad field.
"""

from __future__ import annotations

import enum
import numbers
import re
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Final, final

from neurenix_core.device import valid_type_name

__all__ = [
    "NEURENIX_API_VERSION",
    "OPTION_TYPES",
    "RESERVED_OPTION_NAMES",
    "Capabilities",
    "CompileOption",
    "Manifest",
    "PriorityBand",
    "ProbeContext",
    "ProbeResult",
    "api_compatible",
    "validate_manifest",
]

#: The version of the contract in hookspecs.py. A plugin declares the range it was written
#: for (``api=">=1.0,<2"``); the core refuses a plugin whose range excludes this version
#: before calling anything but its manifest hook. Minor bumps add optional hooks or fields.
#: 1.1 added ``Capabilities.graph_ops`` / ``graph_dtypes`` (the ops a compiling plugin lowers);
#: 1.2 ``Capabilities.host_runtime`` and the ``neurenix_host_runtime`` hook (runtimes for cpu:0);
#: 1.3 the optional ``neurenix_save_compiled`` / ``neurenix_load_compiled`` hooks (compiled artifacts);
#: 1.4 ``Capabilities.compile_options`` (the ``nx.compile`` options a plugin reads, checked by the core);
#: 1.5 ``HostRuntime.quantized_precisions`` / ``HostOptions.plan`` (static int8/int16 on host runtimes);
#: 1.6 ``Capabilities.host_runtime_start_s`` (what starting the host runtime costs, read before starting it);
#: 1.7 ``HostRuntime.keeps_state`` / ``compile_stateful`` (a step graph's cache kept by the runtime: host_state.py).
#: 1.8 ``HostRuntime.stores_state_models`` / ``load_stateful`` (a stateful model written to a folder and read back).
#: 1.9 weight plans hold embedding tables too (int8 per row) and name activation schemes
#: (``"...-int8-activations"``: ``quantizes_activations``, ``quantize_groups``).
NEURENIX_API_VERSION: Final[tuple[int, int]] = (1, 9)


_REQUIRED: Final = object()


@final
class _Factory:
    """A default built anew for every instance (like dataclasses' ``default_factory``)."""

    __slots__ = ("make",)

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make


class _Record:
    """An immutable value object with keyword-only fields.

    Hand-written instead of ``@dataclass``: creating a dataclass costs ~2 ms (its methods are
    generated and exec'd) and these classes are built at every ``import neurenix_core``, whose
    budget is a few tens of milliseconds. Subclasses list their fields and defaults in ``_SPEC``.
    """

    __slots__ = ()
    _SPEC: ClassVar[Mapping[str, Any]] = {}

    def __init__(self, **values: Any) -> None:
        cls = type(self)
        unknown = values.keys() - cls._SPEC.keys()
        if unknown:
            raise TypeError(f"{cls.__name__}() got unexpected keyword argument(s): {', '.join(sorted(unknown))}")
        for name, default in cls._SPEC.items():
            if name in values:
                value = values[name]
            elif default is _REQUIRED:
                raise TypeError(f"{cls.__name__}() missing required keyword argument: {name!r}")
            else:
                value = default.make() if type(default) is _Factory else default
            object.__setattr__(self, name, value)

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(cls._SPEC)

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self._SPEC)

    def replace(self, **changes: Any) -> Any:
        """A copy with some fields changed."""
        return type(self)(**{**dict(zip(self._SPEC, self._values())), **changes})

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable; use .replace({name}=...)")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        body = ", ".join(f"{name}={value!r}" for name, value in zip(self._SPEC, self._values()))
        return f"{type(self).__name__}({body})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), dict(zip(self._SPEC, self._values()))))


def _rebuild(cls: type[_Record], values: dict[str, Any]) -> _Record:
    return cls(**values)


class PriorityBand(enum.IntEnum):
    """Ranking bands owned by the core; a plugin picks a band and a priority 0-99 inside it.

    No plugin can outrank another band: a dedicated accelerator beats an NPU whatever
    priority the NPU plugin claims.
    """

    CPU = 100
    EDGE = 200
    NPU = 300
    ACCELERATOR = 400


#: The value types a :class:`CompileOption` may declare, joined with ``|`` (``"int|none"``).
OPTION_TYPES: Final = ("bool", "int", "float", "str", "mapping", "sequence", "none", "any")


def _is_type(value: Any, kind: str) -> bool:
    if kind == "any":
        return True
    if kind == "none":
        return value is None
    if kind == "bool":
        return isinstance(value, bool)
    if kind in ("int", "float"):  # NumPy scalars count: threads=np.int64(2) is an int
        allowed = numbers.Integral if kind == "int" else numbers.Real
        return isinstance(value, allowed) and not isinstance(value, bool)
    if kind == "str":
        return isinstance(value, str)
    if kind == "mapping":
        return isinstance(value, Mapping)
    return isinstance(value, (list, tuple))  # "sequence": a str is not a sequence of values here


_ARTICLES: Final = {"bool": "a bool", "int": "an int", "float": "a number", "str": "a string", "mapping": "a dict",
                    "sequence": "a list or tuple", "none": "None", "any": "any value"}


@final
class CompileOption(_Record):
    """One option of ``nx.compile`` a plugin reads from ``CompileOptions.extra`` (API 1.4).

    ``type`` is one of :data:`OPTION_TYPES` or several joined with ``|`` (``"int|none"``);
    ``values``, when given, lists the values allowed (None is allowed when ``type`` includes
    ``none``); ``doc`` is one line a user reads in the error that refuses a value.
    The core refuses an undeclared name (TypeError, with the closest declared one) and a value of
    the wrong type or outside ``values`` (InvalidOptionError) when ``nx.compile`` is called, so
    the plugin's compile hook only sees declared options. It may still refuse a combination.
    """

    name: str
    type: str
    values: tuple[Any, ...] | None
    doc: str

    _SPEC: ClassVar[dict[str, Any]] = {"name": _REQUIRED, "type": "any", "values": None, "doc": ""}
    __slots__ = tuple(_SPEC)

    def accepts(self, value: Any) -> bool:
        """True when ``value`` has a declared type and, for a non-None value, is one of ``values``."""
        if not any(_is_type(value, kind) for kind in self.type.split("|")):
            return False
        return value is None or self.values is None or any(value == v and type(value) is type(v) for v in self.values)

    def expected(self) -> str:
        """What the option takes, for an error message: "one of 'a', 'b' or None", "an int or None"."""
        kinds = self.type.split("|")
        none = " or None" if "none" in kinds else ""
        if self.values is not None:
            return f"one of {', '.join(repr(v) for v in self.values)}{none}"
        return " or ".join(_ARTICLES[k] for k in kinds)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "values": None if self.values is None else list(self.values), "doc": self.doc}


@final
class Capabilities(_Record):
    """What a backend declares it can do, as data (tensor cores are a capability, not a type)."""

    dtypes: tuple[str, ...]
    precisions: tuple[str, ...]
    native_ops: tuple[str, ...]
    compiles_models: bool
    quantization: tuple[str, ...]
    dlpack: bool
    extra: Mapping[str, Any]
    #: Graph ops (``neurenix_core.graph.opset`` names) that ``neurenix_compile`` lowers natively.
    #: None (every plugin written before API 1.1) means the 17 ops of the first release. A
    #: composite op left out is decomposed by the core; a primitive left out runs on the CPU.
    graph_ops: tuple[str, ...] | None
    #: Value dtypes those compiled graphs take and produce; a node touching another dtype (int64
    #: token ids, bool masks) runs on the CPU.
    graph_dtypes: tuple[str, ...]
    #: API 1.2: the name of a runtime this plugin offers to compile graphs for ``cpu:0`` through
    #: ``neurenix_host_runtime`` (``"openvino"``, ``"litert"``, ...); None offers none.
    host_runtime: str | None
    #: API 1.6: the seconds the first start of that runtime typically takes in a process (importing
    #: its framework: ~1.2 s for JAX, ~1.5 s for PyTorch, ~0.05 s for OpenVINO). The core does not
    #: start a runtime of HEAVY_START_S or more to time a graph too small to repay it
    #: (graph/compile/host_select.py); None (a plugin written before 1.6) is taken as light.
    host_runtime_start_s: float | None
    #: API 1.4: the options this plugin's ``neurenix_compile`` reads from ``CompileOptions.extra``
    #: (``nx.compile(model, device, options={...})`` or the same names as keywords). None (a
    #: plugin written before 1.4) declares nothing: the core then refuses only names close to its
    #: own and passes the others on unchecked; ``()`` accepts none.
    compile_options: tuple[CompileOption, ...] | None

    _SPEC: ClassVar[dict[str, Any]] = {
        "dtypes": ("float32",),
        "precisions": ("fp32",),
        "native_ops": (),
        "compiles_models": False,
        "quantization": (),
        "dlpack": False,
        "extra": _Factory(dict),
        "graph_ops": None,
        "graph_dtypes": ("float32",),
        "host_runtime": None,
        "host_runtime_start_s": None,
        "compile_options": None,
    }
    __slots__ = tuple(_SPEC)

    def as_dict(self) -> dict[str, Any]:
        return {
            "dtypes": list(self.dtypes),
            "precisions": list(self.precisions),
            "native_ops": list(self.native_ops),
            "compiles_models": self.compiles_models,
            "quantization": list(self.quantization),
            "dlpack": self.dlpack,
            "extra": dict(self.extra),
            "graph_ops": None if self.graph_ops is None else list(self.graph_ops),
            "graph_dtypes": list(self.graph_dtypes),
            "host_runtime": self.host_runtime,
            "host_runtime_start_s": self.host_runtime_start_s,
            "compile_options": None if self.compile_options is None else [o.as_dict() for o in self.compile_options],
        }


@final
class Manifest(_Record):
    """Static facts about a plugin, returned by ``neurenix_manifest``.

    ``emulation`` is the token users put in ``NEURENIX_EMULATE`` (``"npu"``) to run the plugin's
    real software stack on the host CPU; ``None`` means the plugin cannot emulate.
    ``native_probe`` declares that the probe may load native driver code, so the core runs
    ``neurenix_native_probe`` in a subprocess where a crash cannot take the user's process down.
    ``exports`` maps a facade module (``"neurenix.hardware.npu"``) to the plugin module whose
    public names it should serve (``"neurenix_npu_openvino.api"``); it is imported only when a
    user imports such a name.
    """

    name: str
    distribution: str
    version: str
    api: str
    device_types: tuple[str, ...]
    band: PriorityBand
    priority: int
    capabilities: Capabilities
    install_hint: str
    emulation: str | None
    native_probe: bool
    description: str
    exports: Mapping[str, str]

    _SPEC: ClassVar[dict[str, Any]] = {
        "name": _REQUIRED,
        "distribution": _REQUIRED,
        "version": _REQUIRED,
        "api": _REQUIRED,
        "device_types": _REQUIRED,
        "band": _REQUIRED,
        "priority": 50,
        "capabilities": _Factory(Capabilities),
        "install_hint": "",
        "emulation": None,
        "native_probe": False,
        "description": "",
        "exports": _Factory(dict),
    }
    __slots__ = tuple(_SPEC)


@final
class ProbeContext(_Record):
    """What the core tells a probe: whether the user asked to emulate this plugin, and the time budget."""

    emulate: bool
    timeout: float

    _SPEC: ClassVar[dict[str, Any]] = {"emulate": _REQUIRED, "timeout": _REQUIRED}
    __slots__ = tuple(_SPEC)


@final
class ProbeResult(_Record):
    """A probe's answer. ``reason`` is one sentence a user can act on when ``available`` is False.

    ``needs_native=True`` means "driver files are present; ask my native probe for details":
    the core then runs ``neurenix_native_probe`` in a subprocess.
    """

    available: bool
    device_count: int
    reason: str
    emulated: bool
    details: Mapping[str, Any]
    needs_native: bool

    _SPEC: ClassVar[dict[str, Any]] = {
        "available": _REQUIRED,
        "device_count": 0,
        "reason": "",
        "emulated": False,
        "details": _Factory(dict),
        "needs_native": False,
    }
    __slots__ = tuple(_SPEC)

    @classmethod
    def found(cls, device_count: int, **details: Any) -> ProbeResult:
        return cls(available=True, device_count=device_count, details=details)

    @classmethod
    def missing(cls, reason: str, **details: Any) -> ProbeResult:
        return cls(available=False, reason=reason, details=details)

    @classmethod
    def emulating(cls, device_count: int = 1, reason: str = "", **details: Any) -> ProbeResult:
        return cls(available=True, device_count=device_count, emulated=True, reason=reason, details=details)

    @classmethod
    def native(cls, reason: str = "") -> ProbeResult:
        return cls(available=False, reason=reason, needs_native=True)

    def as_dict(self) -> dict[str, Any]:
        return {
            "available": self.available,
            "device_count": self.device_count,
            "reason": self.reason,
            "emulated": self.emulated,
            "details": dict(self.details),
            "needs_native": self.needs_native,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProbeResult:
        return cls(**{name: data[name] for name in cls.field_names() if name in data})


# Plain strings, compiled (and cached by ``re``) only for text the set-based fast paths below do
# not accept: compiling both at import cost ~0.2 ms, and every real manifest takes the fast path.
_NAME: Final = r"^[a-z][a-z0-9_-]*$"
_CLAUSE: Final = r"^(>=|<=|==|<|>)\s*(\d+)(?:\.(\d+))?$"
_LOWER: Final = frozenset("abcdefghijklmnopqrstuvwxyz")
_NAME_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")
_DIGITS: Final = frozenset("0123456789")


def _valid_name(name: str) -> bool:
    """``re.match(_NAME, name)``; the set check accepts a subset of what the regex accepts."""
    if name[:1] in _LOWER and _NAME_CHARS.issuperset(name):
        return True
    return re.match(_NAME, name) is not None


def _clause(clause: str) -> tuple[str, int, int] | None:
    """``(op, major, minor)`` of one range clause, as ``re.match(_CLAUSE, clause)`` reads it.

    ``>=1.0`` / ``<2`` (no spaces, ASCII digits) are read without the regex; anything else goes to it.
    """
    op = clause[:2] if clause[:2] in (">=", "<=", "==") else clause[:1]
    if op in (">=", "<=", "==", "<", ">"):
        major, dot, minor = clause[len(op):].partition(".")
        if major and _DIGITS.issuperset(major) and (not dot or (minor and _DIGITS.issuperset(minor))):
            return op, int(major), int(minor or 0)
    m = re.match(_CLAUSE, clause)
    return None if m is None else (m.group(1), int(m.group(2)), int(m.group(3) or 0))


def api_compatible(spec: str, version: tuple[int, int] = NEURENIX_API_VERSION) -> bool:
    """True when ``version`` satisfies a comma-separated range such as ``">=1.0,<2"``.

    Raises ``ValueError`` for a malformed range, which the core records as a manifest failure.
    """
    clauses = [c.strip() for c in spec.split(",") if c.strip()]
    if not clauses:
        raise ValueError(f"empty api range {spec!r}")
    ok = True
    for clause in clauses:
        parsed = _clause(clause)
        if parsed is None:
            raise ValueError(f"malformed api range clause {clause!r} in {spec!r} (use e.g. '>=1.0,<2')")
        op, major, minor = parsed
        ok = ok and _compare(version, op, (major, minor))
    return ok


def _compare(have: tuple[int, int], op: str, want: tuple[int, int]) -> bool:
    return {
        ">=": have >= want,
        "<=": have <= want,
        "==": have == want,
        "<": have < want,
        ">": have > want,
    }[op]


def validate_manifest(raw: object) -> Manifest:
    """Turn a plugin's manifest (``Manifest`` or ``dict``) into a checked ``Manifest``.

    Raises ``ValueError`` naming the first bad field; the caller records it as phase ``manifest``.
    """
    if isinstance(raw, Mapping):
        raw = _manifest_from_mapping(raw)
    if not isinstance(raw, Manifest):
        raise ValueError(f"manifest must be a neurenix_core.Manifest or a dict, got {type(raw).__name__}")  # noqa: TRY004 - the contract's one error for a bad manifest (plugins and tests catch ValueError)
    _check_fields(raw)
    return raw


def _manifest_from_mapping(data: Mapping[str, Any]) -> Manifest:
    known = set(Manifest.field_names())
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"unknown manifest field(s) {unknown}")
    values = dict(data)
    if isinstance(values.get("capabilities"), Mapping):
        caps = dict(values["capabilities"])
        if isinstance(caps.get("compile_options"), (list, tuple)):  # a dict manifest declares them as dicts too
            caps["compile_options"] = tuple(CompileOption(**o) if isinstance(o, Mapping) else o for o in caps["compile_options"])
        values["capabilities"] = Capabilities(**caps)
    if isinstance(values.get("band"), str):
        try:
            values["band"] = PriorityBand[values["band"].upper()]
        except KeyError:
            raise ValueError(f"unknown band {values['band']!r}; use one of {[b.name.lower() for b in PriorityBand]}") from None
    if isinstance(values.get("device_types"), list):
        values["device_types"] = tuple(values["device_types"])
    try:
        return Manifest(**values)
    except TypeError as exc:  # missing required fields
        raise ValueError(str(exc)) from exc


def _check_fields(m: Manifest) -> None:
    for name in ("name", "distribution", "version", "api"):
        value = getattr(m, name)
        if not isinstance(value, str) or not value:
            raise ValueError(f"field {name!r} must be a non-empty string, got {value!r}")
    if not _valid_name(m.name):
        raise ValueError(f"field 'name' {m.name!r} must be lower-case letters, digits, '-' or '_'")
    if not isinstance(m.band, PriorityBand):
        raise ValueError(f"field 'band' must be a PriorityBand, got {m.band!r}")  # noqa: TRY004 - the contract's one error for a bad manifest (plugins and tests catch ValueError)
    if isinstance(m.priority, bool) or not isinstance(m.priority, int) or not 0 <= m.priority <= 99:
        raise ValueError(f"field 'priority' must be an int in 0..99 inside its band, got {m.priority!r}")
    if not isinstance(m.device_types, tuple) or not m.device_types:
        raise ValueError("field 'device_types' must be a non-empty tuple of device type names")
    for t in m.device_types:
        if not isinstance(t, str) or not valid_type_name(t):
            raise ValueError(f"device type {t!r} must be lower-case letters, digits or '_'")
    if not isinstance(m.capabilities, Capabilities):
        raise ValueError("field 'capabilities' must be a Capabilities or a dict of its fields")  # noqa: TRY004 - the contract's one error for a bad manifest (plugins and tests catch ValueError)
    ops = m.capabilities.graph_ops
    if ops is not None and (not isinstance(ops, (tuple, list)) or not all(isinstance(o, str) for o in ops)):
        raise ValueError("field 'capabilities.graph_ops' must be None or a tuple of opset op names")
    dts = m.capabilities.graph_dtypes
    if not isinstance(dts, (tuple, list)) or not all(isinstance(d, str) for d in dts):
        raise ValueError("field 'capabilities.graph_dtypes' must be a tuple of dtype names")
    host = m.capabilities.host_runtime
    if host is not None and (not isinstance(host, str) or not _valid_name(host)):
        raise ValueError(f"field 'capabilities.host_runtime' must be None or a runtime name (lower-case letters, digits, '-' or '_'), got {host!r}")
    start = m.capabilities.host_runtime_start_s
    if start is not None and (isinstance(start, bool) or not isinstance(start, (int, float)) or not 0 <= start < float("inf")):
        raise ValueError(f"field 'capabilities.host_runtime_start_s' must be None or a number of seconds >= 0, got {start!r}")
    _check_compile_options(m.capabilities.compile_options)
    if m.emulation is not None and not isinstance(m.emulation, str):
        raise ValueError("field 'emulation' must be a string token or None")
    if not isinstance(m.exports, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in m.exports.items()
    ):
        raise ValueError("field 'exports' must map facade module names to plugin module names")
    api_compatible(m.api)  # raises ValueError for a malformed range


#: Names a plugin may not declare as options: ``nx.compile``'s own parameters (an option of that
#: name could never be passed as a keyword) and the keys the core sets in ``CompileOptions.extra``
#: itself (``shape_buckets``: the model is bucketed, see ``neurenix_core.graph.compile.buckets``).
RESERVED_OPTION_NAMES: Final = frozenset({
    "model", "device", "precision", "quantize", "calibration", "calibration_method", "progress", "outputs",
    "buckets", "pad_values", "verify", "mixed_precision", "options", "shape_buckets",
})
#: Longest option value a manifest may list: values appear in error messages.
_VALUE_LIMIT: Final = 100


def _check_compile_options(options: object) -> None:
    """ValueError naming the first malformed declaration in ``capabilities.compile_options``."""
    if options is None:
        return
    if not isinstance(options, tuple) or not all(isinstance(o, CompileOption) for o in options):
        raise ValueError("field 'capabilities.compile_options' must be None or a tuple of CompileOption")
    seen: set[str] = set()
    for o in options:
        where = f"capabilities.compile_options[{o.name!r}]"
        if not isinstance(o.name, str) or not o.name.isidentifier() or not o.name.isascii():
            raise ValueError(f"field 'capabilities.compile_options': option name {o.name!r} must be a Python identifier")
        if o.name in RESERVED_OPTION_NAMES or o.name in seen:
            why = "declared twice" if o.name in seen else "reserved: nx.compile's own parameter or a key the core sets"
            raise ValueError(f"field {where!r}: the name is {why}")
        seen.add(o.name)
        if not isinstance(o.type, str) or not o.type or not set(o.type.split("|")) <= set(OPTION_TYPES):
            raise ValueError(f"field {where + '.type'!r} must be one of {', '.join(OPTION_TYPES)} or several joined with '|', got {o.type!r}")
        if o.values is not None and not _plain_values(o.values):
            raise ValueError(f"field {where + '.values'!r} must be None or a non-empty tuple of short printable strings, numbers or bools")
        if not isinstance(o.doc, str):
            raise ValueError(f"field {where + '.doc'!r} must be a string")  # noqa: TRY004 - the contract's one error for a bad manifest (plugins and tests catch ValueError)


def _plain_values(values: object) -> bool:
    if not isinstance(values, tuple) or not values:
        return False
    for v in values:
        if isinstance(v, str) and not (v.isprintable() and len(v) <= _VALUE_LIMIT):
            return False
        if not isinstance(v, (str, int, float)):  # bool is an int
            return False
    return True
