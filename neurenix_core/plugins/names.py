"""Plugin names this repository owns, and which entry points are ours (trusted) or squatters.

The entry point name is the plugin's identity: ``NEURENIX_BACKENDS=tpu``, ``nx.backends()``, the
facade's ``neurenix.hardware.tpu``. Without reservation any installed package could register
``cpu`` earlier on ``sys.path`` and switch off the host backend, or take ``tpu`` and receive what
users meant for neurenix-tpu. A reserved name is honoured only from its own distribution *and*
module: checking the module as well stops a package that calls its dist-info ``neurenix-core``.
"""

from __future__ import annotations

from typing import Final

__all__ = ["RESERVED", "is_own", "normalize", "squatting"]

#: name -> (distribution, entry point module). Kept equal to the pyproject.toml files of this
#: repository by tests/plugin_system/test_hostile_plugins.py.
RESERVED: Final[dict[str, tuple[str, str]]] = {
    "cpu": ("neurenix-core", "neurenix_core.backends.cpu"),
    "cuda-tc": ("neurenix-cuda-tc", "neurenix_cuda_tc.plugin"),
    "tpu": ("neurenix-tpu", "neurenix_tpu.plugin"),
    "npu-openvino": ("neurenix-npu-openvino", "neurenix_npu_openvino.plugin"),
    "edgetpu": ("neurenix-edgetpu", "neurenix_edgetpu.plugin"),
}

def normalize(distribution: str | None) -> str:
    """PEP 503 normalisation: ``Neurenix_Core`` and ``neurenix-core`` are one distribution.

    String methods rather than ``re.sub("[-_.]+", "-", ...)``: no pattern to compile at import.
    """
    name = (distribution or "").lower().replace("_", "-").replace(".", "-")
    while "--" in name:
        name = name.replace("--", "-")
    return name


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
