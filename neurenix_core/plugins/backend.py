"""Backend base classes: the private surface a plugin fills in, and the public wrapper around it.

Following tinygrad's runtimes, a backend overrides a handful of private methods
(``_from_host``, ``_to_host``, ``_dtype_of`` ...) and fills ``ops``, its native op table; the
core validates input, accounts memory, applies the fallback policy and wraps errors.

``ArrayNamespaceBackend(xp)`` turns any array-API library into a backend: NumPy (cpu), JAX (tpu),
PyTorch through array-api-compat (cuda). Graph backends (OpenVINO, LiteRT) subclass ``Backend``
directly, keep host arrays as their native storage and put only the ops they run natively in
``ops``; everything else goes through the fallback policy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from neurenix_core.device import Device, DeviceType
from neurenix_core.errors import UnsupportedDTypeError
from neurenix_core.plugins.memory import DeviceMemory, MemoryTracker
from neurenix_core.plugins.opnames import ARRAY_API_FUNCTIONS  # defined there: read at import without this module

if TYPE_CHECKING:
    from neurenix_core.plugins.manifest import Manifest, ProbeResult

__all__ = [
    "ARRAY_API_FUNCTIONS",
    "FFT_FUNCTIONS",
    "LINALG_FUNCTIONS",
    "ArrayNamespaceBackend",
    "Backend",
    "CompiledModel",
    "Placement",
]


class Placement:
    """Everything dispatch needs about one device of one backend, resolved once.

    A Tensor points at its placement; an op reads the op table, the memory counters and the
    native array type from here with attribute loads instead of calls. There is one placement per
    (backend, index), so "same device" is an identity check on the hot path.
    """

    __slots__ = ("array_type", "backend", "device", "index", "mem", "native_nbytes", "numpy_fast", "numpy_roots", "ops")

    def __init__(self, backend: Backend, index: int) -> None:
        self.backend = backend
        self.device = Device(backend.device_type, index)
        self.index = index
        self.ops = backend.ops  # the same dict object: ops added later by the backend are seen
        self.mem: DeviceMemory = backend.memory.devices[index]
        self.array_type: type = backend.array_type
        # True when ``native.nbytes`` is the size (the default ``_nbytes_of``): one attribute load
        # on the hot path instead of a method call.
        self.native_nbytes = type(backend)._nbytes_of is Backend._nbytes_of
        # True when natives are NumPy arrays whose memory owner is found the default way (``.base``):
        # the generic dispatch path then tells a fresh op result from a view without a method call.
        self.numpy_roots = backend.array_type is np.ndarray and type(backend)._memory_root is Backend._memory_root
        # Both at once (the CPU backend): the eager hot paths test one flag instead of two.
        self.numpy_fast = self.numpy_roots and self.native_nbytes

    def __repr__(self) -> str:
        return f"Placement({self.backend.name!r}, {self.device})"


class Backend:
    """A plugin's runtime: it serves ``device_count`` devices of its manifest's device types.

    Subclasses override the private surface; each default raises ``NotImplementedError("need
    <what>")`` so a half-written backend fails loudly in the conformance kit.
    """

    #: Native op table: array-API function name -> callable on native arrays. Ops missing here
    #: run under the fallback policy. Filled by the subclass constructor.
    ops: dict[str, Callable[..., Any]]
    #: True when this backend runs its stack on the host CPU instead of the real hardware.
    emulated: bool = False
    #: The exact type of this backend's native arrays; op results of another type (a NumPy
    #: scalar from a 0-d reduction) go through ``_coerce`` once, off the common path.
    array_type: type = np.ndarray

    def __init__(self, *, device_type: str, device_count: int, emulated: bool = False) -> None:
        self.device_type = DeviceType(device_type)
        self._device_count = device_count
        self.emulated = emulated
        self.ops = {}
        self.memory = MemoryTracker(str(self.device_type), device_count)
        self.name = str(self.device_type)
        self.manifest: Manifest | None = None
        self.probe: ProbeResult | None = None
        self._placements: list[Placement] | None = None
        self._dtype_names: frozenset[str] | None = None
        self._supports_cache: dict[np.dtype[Any], bool] = {}

    def _attach(self, name: str, manifest: Manifest, probe: ProbeResult) -> None:
        """Called by the registry once the factory returned: records who we are."""
        self.name = name
        self.manifest = manifest
        self.probe = probe
        self._dtype_names = frozenset(manifest.capabilities.dtypes)
        self._supports_cache.clear()  # answers given before the manifest was known are stale

    # ---------------------------------------------------------------- private surface
    def _from_host(self, array: np.ndarray, index: int) -> Any:
        """Copy a host NumPy array onto device ``index``; return the native array."""
        raise NotImplementedError("need _from_host")

    def _to_host(self, native: Any) -> np.ndarray:
        """Copy a native array to a host NumPy array (a copy the caller may own)."""
        raise NotImplementedError("need _to_host")

    def _dtype_of(self, native: Any) -> np.dtype[Any]:
        """The neurenix dtype (a NumPy dtype, ml_dtypes for bfloat16) of a native array."""
        raise NotImplementedError("need _dtype_of")

    def _shape_of(self, native: Any) -> tuple[int, ...]:
        return tuple(native.shape)

    def _nbytes_of(self, native: Any) -> int:
        return int(native.nbytes)

    def _native_dtype(self, dtype: np.dtype[Any]) -> Any:
        """The backend's dtype object for a neurenix dtype; raise UnsupportedDTypeError if none."""
        return dtype

    def _native_device(self, index: int) -> Any:
        """The backend's own device object for ``index`` (passed as ``device=`` to creation ops)."""
        raise NotImplementedError("need _native_device")

    def _coerce(self, result: Any) -> Any:
        """Turn an op result that is not ``array_type`` into a native array (or leave it).

        NumPy returns scalars (``np.float32``) from 0-d operations; a tensor always holds an array.
        """
        if isinstance(result, np.generic):
            return np.asarray(result)
        return result

    def _memory_root(self, native: Any) -> Any:
        """The object that owns ``native``'s memory; ``native`` itself when it owns it.

        Two natives with the same root share a buffer, so the core charges it once (views).
        NumPy arrays walk ``.base``; a backend whose arrays can be views of one another in
        another way (torch) overrides this; immutable arrays (JAX) never share.
        """
        while isinstance(native, np.ndarray) and native.base is not None:
            native = native.base
        if type(native).__module__ == "torch":
            # A torch view keeps its base tensor in ``_base`` (None for a tensor owning storage).
            base = native._base
            return native if base is None else base
        return native

    def _from_dlpack(self, producer: Any, index: int, copy: bool | None) -> Any:
        """Import a DLPack producer as a native array on device ``index``.

        Backends whose native storage is host NumPy (cpu, npu, edgetpu, ort) share the producer's
        host memory (zero copy unless ``copy=True``). Device-memory backends (torch, JAX) override
        this with their library's ``from_dlpack`` and must place the result on ``index``;
        the default for them is a host round trip done by the core (return None).
        """
        if self.array_type is not np.ndarray:
            return None
        return np.from_dlpack(producer, copy=copy)

    #: Whether models on this backend can be trained (False for inference-only devices: the
    #: tape and nx.compile_step refuse them with the remedy).
    trains: bool = True

    def _compile_train_step(self, loss_fn: Any, model: Any, optimizer: Any) -> Any:
        """A training step lowered through this backend's framework (its own autodiff), or None:
        the core then runs the neurenix tape. See neurenix_core/training/step.py."""
        return None

    def _native_backward(self, native: Any, gradient: Any) -> bool:
        """Run the framework's own backward from ``native`` if its autograd recorded it (True),
        else False. ``Tensor.backward()`` asks this for results with no neurenix tape."""
        return False

    def _index_of_native(self, native: Any) -> int | None:
        """The device index of a framework array this backend owns (a torch.Tensor for the cuda
        backend), or None when it is not this backend's. Optimizers use it to bind a framework
        module's parameters; backends whose arrays can be told apart override it."""
        return None

    # ---------------------------------------------------------------- public
    def device_count(self) -> int:
        return self._device_count

    def devices(self) -> list[Device]:
        return [Device(self.device_type, i) for i in range(self._device_count)]

    def device_info(self, index: int) -> dict[str, Any]:
        """Facts about one device; backends extend this with what their runtime reports."""
        return {"device": f"{self.device_type}:{index}", "backend": self.name, "emulated": self.emulated}

    def placement(self, index: int) -> Placement:
        """The (cached) placement of device ``index``; DeviceNotFoundError when out of range."""
        places = self._placements
        if places is None:
            places = self._placements = [Placement(self, i) for i in range(self._device_count)]
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(places):
            from neurenix_core.errors import DeviceNotFoundError

            have = ", ".join(f"{self.device_type}:{i}" for i in range(len(places)))
            raise DeviceNotFoundError(f"{self.device_type}:{index} does not exist: backend {self.name} has {len(places)} device(s) ({have})")
        return places[index]

    def supports_dtype(self, dtype: np.dtype[Any]) -> bool:
        """True when the manifest declares ``dtype`` (Capabilities.dtypes) and the runtime has it.

        Answers are cached per dtype: this runs on every tensor creation, and ``str(dtype)`` and
        the runtime's own lookup cost microseconds each.
        """
        cache = self._supports_cache
        known = cache.get(dtype)  # a dtype object asked before: no np.dtype() call
        if known is None:
            dt = np.dtype(dtype)
            known = cache.get(dt)
            if known is None:
                known = cache[dt] = self._supports_uncached(dt)
        return known

    def _supports_uncached(self, dtype: np.dtype[Any]) -> bool:
        names = self._dtype_names
        if names is not None and str(dtype) not in names:
            return False
        try:
            self._native_dtype(dtype)
        except UnsupportedDTypeError:
            return False
        return True

    def close(self) -> None:
        """Release runtime resources (restoring global switches a backend changed)."""


class CompiledModel:
    """A model lowered to a backend's native form; call it like the model.

    Backends subclass it and implement ``_run(inputs)`` on host NumPy arrays or native arrays.
    The core's ``nx.compile`` checks input shapes against ``input_shapes`` before calling.
    """

    #: Human-readable description of what the backend did ("OpenVINO CPU, f32, 14 nodes").
    summary: str = ""

    def __call__(self, *inputs: Any) -> Any:
        return self._run(*inputs)

    def _run(self, *inputs: Any) -> Any:
        raise NotImplementedError("need _run")

    def fast_entry(self, shape: tuple[int, ...]) -> Callable[[Any], Any] | None:
        """Optional: a one-input call for arrays the core has already checked.

        ``nx.compile``'s per-call path calls it with one array of the backend's array type whose
        shape is exactly ``shape`` and whose dtype is the model's input dtype (float32, or an
        integer input's declared dtype): the core checked all three, so it may skip those checks.
        None (the default) means ``_run``.
        """
        return None


LINALG_FUNCTIONS: tuple[str, ...] = (
    "cholesky", "cross", "det", "diagonal", "eigh", "eigvalsh", "inv", "matmul", "matrix_norm",
    "matrix_power", "matrix_rank", "matrix_transpose", "outer", "pinv", "qr", "slogdet", "solve",
    "svd", "svdvals", "tensordot", "trace", "vecdot", "vector_norm",
)

#: The array API ``fft`` extension; op table names are ``fft.<name>``. ``fftfreq`` and ``rfftfreq``
#: are creation functions (called with ``device=`` and the backend's native dtype and device).
FFT_FUNCTIONS: tuple[str, ...] = (
    "fft", "ifft", "fftn", "ifftn", "rfft", "irfft", "rfftn", "irfftn", "hfft", "ihfft",
    "fftfreq", "rfftfreq", "fftshift", "ifftshift",
)


def _numpy_matmul(x1: Any, x2: Any, /) -> Any:
    """np.matmul, except that bfloat16 operands give a bfloat16 result.

    NumPy has no bfloat16 matmul loop and silently computes (and returns) float32; the standard
    says the result dtype is the promoted operand dtype.
    """
    out = _matmul(x1, x2)
    dt = out.dtype
    # ``is``: NumPy's built-in dtypes are singletons, so the common case costs no comparison.
    if dt is not x1.dtype and dt != x1.dtype and (x1.dtype.name == "bfloat16" or x2.dtype.name == "bfloat16"):
        return out.astype(np.result_type(x1, x2))
    return out


_matmul = np.matmul


def _bfloat16_kept(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (a NumPy contraction without a bfloat16 loop: ``vecdot`` computes, and returns,
    float32) with bfloat16 operands giving a bfloat16 result, as ``_numpy_matmul`` does."""

    def op(x1: Any, x2: Any, /, **kwargs: Any) -> Any:
        out = fn(x1, x2, **kwargs)
        if out.dtype != x1.dtype and (x1.dtype.name == "bfloat16" or x2.dtype.name == "bfloat16"):
            return out.astype(np.result_type(x1, x2))
        return out

    op.__name__ = op.__qualname__ = getattr(fn, "__name__", "op")
    return op


def _bfloat16_clip(clip: Callable[..., Any]) -> Callable[..., Any]:
    """``clip`` that takes bfloat16: array-api-compat's clip (casting='no' into a bfloat16 output)
    raised for it with both bounds given; min/max are exact in float32, so bfloat16 is clipped
    there and cast back (found by tests/differential)."""

    def op(x: Any, /, min: Any = None, max: Any = None) -> Any:  # min, max: the standard's parameter names
        if x.dtype.name != "bfloat16":
            return clip(x, min, max)
        wide = [v.astype(np.float32) if isinstance(v, np.ndarray) else v for v in (x, min, max)]
        return clip(*wide).astype(x.dtype)

    op.__name__ = op.__qualname__ = "clip"
    return op


def _numpy_reduction(ufunc: np.ufunc, name: str) -> Callable[..., Any]:
    """``np.<name>`` as the ufunc's own ``reduce``: ``np.sum``/``np.prod``/``np.max``/``np.min``
    are a Python dispatch layer over exactly this call (``_wrapreduction``) that costs about 1 µs,
    more than the reduction of a small array itself (benchmarks/dispatch.py). Same results, dtypes
    and errors (an empty max/min raises the same ValueError); ``axis`` defaults to every axis, as
    in the standard, where ``ufunc.reduce`` would default to axis 0."""
    reduce = ufunc.reduce

    def reduction(x: Any, /, *, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
        return reduce(x, axis=axis, dtype=dtype, keepdims=keepdims)

    reduction.__name__ = reduction.__qualname__ = name
    return reduction


def _numpy_extremum(ufunc: np.ufunc, name: str) -> Callable[..., Any]:
    """As ``_numpy_reduction`` for max/min, which take no ``dtype``."""
    reduce = ufunc.reduce

    def extremum(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> Any:
        return reduce(x, axis=axis, keepdims=keepdims)

    extremum.__name__ = extremum.__qualname__ = name
    return extremum


#: The CPU backend's reductions without NumPy's wrapper layer (see ``_numpy_reduction``).
NUMPY_REDUCTIONS: dict[str, Callable[..., Any]] = {
    "sum": _numpy_reduction(np.add, "sum"),
    "prod": _numpy_reduction(np.multiply, "prod"),
    "max": _numpy_extremum(np.maximum, "max"),
    "min": _numpy_extremum(np.minimum, "min"),
}


# The CPU backend's shape functions and ``mean``/``astype`` as the ndarray methods that NumPy's
# functions (and array-api-compat's wrappers of them) end in: ``np.transpose`` is a Python
# dispatch layer and ``_wrapfunc`` over ``x.transpose``, array-api-compat's ``permute_dims`` one
# more layer over that; ``np.mean`` is a layer over what ``x.mean`` calls (``_methods._mean``).
# Same results, dtypes and errors; the layers cost more than a 4x4 op (benchmarks/dispatch.py).
def _numpy_permute_dims(x: Any, /, axes: Any) -> Any:
    return x.transpose(axes)


def _numpy_matrix_transpose(x: Any, /) -> Any:
    if x.ndim < 2:  # array-api-compat's check and message
        raise ValueError("x must be at least 2-dimensional for matrix_transpose")
    return x.swapaxes(-1, -2)


def _numpy_reshape(x: Any, /, shape: Any, *, copy: Any = None) -> Any:
    return x.reshape(shape) if copy is None else x.reshape(shape, copy=copy)


def _numpy_mean(x: Any, /, *, axis: Any = None, keepdims: bool = False) -> Any:
    return x.mean(axis=axis, keepdims=keepdims)


def _numpy_astype(x: Any, dtype: Any, /, *, copy: bool = True, device: Any = None) -> Any:
    if device is not None and device != "cpu":  # array-api-compat's device check for NumPy, and its message
        raise ValueError(f"Unsupported device for NumPy: {device!r}")
    return x.astype(dtype=dtype, copy=copy)


#: The CPU backend's ops that skip NumPy's Python layers (see ``_numpy_reduction`` and above).
NUMPY_DIRECT: dict[str, Callable[..., Any]] = {
    "permute_dims": _numpy_permute_dims,
    "matrix_transpose": _numpy_matrix_transpose,
    "reshape": _numpy_reshape,
    "mean": _numpy_mean,
    "astype": _numpy_astype,
}
for _name, _fn in NUMPY_DIRECT.items():
    _fn.__name__ = _fn.__qualname__ = _name


class ArrayNamespaceBackend(Backend):
    """A backend built from any array-API namespace ``xp`` in a few lines.

    Subclasses give ``_native_device`` (and ``_dtype_of`` when the library's dtypes are not
    NumPy's); the op table is every standard function ``xp`` has, plus ``linalg.*`` and ``fft.*``
    where ``xp.linalg`` and ``xp.fft`` exist.
    """

    #: Array-API names this backend must not take from ``xp`` even if present (known wrong).
    excluded_ops: ClassVar[frozenset[str]] = frozenset()

    #: Ops taken from ``xp`` itself even when a ``compat`` namespace wraps them: the wrapper only
    #: forwards, and these are the hot path (benchmarks/dispatch.py).
    direct_ops: ClassVar[frozenset[str]] = frozenset({"matmul"})

    def __init__(self, xp: Any, *, device_type: str, device_count: int, emulated: bool = False, compat: Any = None) -> None:
        """``compat`` is an optional standard-conforming wrapper of ``xp`` (``array_api_compat.numpy``)
        whose functions replace the library's own where the library deviates from the standard."""
        super().__init__(device_type=device_type, device_count=device_count, emulated=emulated)
        self.xp = xp
        if compat is None and xp is np:
            # NumPy's own namespace still deviates from the standard (sort/argsort descending,
            # clip dtype, std/var correction, unique_* results); array-api-compat fixes exactly that.
            import array_api_compat.numpy as compat
        self.ops = dict(self._op_table(xp if compat is None else compat))
        if compat is not None:
            self.ops.update({n: getattr(xp, n) for n in self.direct_ops if hasattr(xp, n) and n in self.ops})
        if xp is np:
            self.ops["matmul"] = _numpy_matmul
            # linalg.matmul and vecdot lost bfloat16 the same way (float32 results; found by tests/differential).
            self.ops["linalg.matmul"] = _numpy_matmul
            for name in ("vecdot", "linalg.vecdot"):
                if name in self.ops:
                    self.ops[name] = _bfloat16_kept(self.ops[name])
            if "clip" in self.ops:
                self.ops["clip"] = _bfloat16_clip(self.ops["clip"])
            self.ops.update(NUMPY_REDUCTIONS)
            self.ops.update(NUMPY_DIRECT)

    def _op_table(self, xp: Any) -> Mapping[str, Callable[..., Any]]:
        table = {n: getattr(xp, n) for n in ARRAY_API_FUNCTIONS if hasattr(xp, n) and n not in self.excluded_ops}
        for extension, names in (("linalg", LINALG_FUNCTIONS), ("fft", FFT_FUNCTIONS)):
            module = getattr(xp, extension, None)
            if module is not None:
                table.update({f"{extension}.{n}": getattr(module, n) for n in names if hasattr(module, n)})
        return {n: fn for n, fn in table.items() if n not in self.excluded_ops}

    def _from_host(self, array: np.ndarray, index: int) -> Any:
        # copy=True: many libraries (array-api-strict, NumPy) would otherwise alias the caller's
        # array, and later writes to it would change the tensor.
        return self.xp.asarray(array, device=self._native_device(index), copy=True)

    def _to_host(self, native: Any) -> np.ndarray:
        return np.array(native, copy=True)

    def _dtype_of(self, native: Any) -> np.dtype[Any]:
        return np.dtype(native.dtype)
