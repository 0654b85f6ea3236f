"""Cloud TPU detection without importing JAX: device nodes, PCI ids and an installed libtpu.

Runs at ``import neurenix_core`` inside the core's bounded probe, so it only looks at files and
environment variables. Importing JAX here would initialise PJRT (seconds, and it grabs the TPU).
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Mapping
from typing import Final, NamedTuple

from neurenix_core.contract import ProbeContext, ProbeResult

__all__ = ["TPUPresence", "emulated_device_count", "missing_reason", "probe", "scan"]

# Google's PCI vendor id; every Cloud TPU chip shows up as one PCI function with it.
GOOGLE_PCI_VENDOR: Final = "0x1ae0"
# PCI device id -> chip generation, as libtpu's own tpu-info tool maps them. v2 and v3 share an
# id, so that one is reported as "v2/v3" rather than guessed.
CHIP_BY_PCI_ID: Final[Mapping[str, str]] = {
    "0x0027": "v2/v3",
    "0x005e": "v4",
    "0x0063": "v5e",
    "0x0062": "v5p",
    "0x006f": "v6e",
}
# A plain string: ``re`` compiles (and caches) it when emulation asks, not at every import.
_FORCE_COUNT: Final = r"--xla_force_host_platform_device_count=(\d+)"


# A NamedTuple, not a dataclass: this module is imported by `import neurenix_core`, and
# creating a dataclass costs ~2 ms there.
class TPUPresence(NamedTuple):
    """What the file system says about TPUs on this machine."""

    accel_nodes: tuple[str, ...]
    vfio_nodes: tuple[str, ...]
    pci_chips: tuple[str, ...]
    libtpu: str | None

    @property
    def chip_count(self) -> int:
        # PCI functions are the most precise count; device nodes are the fallback (no /sys in
        # some containers), accel first because v2-v4 expose one /dev/accelN per chip.
        return len(self.pci_chips) or len(self.accel_nodes) or len(self.vfio_nodes)

    @property
    def has_nodes(self) -> bool:
        return bool(self.accel_nodes or self.vfio_nodes or self.pci_chips)


_ASCII_DIGITS: Final = frozenset("0123456789")


def _entries(folder: str, prefix: str = "") -> list[str]:
    """Sorted paths of the non-hidden entries of ``folder`` whose name starts with ``prefix``: what
    ``glob.glob(folder + "/" + prefix + "*")`` returns, without importing glob at import time."""
    try:
        names = os.listdir(folder)
    except OSError:  # no such folder: no such device nodes
        return []
    return sorted(os.path.join(folder, n) for n in names if n.startswith(prefix) and not n.startswith("."))


def _read(path: str) -> str:
    with open(path) as fh:
        return fh.read().strip()


def _pci_chips(root: str | os.PathLike[str]) -> tuple[str, ...]:
    # os.listdir and open rather than pathlib's glob and read_text: a server has hundreds of PCI
    # functions and this runs at every ``import neurenix_core``.
    root = os.fspath(root)
    try:
        names = sorted(os.listdir(root))
    except OSError:  # no /sys in this container: no PCI functions to read
        return ()
    chips: list[str] = []
    for name in names:
        try:
            if _read(os.path.join(root, name, "vendor")) != GOOGLE_PCI_VENDOR:
                continue
            pci_id = _read(os.path.join(root, name, "device"))
        except OSError:
            continue  # a PCI function we may not read is not a TPU we could use either
        chips.append(CHIP_BY_PCI_ID.get(pci_id, f"unknown ({pci_id})"))
    return tuple(chips)


def _libtpu(env: Mapping[str, str]) -> str | None:
    path = env.get("TPU_LIBRARY_PATH")
    if path:
        return path if os.path.exists(path) else None
    spec = importlib.util.find_spec("libtpu")
    return spec.origin if spec is not None and spec.origin else ("libtpu" if spec is not None else None)


def scan(env: Mapping[str, str] | None = None, dev_root: str = "/dev", pci_root: str = "/sys/bus/pci/devices") -> TPUPresence:
    """Look for TPU device nodes, Google PCI functions and libtpu (roots are parameters for tests)."""
    env = os.environ if env is None else env
    return TPUPresence(
        accel_nodes=tuple(p for p in _entries(dev_root, "accel") if os.path.basename(p)[5:6] in _ASCII_DIGITS),
        vfio_nodes=tuple(p for p in _entries(os.path.join(dev_root, "vfio")) if os.path.basename(p).isdigit()),
        pci_chips=_pci_chips(pci_root),
        libtpu=_libtpu(env),
    )


def emulated_device_count(env: Mapping[str, str] | None = None) -> int:
    """JAX's CPU platform has N devices with XLA_FLAGS=--xla_force_host_platform_device_count=N, else 1.

    The probe may not import JAX, so it reads the same flag JAX will read when it starts.
    """
    env = os.environ if env is None else env
    found = re.findall(_FORCE_COUNT, env.get("XLA_FLAGS", ""))
    return max(1, int(found[-1])) if found else 1  # XLA takes the last occurrence


def missing_reason(presence: TPUPresence) -> str:
    """One actionable sentence saying which piece (device nodes or libtpu) is absent."""
    # The core appends the NEURENIX_EMULATE remedy itself; this sentence names the missing piece.
    if not presence.has_nodes:
        return (
            "no Cloud TPU found: no /dev/accel<N> or /dev/vfio/<N> device node and no Google TPU PCI device; "
            "run on a Cloud TPU VM with libtpu (pip install 'neurenix-tpu[tpu]')"
        )
    return (
        f"TPU device nodes are present ({', '.join((presence.accel_nodes + presence.vfio_nodes)[:4]) or 'PCI only'}) "
        f"but libtpu is not installed: pip install 'neurenix-tpu[tpu]' (jax[tpu]) or set TPU_LIBRARY_PATH to libtpu.so"
    )


def probe(context: ProbeContext, env: Mapping[str, str] | None = None) -> ProbeResult:
    env = os.environ if env is None else env
    if context.emulate:
        if importlib.util.find_spec("jax") is None or importlib.util.find_spec("jaxlib") is None:
            return ProbeResult.missing("NEURENIX_EMULATE=tpu needs JAX on the host: pip install jax")
        count = emulated_device_count(env)
        return ProbeResult.emulating(count, reason="JAX CPU platform", platform="cpu", xla_flags=env.get("XLA_FLAGS", ""))
    presence = scan(env)
    if not presence.has_nodes or presence.libtpu is None:
        return ProbeResult.missing(missing_reason(presence))
    if importlib.util.find_spec("jax") is None:
        return ProbeResult.missing("a Cloud TPU and libtpu are present but JAX is not installed: pip install 'neurenix-tpu[tpu]'")
    chips = sorted(set(presence.pci_chips)) or ["unknown"]
    return ProbeResult.found(presence.chip_count, chips=chips, libtpu=presence.libtpu, nodes=list(presence.accel_nodes + presence.vfio_nodes))
