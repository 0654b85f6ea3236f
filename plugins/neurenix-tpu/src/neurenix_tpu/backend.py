"""The TPU backend: JAX arrays committed to one PJRT device each, ops through ``jax.numpy``.

Imported by the backend factory only (first use of a ``tpu`` device). With emulation the very
same code runs on JAX's CPU platform: ``jax.devices("cpu")`` instead of ``jax.devices("tpu")``.
"""

from __future__ import annotations

import math
import os
import sys
import weakref
from operator import attrgetter
from typing import Any

import numpy as np

from neurenix_core.contract import DTYPES, ArrayNamespaceBackend
from neurenix_core.errors import BackendUnavailableError, DeviceNotFoundError, UnsupportedDTypeError

__all__ = ["TENSORCORES_PER_CHIP", "XLA_MEMORY_VARIABLES", "JaxTPUBackend"]

# TensorCores behind one JAX device, by device_kind. v4/v5p fuse two cores into one "megacore"
# device; v2/v3 expose each core as its own device; v5e/v6e chips have one core.
TENSORCORES_PER_CHIP: dict[str, int] = {
    "TPU v2": 1, "TPU v3": 1, "TPU v4": 2, "TPU v5 lite": 1, "TPU v5e": 1, "TPU v5": 2, "TPU v5p": 2, "TPU v6 lite": 1, "TPU v6e": 1,
}
# The allocator settings XLA reads when the client starts; we never change them, only report them.
XLA_MEMORY_VARIABLES: tuple[str, ...] = (
    "XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_ALLOCATOR", "TPU_PREMAPPED_BUFFER_SIZE",
)


def _import_jax(emulated: bool) -> Any:
    # JAX_PLATFORMS must be set before JAX starts its clients: with emulation we must not grab a
    # real TPU (or spend seconds initialising one) that another process may be using.
    if emulated and "JAX_PLATFORMS" not in os.environ and "jax" not in sys.modules:
        os.environ["JAX_PLATFORMS"] = "cpu"
    import jax

    return jax


def _platform_devices(jax: Any, emulated: bool) -> list[Any]:
    platform = "cpu" if emulated else "tpu"
    try:
        # This process's devices: under jax.distributed (nx.distributed.init) jax.devices() lists
        # every host's, and tpu:i must be one this process can address.
        return list(jax.local_devices(backend=platform))
    except RuntimeError as exc:
        if emulated:
            raise BackendUnavailableError(
                f"plugin tpu (neurenix-tpu): NEURENIX_EMULATE=tpu needs JAX's CPU platform but JAX could not start it "
                f"({exc}); unset JAX_PLATFORMS or include 'cpu' in it"
            ) from exc
        raise BackendUnavailableError(
            f"plugin tpu (neurenix-tpu): JAX found no TPU ({exc}). Check that libtpu is installed "
            "(pip install 'neurenix-tpu[tpu]'), that /dev/accel* or /dev/vfio/* exist and that no other process holds the TPU"
        ) from exc


# Two-operand array-API functions whose result dtype follows type promotion.
_PROMOTING_OPS: tuple[str, ...] = (
    "add", "atan2", "bitwise_and", "bitwise_left_shift", "bitwise_or", "bitwise_right_shift",
    "bitwise_xor", "copysign", "divide", "equal", "floor_divide", "greater", "greater_equal",
    "hypot", "less", "less_equal", "logaddexp", "logical_and", "logical_or", "logical_xor",
    "maximum", "minimum", "multiply", "nextafter", "not_equal", "pow", "remainder", "subtract", "matmul",
)
_RESULT_TYPES: dict[tuple[Any, Any], np.dtype[Any]] = {}


def _result_type(a: Any, b: Any) -> np.dtype[Any]:
    key = (a, b)
    found = _RESULT_TYPES.get(key)
    if found is None:
        from neurenix_core.contract import result_type

        found = _RESULT_TYPES[key] = result_type(np.dtype(a), np.dtype(b))
    return found


def _promoting(fn: Any) -> Any:
    def op(x1: Any, x2: Any, /) -> Any:
        t1, t2 = getattr(x1, "dtype", None), getattr(x2, "dtype", None)
        if t1 is not None and t2 is not None and t1 != t2:
            want = _result_type(t1, t2)
            x1 = x1 if t1 == want else x1.astype(want)
            x2 = x2 if t2 == want else x2.astype(want)
        return fn(x1, x2)

    op.__name__ = getattr(fn, "__name__", "op")
    return op


def _widening_ints(fn: Any) -> Any:
    """``fn(x, dtype=None)`` with the standard's accumulation dtype for small integers (int64 /
    uint64, as ``prod`` and ``cumulative_sum`` already give): jnp.cumulative_prod kept int8 (found
    by tests/differential)."""

    def op(x: Any, /, *, dtype: Any = None, **kwargs: Any) -> Any:
        if dtype is None and x.dtype.kind in "iu" and x.dtype.itemsize < 8:
            dtype = np.int64 if x.dtype.kind == "i" else np.uint64
        return fn(x, dtype=dtype, **kwargs)

    return op


class JaxTPUBackend(ArrayNamespaceBackend):
    """``tpu:i`` is ``jax.devices("tpu")[i]`` (or ``jax.devices("cpu")[i]`` when emulated)."""

    def __init__(self, *, emulated: bool) -> None:
        self._last_nbytes: tuple[Any, int] = (None, 0)  # see _nbytes_of
        jax = _import_jax(emulated)
        # Without x64 JAX silently turns float64/int64 data into 32-bit: neurenix never relabels
        # data, so 64-bit types stay 64-bit (matmuls in float32 are unaffected).
        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp

        from neurenix_tpu.kernels import EAGER_NN_OPS

        self.jax = jax
        self.jax_devices = _platform_devices(jax, emulated)
        super().__init__(jnp, device_type="tpu", device_count=len(self.jax_devices), emulated=emulated)
        # The concrete jax.Array class: the core skips result coercion for exactly this type.
        self.array_type = type(jax.device_put(np.zeros((), np.float32), self.jax_devices[0]))
        self._promote_binary_ops()
        self.ops.update(EAGER_NN_OPS)
        # JAX arrays are immutable: assignment returns a new array that the core stores.
        self.ops["__setitem__"] = lambda a, key, value: a.at[key].set(value)
        # jnp.searchsorted gives int32 even under x64; the standard's (and this device's declared)
        # indexing dtype is int64 (found by tests/differential).
        searchsorted = self.ops["searchsorted"]
        self.ops["searchsorted"] = lambda x1, x2, /, **kw: searchsorted(x1, x2, **kw).astype(jnp.int64)
        self.ops["cumulative_prod"] = _widening_ints(self.ops["cumulative_prod"])
        # Programs (device-resident weights + jit) live as long as a compiled model uses them.
        self.compile_cache: weakref.WeakValueDictionary[tuple[Any, ...], Any] = weakref.WeakValueDictionary()
        self._adopt_runtime_limits()

    def _compile_train_step(self, loss_fn: Any, model: Any, optimizer: Any) -> Any:
        """nx.compile_step on tpu: jax.value_and_grad + jax.jit of the model's forward and loss."""
        from neurenix_tpu.training import JaxTrainStep

        return JaxTrainStep(self.jax, loss_fn, model, optimizer)

    def _adopt_runtime_limits(self) -> None:
        # On a TPU, PJRT's bytes_limit already reflects XLA_PYTHON_CLIENT_MEM_FRACTION /
        # PREALLOCATE: enforcing it in the core turns XLA's RESOURCE_EXHAUSTED into our clear
        # OutOfMemoryError before anything is allocated. nx.set_memory_limit overrides it.
        for i, dev in enumerate(self.jax_devices):
            limit = (dev.memory_stats() or {}).get("bytes_limit")
            if limit:
                self.memory.set_limit(i, int(limit))

    def _promote_binary_ops(self) -> None:
        # JAX's promotion lattice differs from neurenix's (NumPy's) for mixed kinds:
        # int16 * float16 is float16 in JAX, float32 in nx.result_type. Mixed-dtype operands are
        # cast to neurenix's result type first; same-dtype calls (the hot path) pay one compare.
        for name in _PROMOTING_OPS:
            fn = self.ops.get(name)
            if fn is not None:
                self.ops[name] = _promoting(fn)

    # ---------------------------------------------------------------- private surface
    def _native_device(self, index: int) -> Any:
        if not 0 <= index < len(self.jax_devices):
            raise DeviceNotFoundError(
                f"tpu:{index} does not exist: JAX reports {len(self.jax_devices)} "
                f"{'emulated ' if self.emulated else ''}TPU device(s) (tpu:0..tpu:{len(self.jax_devices) - 1})"
            )
        return self.jax_devices[index]

    def _from_host(self, array: np.ndarray, index: int) -> Any:
        # device_put commits the array to that device, so jax.numpy ops on it run there and stay
        # there. On the CPU platform PJRT may alias an aligned NumPy buffer even with
        # may_alias=False, and the caller's later writes would show through: copy first there.
        # On a TPU the host-to-HBM transfer is the copy.
        if self.emulated:
            array = np.array(array, copy=True)
        return self.jax.device_put(array, self._native_device(index))

    def _copy_from_device(self, native: Any, index: int) -> Any:
        """tpu:i -> tpu:j without the host: device_put copies over the interconnect (ICI on TPU)."""
        dev = self._native_device(index)
        if native.devices() == {dev}:
            # device_put onto the array's own device returns the same buffer; a copy is asked for.
            return self.xp.array(native, copy=True)
        return self.jax.device_put(native, dev)

    def _from_dlpack(self, producer: Any, index: int, copy: bool | None) -> Any:
        """A JAX array producer moves with device_put (device to device); anything else returns
        None and the core imports it through host memory, which _from_host then copies."""
        if not isinstance(producer, self.jax.Array):
            return None
        on_device = producer.devices() == {self._native_device(index)}
        if copy is False or (copy is None and on_device):
            # Sharing an immutable buffer is safe; from another device it cannot be shared (None:
            # the core then refuses copy=False with its message).
            return producer if on_device else None
        return self._copy_from_device(producer, index)

    def _to_host(self, native: Any) -> np.ndarray:
        return np.array(native, copy=True)

    # ``jax.Array.shape`` and ``.dtype`` are Python properties that read ``.aval`` (a C++
    # attribute); the core asks for both on every op result and compiled call, so read the aval
    # directly. Right after an XLA call the caches are cold and each Python frame on this path
    # costs several times its warm price (docs/tpu.md, benchmark section).
    _shape_of = staticmethod(attrgetter("aval.shape"))  # C-level: no Python frame per call

    def _nbytes_of(self, native: Any) -> int:
        # jax.Array.nbytes is a Python property costing ~7 µs; the core asks on every result.
        # A jitted program gives every result the same aval object, so the last answer is kept
        # (one tuple, replaced whole: safe across threads; holding the aval keeps its id unique):
        # 1-1.6 µs less per compiled call on the MLP rows, where caches are cold after XLA ran.
        aval = native.aval
        last = self._last_nbytes
        if last[0] is aval:
            return last[1]
        n = math.prod(aval.shape) * aval.dtype.itemsize
        self._last_nbytes = (aval, n)
        return n

    def _memory_root(self, native: Any) -> Any:
        # JAX arrays are immutable and never views of one another: each owns its buffer.
        return native

    # jax.Array.dtype is a Python property too; the aval's is the same NumPy (or ml_dtypes) dtype.
    _dtype_of = staticmethod(attrgetter("aval.dtype"))  # nx.compile checks it on every call

    def _native_dtype(self, dtype: np.dtype[Any]) -> Any:
        if str(dtype) not in DTYPES:
            raise UnsupportedDTypeError(f"tpu (backend {self.name}) does not support dtype {dtype}; cast to float32 or bfloat16 first")
        return dtype

    def index_of(self, native: Any) -> int:
        """The ``tpu:i`` index a committed JAX array lives on (used by sharding and checks)."""
        (dev,) = native.devices()
        return self.jax_devices.index(dev)

    # ---------------------------------------------------------------- public
    @property
    def platform(self) -> str:
        return "cpu" if self.emulated else "tpu"

    def runtime_bytes_in_use(self, index: int) -> int:
        """Bytes the runtime holds on ``tpu:index``: PJRT's allocator statistics where the device
        reports them (TPU), else the sum of live JAX buffers on it (the CPU platform has none)."""
        dev = self._native_device(index)
        stats = dev.memory_stats()
        if stats and "bytes_in_use" in stats:
            return int(stats["bytes_in_use"])
        return sum(int(s.data.nbytes) for a in self.jax.live_arrays() for s in a.addressable_shards if s.device == dev)

    def device_info(self, index: int) -> dict[str, Any]:
        dev = self._native_device(index)
        info = super().device_info(index)
        stats = dev.memory_stats() or {}
        kind = str(dev.device_kind)
        info.update({
            "name": f"emulated TPU (JAX {kind} device {dev.id})" if self.emulated else kind,
            "platform": dev.platform,
            "chip_version": "emulated (host CPU)" if self.emulated else kind,
            "cores": 1 if self.emulated else TENSORCORES_PER_CHIP.get(kind, getattr(dev, "num_cores", 1)),
            "hbm_bytes": stats.get("bytes_limit"),
            "bytes_in_use": self.memory.stats(index).in_use,
            "runtime_bytes_in_use": self.runtime_bytes_in_use(index),
            "jax": self.jax.__version__,
            "default_precision": "fp32 (CPU platform; nx.compile defaults to bf16 as on TPU)" if self.emulated else "bf16 (TPU MXU default)",
            "xla_memory_settings": {k: os.environ[k] for k in XLA_MEMORY_VARIABLES if k in os.environ},
        })
        return info
