"""Device and DeviceType: small hashable values, open to types that plugins add.

``DeviceType`` is deliberately not a closed ``Enum``: a vendor's plugin declares a new type in
its manifest (``device_types=("ort",)``) and ``DeviceType.ORT`` / ``Device("ort:0")`` work without
the core knowing the name. Built-in names are only conveniences.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar, Final, Protocol, final

from neurenix_core.errors import BackendUnavailableError, InvalidDeviceError

__all__ = ["TYPE_ALIASES", "Device", "DeviceDirectory", "DeviceLike", "DeviceType", "suggest_device", "use_directory"]


class DeviceDirectory(Protocol):
    """What a Device asks about itself; the plugin registry is the one implementation."""

    def has_device(self, device: Device) -> bool: ...

    def is_emulated(self, device: Device) -> bool: ...

    def plugin_for(self, device: Device) -> Any: ...

    def device_hint(self, text: str) -> str:
        """" Did you mean 'npu:0' (plugin npu)?" for a device string no plugin serves, or ""."""
        ...


# Set by ``neurenix_core.plugins.state`` each time it (re)builds the registry: the registry is passed
# down to this value type rather than looked up from here (device.py imports nothing of the core).
_directory: DeviceDirectory | None = None


def use_directory(directory: DeviceDirectory) -> None:
    """Answer ``Device.is_available()`` / ``.emulated`` / ``.backend_name`` from ``directory``."""
    global _directory
    _directory = directory


def _lookup() -> DeviceDirectory:
    if _directory is None:
        raise BackendUnavailableError("no plugin registry yet: import neurenix_core before asking a Device about its backend")
    return _directory

#: Names users write for a device type that neurenix calls otherwise. Only real equivalents:
#: PyTorch's and TensorFlow's "gpu" is a CUDA device here; Intel's NPU driver is ``intel_vpu``;
#: Coral is the Edge TPU's product name. Suggested only where an installed plugin serves the target.
TYPE_ALIASES: Final = {"gpu": "cuda", "vpu": "npu", "coral": "edgetpu", "edge_tpu": "edgetpu"}


def suggest_device(text: str, served: Mapping[str, int], *, fuzzy: bool = True) -> str | None:
    """The device string a user most likely meant by ``text``, or None when nothing is close:
    ``"npu0"`` -> ``"npu:0"``, ``"CUDA-0"`` -> ``"cuda:0"``, ``"gpu"`` -> ``"cuda:0"``,
    ``"Edge-TPU"`` -> ``"edgetpu:0"``; with ``fuzzy`` also misspellings (``"nup:1"`` -> ``"npu:1"``).
    ``served`` maps device types to their device count; an index beyond it becomes 0."""
    m = re.fullmatch(r"\s*([A-Za-z][A-Za-z_\- ]*?)[\s:_\-]*(\d*)\s*", text)
    if m is None or not served:
        return None
    kind = m.group(1).lower().replace("-", "_").replace(" ", "_")
    found = next((k for k in (kind, kind.replace("_", ""), TYPE_ALIASES.get(kind)) if k is not None and k in served), None)
    if found is None and fuzzy:
        near = sorted(t for t in served if _one_edit(kind, t))
        found = near[0] if len(near) == 1 else None  # two as near (tpuu: tpu? cpu?) is no answer
    if found is None:
        return None
    index = int(m.group(2)) if m.group(2) else 0
    return f"{found}:{index if index < max(served[found], 1) else 0}"


def _one_edit(a: str, b: str) -> bool:
    """``a`` is ``b`` with one letter added, dropped or two neighbours swapped (``nup``, ``cdua``,
    ``edgtpu``), or, for names of five letters or more, one letter replaced (``edgetpo``).
    Replacing one letter of a three-letter name is not a misspelling: ``xpu`` is not ``tpu``."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        swapped = len(diff) == 2 and diff[1] == diff[0] + 1 and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]]
        return swapped or (len(diff) == 1 and len(b) >= 5)
    short, long = (a, b) if len(a) < len(b) else (b, a)
    return any(long[:i] + long[i + 1:] == short for i in range(len(long)))


def _did_you_mean(text: str) -> str:
    """The plugin registry's "did you mean" for a malformed device string ("" before it exists)."""
    return _directory.device_hint(text) if _directory is not None else ""


_TYPE_NAME: Final = r"^[a-z][a-z0-9_]*$"
_LOWER: Final = frozenset("abcdefghijklmnopqrstuvwxyz")
_TYPE_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")


def valid_type_name(key: str) -> bool:
    """``re.match(_TYPE_NAME, key)``: a plain name is checked with sets, without compiling the regex
    at import (~50 µs); anything else goes to the regex, so both always agree."""
    if key[:1] in _LOWER and _TYPE_CHARS.issuperset(key):
        return True
    return re.match(_TYPE_NAME, key) is not None


class _DeviceTypeMeta(type):
    # Attribute access such as DeviceType.ORT resolves any type a plugin has registered, so
    # seed-style code keeps working for vendor types too.
    def __getattr__(cls, attr: str) -> DeviceType:
        name = attr.lower()
        registry: dict[str, DeviceType] = cls.__dict__["_registry"]
        if attr.isupper() and name in registry:
            return registry[name]
        raise AttributeError(
            f"DeviceType has no member {attr!r}; known types: {sorted(registry)}. "
            "A plugin adds its own type when it is installed."
        )


@final
class DeviceType(str, metaclass=_DeviceTypeMeta):
    """The kind of a device (``"cpu"``, ``"tpu"``, ``"npu"``, ...), an interned lower-case string."""

    __slots__ = ()
    _registry: ClassVar[dict[str, DeviceType]] = {}

    CPU: ClassVar[DeviceType]
    CUDA: ClassVar[DeviceType]
    TPU: ClassVar[DeviceType]
    NPU: ClassVar[DeviceType]
    EDGETPU: ClassVar[DeviceType]

    def __new__(cls, name: str | DeviceType) -> DeviceType:
        if isinstance(name, DeviceType):
            return name
        if not isinstance(name, str):
            raise InvalidDeviceError(f"a device type is a string such as 'npu', not {type(name).__name__}")
        key = name.strip().lower()
        found = cls._registry.get(key)
        if found is not None:
            return found
        if not valid_type_name(key):
            raise InvalidDeviceError(
                f"invalid device type {name!r}: use lower-case letters, digits and '_' (e.g. 'npu').{_did_you_mean(name)}"
            )
        obj = super().__new__(cls, key)
        cls._registry[key] = obj
        return obj

    @classmethod
    def known(cls) -> tuple[DeviceType, ...]:
        """Every type created so far (built-ins and those declared by discovered plugins)."""
        return tuple(cls._registry.values())

    def __repr__(self) -> str:
        return f"DeviceType({str(self)!r})"


for _builtin in ("cpu", "cuda", "tpu", "npu", "edgetpu"):
    setattr(DeviceType, _builtin.upper(), DeviceType(_builtin))


@final
class Device:
    """A device: a type and an index. ``Device("npu:0") == Device("npu", 0) == Device(DeviceType.NPU, 0)``.

    Construction only parses; whether a backend serves the device is asked with
    :meth:`is_available` or answered by an error when the device is used.
    """

    __slots__ = ("_hash", "_index", "_type")

    _type: DeviceType
    _index: int
    _hash: int

    def __init__(self, type: DeviceLike | DeviceType | str, index: int | None = None) -> None:
        if isinstance(type, Device):
            if index is not None and index != type.index:
                raise InvalidDeviceError(f"conflicting index {index} for device {type}")
            dtype_, idx = type.type, type.index
        elif isinstance(type, str) and ":" in type:
            if index is not None:
                raise InvalidDeviceError(f"device {type!r} already has an index; do not also pass {index}")
            dtype_, idx = _parse(type)
        else:
            dtype_, idx = DeviceType(type), 0 if index is None else index
        if isinstance(idx, bool) or not isinstance(idx, int) or idx < 0:
            raise InvalidDeviceError(f"device index must be a non-negative int, got {idx!r} for {dtype_!s}")
        self._type = dtype_
        self._index = idx
        self._hash = hash((str(dtype_), idx))

    @property
    def type(self) -> DeviceType:
        return self._type

    @property
    def index(self) -> int:
        return self._index

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Device):
            return self._index == other._index and self._type is other._type
        if isinstance(other, str):
            try:
                return self == Device(other)
            except InvalidDeviceError:
                return False
        return NotImplemented

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"Device({str(self._type)!r}, {self._index})"

    def __str__(self) -> str:
        return f"{self._type}:{self._index}"

    # Registry-backed facts, answered by the directory the plugin state hands down (use_directory).
    def is_available(self) -> bool:
        """True when an installed backend serves this device (emulated devices count)."""
        return _lookup().has_device(self)

    @property
    def emulated(self) -> bool:
        """True when the device runs its backend's software stack on the host CPU."""
        return _lookup().is_emulated(self)

    @property
    def backend_name(self) -> str:
        """Name of the plugin that serves this device."""
        return str(_lookup().plugin_for(self).name)


DeviceLike = Device | str


def _parse(text: str) -> tuple[DeviceType, int]:
    kind, _, raw = text.strip().partition(":")
    if not (raw.isascii() and raw.isdigit()):  # str.isdigit() is also true for '²', which int() refuses
        raise InvalidDeviceError(f"invalid device string {text!r}: expected 'type:index' such as 'npu:0'.{_did_you_mean(text)}")
    return DeviceType(kind), int(raw)


def as_device(value: Any) -> Device:
    """Coerce a ``Device`` or a device string to a ``Device`` (``"npu"`` means ``"npu:0"``)."""
    if isinstance(value, Device):
        return value
    if isinstance(value, (str, DeviceType)):
        return Device(value)
    raise InvalidDeviceError(f"expected a Device or a string such as 'cpu:0', got {type(value).__name__}")
