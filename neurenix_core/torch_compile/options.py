"""``torch.compile(model, backend="neurenix", options={...})``: the options, checked once.

The names mean what ``nx.compile``'s parameters mean (``device``, ``precision``, ``quantize``,
``calibration``, ``buckets``, ``verify``), plus ``fallback``: the fallback policy
(``nx.fallback_policy``: "error" | "warn" | "allow") while the backend imports, compiles and runs
each graph, which also decides what happens to a graph neurenix cannot import (run by PyTorch with
a warning, or an error). Any other name is a device option (``runtime``, ``threads``, a plugin's
own), checked by ``nx.compile`` against the device, so a misspelt one (``devcie``) is refused
with the closest valid name before anything compiles.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from neurenix_core.config import FALLBACK_POLICIES
from neurenix_core.errors import InvalidOptionError

__all__ = ["OWN_OPTIONS", "TorchCompileOptions", "parse"]

#: The options with a meaning of their own here (nx.compile's parameters and the fallback policy).
OWN_OPTIONS: Final = ("device", "precision", "quantize", "calibration", "buckets", "verify", "fallback")


@dataclass(frozen=True)
class TorchCompileOptions:
    device: Any = None
    precision: str | None = None
    quantize: Any = None
    calibration: Any = None
    buckets: Any = None
    verify: bool = True
    fallback: str | None = None
    #: everything else: the device's options (nx.compile(options=...)), checked there
    device_options: Mapping[str, Any] = field(default_factory=dict)

    def compile_kwargs(self) -> dict[str, Any]:
        """nx.compile's keyword arguments for these options."""
        return {"precision": self.precision, "quantize": self.quantize, "calibration": self.calibration,
                "buckets": self.buckets, "verify": self.verify, "options": dict(self.device_options)}


_WHO: Final = "torch.compile(backend='neurenix')"


def parse(options: Mapping[str, Any] | None) -> TorchCompileOptions:
    """The options of one ``torch.compile`` call, checked against the device they name (or the
    default device): an unknown device, an unknown option name (TypeError naming the closest
    valid one) or a bad value (InvalidOptionError) is refused before anything compiles."""
    parsed = _parse(options)
    _check_device(parsed)
    return parsed


def _parse(options: Mapping[str, Any] | None) -> TorchCompileOptions:
    if options is None:
        return TorchCompileOptions()
    if not isinstance(options, Mapping):
        raise InvalidOptionError(f"{_WHO}: options must be a dict, got {type(options).__name__}")
    own = {k: v for k, v in options.items() if k in OWN_OPTIONS}
    rest = {k: v for k, v in options.items() if k not in OWN_OPTIONS}
    fallback = own.get("fallback")
    if fallback is not None and fallback not in FALLBACK_POLICIES:
        raise InvalidOptionError(f"torch.compile(backend='neurenix'): fallback={fallback!r} is not a fallback policy; "
                                 f"use one of {', '.join(FALLBACK_POLICIES)}")
    if not isinstance(own.get("verify", True), bool):
        raise InvalidOptionError("torch.compile(backend='neurenix'): verify must be True or False")
    return TorchCompileOptions(device_options=rest, **own)


def _check_device(options: TorchCompileOptions) -> None:
    from neurenix_core.graph.compile.compiler import _PARAMETERS
    from neurenix_core.graph.compile.options import accepted_options, checked
    from neurenix_core.kwargs import closest
    from neurenix_core.plugins.state import registry
    from neurenix_core.tensor.placement import default_backend

    _, dev, _ = default_backend(options.device)
    record = registry().plugin_for(dev)
    valid = {o.name for o in accepted_options(record)}
    for name in options.device_options:
        near = None if name in valid else closest(name, (*OWN_OPTIONS, *valid))
        if near in OWN_OPTIONS:  # a misspelt option of this backend's own (``devcie``)
            raise TypeError(f"{_WHO}: unknown option {name!r}; did you mean {near!r}?")
    checked(dev, record, {}, dict(options.device_options), _PARAMETERS, function="torch.compile")
