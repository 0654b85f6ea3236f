"""Plugin names this repository owns, and which entry points are ours (trusted) or squatters.

The entry point name is the plugin's identity: ``NEURENIX_BACKENDS=tpu``, ``nx.backends()``, the
facade's ``neurenix.hardware.tpu``. Without reservation any installed package could register
``cpu`` earlier on ``sys.path`` and switch off the host backend, or take ``tpu`` and receive what
users meant for neurenix-tpu. A reserved name is honoured only from its own distribution *and*
module: checking the module as well stops a package that calls its dist-info ``neurenix-core``.

One name per plugin: a plugin's entry point name is the device type it serves (``cuda``, ``npu``,
``ort``), the word users already type in ``nx.compile(device="npu")`` and ``NEURENIX_EMULATE=npu``.
The name its distribution suggests (``neurenix-npu-openvino`` -> ``npu-openvino``) is accepted as
an alias wherever a plugin name is taken (:func:`alias_of`); messages print the entry point name.
The alias is read from the entry point's distribution, so it is known before the plugin is
imported (``NEURENIX_BACKENDS=-npu-openvino`` denies without importing it).
"""

from __future__ import annotations

from typing import Final

__all__ = ["RESERVED", "alias_of", "is_own", "normalize", "squatting"]

#: name -> (distribution, entry point module). Kept equal to the pyproject.toml files of this
#: repository by tests/plugin_system/test_hostile_plugins.py.
RESERVED: Final[dict[str, tuple[str, str]]] = {
    "cpu": ("neurenix-core", "neurenix_core.backends.cpu"),
    "cuda": ("neurenix-cuda-tc", "neurenix_cuda_tc.plugin"),
    "tpu": ("neurenix-tpu", "neurenix_tpu.plugin"),
    "npu": ("neurenix-npu-openvino", "neurenix_npu_openvino.plugin"),
    "edgetpu": ("neurenix-edgetpu", "neurenix_edgetpu.plugin"),
    # The entry point names of releases before one name per plugin: they are the aliases now, and
    # stay reserved (and trusted from their own distribution, for an older install).
    "cuda-tc": ("neurenix-cuda-tc", "neurenix_cuda_tc.plugin"),
    "npu-openvino": ("neurenix-npu-openvino", "neurenix_npu_openvino.plugin"),
}

def normalize(distribution: str | None) -> str:
    """PEP 503 normalisation: ``Neurenix_Core`` and ``neurenix-core`` are one distribution.

    String methods rather than ``re.sub("[-_.]+", "-", ...)``: no pattern to compile at import.
    """
    name = (distribution or "").lower().replace("_", "-").replace(".", "-")
    while "--" in name:
        name = name.replace("--", "-")
    return name


def alias_of(name: str, distribution: str | None) -> str | None:
    """The other name a plugin answers to: its distribution's name without ``neurenix-``
    (``neurenix-npu-openvino`` -> ``npu-openvino``), or None when that is its name already, the
    distribution is not called ``neurenix-*``, or it is the core itself."""
    dist = normalize(distribution)
    if not dist.startswith("neurenix-") or dist == "neurenix-core":
        return None
    alias = dist[len("neurenix-"):]
    return alias if alias and alias != name else None


def is_own(name: str, distribution: str | None, module: str) -> bool:
    """True for this repository's own plugins (and the built-in cpu), exactly as they ship."""
    owner = RESERVED.get(name)
    return owner is not None and owner == (normalize(distribution), module.strip())


def squatting(name: str, distribution: str | None, module: str) -> str | None:
    """Why an entry point may not use ``name``, or None when it may."""
    owner = RESERVED.get(name)
    if owner is None or is_own(name, distribution, module):
        return None
    dist, expected = owner
    who = distribution or "a distribution without metadata"
    if normalize(distribution) == dist:
        return (
            f"plugin name {name!r} is reserved for {dist} ({expected}), but this {who} entry point "
            f"names {module!r}: another package impersonates {dist}; uninstall it"
        )
    return (
        f"plugin name {name!r} is reserved for {dist}; {who} cannot take it. "
        f"Rename the entry point of {who}, or uninstall it (the {dist} plugin is unaffected)"
    )
