"""The one error hierarchy of neurenix.

Every message names the device or plugin involved and the remedy, so a user can act on it
without reading our source. Errors that replace a native framework error keep it as
``__cause__``: nothing is swallowed.
"""

from __future__ import annotations

__all__ = [
    "ArtifactError",
    "ArtifactFormatError",
    "ArtifactMismatchError",
    "ArtifactUnsupportedError",
    "BackendUnavailableError",
    "CompilationError",
    "ConfigurationError",
    "ConfigurationWarning",
    "DeviceMismatchError",
    "DeviceNotFoundError",
    "DistributedError",
    "FacadeExportError",
    "FallbackError",
    "InvalidDeviceError",
    "InvalidOptionError",
    "ModelFormatError",
    "NeurenixError",
    "NeurenixWarning",
    "NotDifferentiableError",
    "OperationError",
    "OutOfMemoryError",
    "PluginError",
    "QuantizationError",
    "RankFailedError",
    "SaveError",
    "ShapeError",
    "StrictModeError",
    "TransferError",
    "UnsupportedDTypeError",
    "UnsupportedOperationError",
    "WorldSizeMismatchError",
]


class NeurenixError(Exception):
    """Base class of every error neurenix raises on purpose."""


class NeurenixWarning(UserWarning):
    """Base class of neurenix warnings (fallbacks, recompilations, skipped plugins)."""


class PluginError(NeurenixError):
    """A backend plugin failed in one of its phases (import, manifest, api, probe, backend)."""

    def __init__(self, message: str, *, plugin: str, distribution: str | None, phase: str) -> None:
        super().__init__(message)
        self.plugin = plugin
        self.distribution = distribution
        self.phase = phase


class FacadeExportError(PluginError, ImportError):
    """A plugin's ``Manifest.exports`` names a module that cannot be imported; raised by
    ``import neurenix.<facade>`` (an ImportError, so ``except ImportError`` still works)."""

    def __init__(self, message: str, *, plugin: str, distribution: str | None, facade: str, module: str) -> None:
        super().__init__(message, plugin=plugin, distribution=distribution, phase="exports")
        self.facade = facade
        self.module = module


class StrictModeError(NeurenixError):
    """NEURENIX_STRICT=1 and at least one plugin failed during discovery."""


class ConfigurationError(NeurenixError):
    """An environment variable or setting has a value neurenix cannot use."""


class ConfigurationWarning(NeurenixWarning):
    """A NEURENIX_* value was read in a documented way that may not be what was meant (an unknown
    plugin name, a clamped timeout); ``NEURENIX_STRICT=1`` makes these ConfigurationError."""


class InvalidOptionError(ConfigurationError, ValueError):
    """A compile option has a value the device's plugin (or the core) does not declare: the wrong
    type, or not one of its values (``runtime="onnx"`` where no host runtime is called so). Raised
    by ``nx.compile``, naming the device, the plugin, the option and the values it takes."""


class InvalidDeviceError(NeurenixError, ValueError):
    """A device string or index is malformed (``"npu:x"``, negative index)."""


class DeviceNotFoundError(NeurenixError, LookupError):
    """The device is well-formed but no installed backend serves it, or its index is out of range."""


class BackendUnavailableError(NeurenixError):
    """A backend was requested explicitly but its hardware, driver or runtime is missing."""


class DeviceMismatchError(NeurenixError, ValueError):
    """Tensors on two different devices were combined without an explicit transfer."""


class UnsupportedDTypeError(NeurenixError, TypeError):
    """A dtype is not supported by the device it was requested on."""


class UnsupportedOperationError(NeurenixError):
    """An operation or layer cannot run on, or be lowered to, the device asked for.

    ``node`` names the graph node a plugin's lowering refused (set by the lowering loop): the core
    then places that node on cpu:0 and compiles the rest, instead of refusing the whole model."""

    def __init__(self, *args: object, node: str | None = None) -> None:
        super().__init__(*args)
        self.node = node


class NotDifferentiableError(UnsupportedOperationError):
    """backward() reached an op that has no gradient rule (or arguments its rule cannot differentiate)."""


class ShapeError(NeurenixError, ValueError):
    """Operand shapes do not fit the operation (matmul inner dims, broadcast, model input)."""


class OperationError(NeurenixError, ValueError):
    """A backend's op rejected its arguments for a reason other than shape or dtype (the native
    error is kept as ``__cause__``; the message names the op and the device)."""


class OutOfMemoryError(NeurenixError, MemoryError):
    """An allocation would exceed the memory limit set for a device."""

    def __init__(self, message: str, *, device: str, limit: int, in_use: int, requested: int) -> None:
        super().__init__(message)
        self.device = device
        self.limit = limit
        self.in_use = in_use
        self.requested = requested


class FallbackError(NeurenixError):
    """An op is not native to a backend and the fallback policy is ``error``."""


class CompilationError(NeurenixError):
    """A model could not be compiled for a device."""


class ModelFormatError(NeurenixError, ValueError):
    """A weights file or model file is corrupted, truncated or of the wrong format."""


class QuantizationError(NeurenixError, ValueError):
    """Calibration data or quantization settings are unusable (NaN/inf, empty, bad precision)."""


class SaveError(NeurenixError, OSError):
    """A save could not write its file or folder: disk full, read-only filesystem, permission
    denied, or a target that holds something else. The message names the path and the remedy; the
    previous version at the path is unchanged and nothing partial is left (docs/saving.md). It is an
    ``OSError`` (``errno`` set where the system gave one), as the bare error it replaces was."""


class TransferError(NeurenixError):
    """A tensor could not be exchanged (DLPack, host copy) in the way requested."""


class ArtifactError(NeurenixError):
    """A compiled artifact (``compiled.save`` / ``nx.load_compiled``, docs/deploy.md) cannot be written or used."""


class ArtifactFormatError(ArtifactError, ModelFormatError):
    """A compiled artifact is corrupted, truncated, incomplete, or written by a newer neurenix."""


class ArtifactMismatchError(ArtifactError):
    """A compiled artifact was written for another plugin, plugin version, runtime or device type
    than the one that would load it (or its plugin is not installed)."""


class ArtifactUnsupportedError(ArtifactError):
    """A compiled model cannot be saved as an artifact: its plugin does not implement the
    artifact hooks (API 1.3), or it runs in a form with no artifact (a graph per input value)."""


class DistributedError(NeurenixError):
    """``nx.distributed``: the launch environment, the engine (torch.distributed, jax.distributed,
    Ray) or a collective failed; the message names the rank(s) and the remedy."""


class RankFailedError(DistributedError):
    """Another process of the job died, failed or stopped answering during a collective;
    ``ranks`` lists the ones that did (empty when they cannot be told apart)."""

    def __init__(self, message: str, *, ranks: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.ranks = ranks


class WorldSizeMismatchError(DistributedError):
    """The processes of a job disagree on its world size, or fewer joined than it declares."""
