"""Eager ops on the NPU: each op is a tiny OpenVINO graph, compiled once per (op, shapes, dtypes,
attributes) and cached, then run with one infer request.

An OpenVINO infer call costs tens of microseconds, so only ops worth a device round trip are
native here (matmul, convolution, elementwise math, the nn activations). Operands the device
cannot compute exactly (integers, float64, mixed dtypes) go through the core's fallback policy:
counted, warned once or refused, never silently.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol

import numpy as np

from neurenix_core.contract import fallback

__all__ = ["NATIVE_OPS", "EagerKernels"]

Builder = Callable[..., Any]

_UNARY: Final = ("abs", "exp", "log", "sqrt", "negative", "sin", "cos", "tan", "tanh", "floor", "ceil", "sign")
_BINARY: Final = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "pow")
_NN: Final = (
    "nn.linear", "nn.conv2d", "nn.relu", "nn.gelu", "nn.sigmoid", "nn.tanh", "nn.softmax",
    "nn.max_pool2d", "nn.avg_pool2d", "nn.adaptive_avg_pool2d", "nn.batch_norm", "nn.layer_norm",
)
NATIVE_OPS: Final = (*_UNARY, *_BINARY, "matmul", *_NN)
_FLOATS: Final = (np.dtype(np.float32), np.dtype(np.float16))


class EagerDevice(Protocol):
    """What the kernels need of the backend (backend.NPUOpenVINOBackend): which dtypes run on
    the device, how a one-op graph is compiled, and where a fallback goes. Typed here, not
    imported, because the backend builds its op table from this module."""

    name: str

    def runs_dtype(self, dtype: np.dtype[Any]) -> bool: ...

    def compile_eager(self, model: Any, dtype: np.dtype[Any]) -> Any: ...

    def device_label(self, index: int = 0) -> str: ...

    def host_op(self, name: str) -> Callable[..., Any]: ...


class _Entry:
    """One compiled eager graph and its infer request (requests are not thread-safe)."""

    __slots__ = ("lock", "request", "tensor")

    def __init__(self, compiled: Any, tensor: Any) -> None:
        self.request = compiled.create_infer_request()
        self.lock = threading.Lock()
        self.tensor = tensor

    def run(self, arrays: Sequence[np.ndarray]) -> np.ndarray:
        from neurenix_npu_openvino.compiled import infer_shared

        # OpenVINO wants C-contiguous buffers to share; a transposed view is copied once here.
        # (np.ascontiguousarray would turn a 0-d operand into shape (1,), hence the flag test.)
        contiguous = [a if a.flags.c_contiguous else np.ascontiguousarray(a) for a in arrays]
        with self.lock:
            return infer_shared(self.request, self.tensor, contiguous, 1)[0]


class EagerKernels:
    """The op table of the backend: native callables on host arrays, with a bounded LRU cache."""

    def __init__(self, backend: EagerDevice, capacity: int = 256) -> None:
        import openvino as ov
        import openvino.opset16 as opset

        self._ov = ov
        self._op = opset
        self._backend = backend
        self._cache: OrderedDict[tuple[Any, ...], _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self.capacity = capacity
        self.compilations = 0

    # ------------------------------------------------------------------ table
    def table(self) -> dict[str, Callable[..., Any]]:
        ops: dict[str, Callable[..., Any]] = {}
        for name in _UNARY:
            ops[name] = self._unary(name)
        for name in _BINARY:
            ops[name] = self._binary(name)
        ops["matmul"] = self.matmul
        ops["nn.linear"] = self.linear
        ops["nn.conv2d"] = self.conv2d
        ops["nn.relu"] = self._activation("nn.relu", self._op.relu)
        ops["nn.sigmoid"] = self._activation("nn.sigmoid", self._op.sigmoid)
        ops["nn.tanh"] = self._activation("nn.tanh", self._op.tanh)
        ops["nn.gelu"] = self.gelu
        ops["nn.softmax"] = self.softmax
        ops["nn.max_pool2d"] = self.max_pool2d
        ops["nn.avg_pool2d"] = self.avg_pool2d
        ops["nn.adaptive_avg_pool2d"] = self.adaptive_avg_pool2d
        ops["nn.batch_norm"] = self.batch_norm
        ops["nn.layer_norm"] = self.layer_norm
        return ops

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()

    def __len__(self) -> int:
        return len(self._cache)

    # ------------------------------------------------------------------ dispatch
    def _native_dtype(self, arrays: Sequence[Any]) -> np.dtype[Any] | None:
        """The common float dtype when every operand may run on the device, else None."""
        dtypes = {a.dtype for a in arrays if isinstance(a, np.ndarray)}
        if len(dtypes) != 1:
            return None
        (dtype,) = dtypes
        if dtype not in _FLOATS or not self._backend.runs_dtype(dtype):
            return None
        if any(a.size == 0 for a in arrays if isinstance(a, np.ndarray)):
            return None  # OpenVINO rejects zero-sized parameters
        return dtype

    def _run(self, name: str, args: Sequence[Any], attrs: tuple[Any, ...], build: Builder, original: Sequence[Any] | None = None) -> Any:
        """Run ``name`` natively on ``args`` (arrays, Python scalars, None for absent operands).

        ``attrs`` are static attributes (part of the cache key); ``original`` is the call as the
        op received it, replayed on the host when the operands cannot run on the device.
        """
        dtype = self._native_dtype(args)
        scalars_ok = all(a is None or isinstance(a, np.ndarray) or (isinstance(a, (float, int)) and not isinstance(a, bool)) for a in args)
        if dtype is None or not scalars_ok:
            return self._fallback(name, tuple(args) if original is None else tuple(original))
        arrays = [a if isinstance(a, np.ndarray) else np.asarray(a, dtype=dtype) for a in args if a is not None]
        present = tuple(a is not None for a in args)
        key = (name, present, tuple(a.shape for a in arrays), str(dtype), attrs)
        entry = self._entry(key, arrays, present, build)
        return entry.run(arrays).astype(dtype, copy=False)

    def _entry(self, key: tuple[Any, ...], arrays: Sequence[np.ndarray], present: tuple[bool, ...], build: Builder) -> _Entry:
        with self._lock:
            entry = self._cache.get(key)
            if entry is not None:
                self._cache.move_to_end(key)
                return entry
        params = [self._op.parameter(list(a.shape), self._ov.Type(a.dtype), name=f"in{i}") for i, a in enumerate(arrays)]
        it = iter(params)
        # Absent optional operands (bias=None) reach the builder as None.
        full = [next(it) if p else None for p in present]
        model = self._ov.Model([build(full)], params, key[0])
        entry = _Entry(self._backend.compile_eager(model, np.dtype(arrays[0].dtype)), self._ov.Tensor)
        with self._lock:
            self.compilations += 1
            self._cache[key] = entry
            while len(self._cache) > self.capacity:
                self._cache.popitem(last=False)
        return entry

    def _fallback(self, name: str, original: tuple[Any, ...]) -> Any:
        be = self._backend
        fallback.record(name, be.name, be.device_label())
        return be.host_op(name)(*original)

    # ------------------------------------------------------------------ ops
    def _unary(self, name: str) -> Callable[[Any], Any]:
        builders: dict[str, Callable[[Any], Any]] = {
            "abs": self._op.abs, "exp": self._op.exp, "log": self._op.log, "sqrt": self._op.sqrt,
            "negative": self._op.negative, "sin": self._op.sin, "cos": self._op.cos, "tan": self._op.tan,
            "tanh": self._op.tanh, "floor": self._op.floor, "ceil": self._op.ceiling, "sign": self._op.sign,
        }
        fn = builders[name]
        return lambda x: self._run(name, (x,), (), lambda p: fn(p[0]))

    def _activation(self, name: str, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        return lambda x: self._run(name, (x,), (), lambda p: fn(p[0]))

    def _binary(self, name: str) -> Callable[[Any, Any], Any]:
        builders: dict[str, Callable[[Any, Any], Any]] = {
            "add": self._op.add, "subtract": self._op.subtract, "multiply": self._op.multiply,
            "divide": self._op.divide, "maximum": self._op.maximum, "minimum": self._op.minimum,
            "pow": self._op.power,
        }
        fn = builders[name]

        def op(x1: Any, x2: Any) -> Any:
            if not isinstance(x1, np.ndarray) and not isinstance(x2, np.ndarray):
                return self._fallback(name, (x1, x2))
            return self._run(name, (x1, x2), (), lambda p: fn(p[0], p[1]))

        return op

    def matmul(self, x1: Any, x2: Any) -> Any:
        if not (isinstance(x1, np.ndarray) and isinstance(x2, np.ndarray)) or x1.ndim == 0 or x2.ndim == 0:
            return self._fallback("matmul", (x1, x2))
        return self._run("matmul", (x1, x2), (), lambda p: self._op.matmul(p[0], p[1], False, False))

    def linear(self, x: Any, weight: Any, bias: Any = None) -> Any:
        def build(p: list[Any]) -> Any:
            out = self._op.matmul(p[0], p[1], False, True)
            return out if p[2] is None else self._op.add(out, p[2])

        return self._run("nn.linear", (x, weight, bias), (), build)

    def conv2d(self, x: Any, weight: Any, bias: Any, stride: Any, padding: Any, dilation: Any, groups: int) -> Any:
        attrs = (_pair(stride), _pair(padding), _pair(dilation), int(groups))
        original = (x, weight, bias, stride, padding, dilation, groups)
        return self._run_attrs("nn.conv2d", (x, weight, bias), attrs, self._build_conv, original)

    def _build_conv(self, p: list[Any], stride: tuple[int, int], padding: tuple[int, int], dilation: tuple[int, int], groups: int) -> Any:
        x, w, b = p
        if groups == 1:
            out = self._op.convolution(x, w, list(stride), list(padding), list(padding), list(dilation))
        else:
            shape = list(w.get_partial_shape().to_shape())
            grouped = self._op.reshape(w, self._op.constant(np.array([groups, shape[0] // groups, *shape[1:]], np.int64)), False)
            out = self._op.group_convolution(x, grouped, list(stride), list(padding), list(padding), list(dilation))
        if b is None:
            return out
        return self._op.add(out, self._op.unsqueeze(b, self._op.constant(np.array([0, 2, 3], np.int64))))

    def _run_attrs(self, name: str, args: Sequence[Any], attrs: tuple[Any, ...], build: Callable[..., Any], original: Sequence[Any]) -> Any:
        # Attributes are part of the cache key and reach the builder as arguments.
        return self._run(name, args, attrs, lambda p: build(p, *attrs), original)

    def gelu(self, x: Any, approximate: str = "none") -> Any:
        mode = "tanh" if approximate == "tanh" else "erf"
        return self._run_attrs("nn.gelu", (x,), (approximate,), lambda p, _a: self._op.gelu(p[0], mode), (x, approximate))

    def softmax(self, x: Any, axis: int = -1) -> Any:
        return self._run_attrs("nn.softmax", (x,), (int(axis),), lambda p, a: self._op.softmax(p[0], a), (x, axis))

    def max_pool2d(self, x: Any, kernel_size: Any, stride: Any = None, padding: Any = 0) -> Any:
        k = _pair(kernel_size)
        attrs = (k, _pair(stride if stride is not None else k), _pair(padding))

        def build(p: list[Any], k: Any, s: Any, pad: Any) -> Any:
            return self._op.max_pool(p[0], list(s), [1, 1], list(pad), list(pad), list(k), "floor").output(0)

        return self._run_attrs("nn.max_pool2d", (x,), attrs, build, (x, kernel_size, stride, padding))

    def avg_pool2d(self, x: Any, kernel_size: Any, stride: Any = None, padding: Any = 0, count_include_pad: bool = True) -> Any:
        k = _pair(kernel_size)
        attrs = (k, _pair(stride if stride is not None else k), _pair(padding), bool(count_include_pad))

        def build(p: list[Any], k: Any, s: Any, pad: Any, include: bool) -> Any:
            # Explicit dilations: opset16 AvgPool without them crashes OpenVINO 2026.4.
            return self._op.avg_pool(p[0], list(s), list(pad), list(pad), list(k), not include, "floor", dilations=[1, 1])

        return self._run_attrs("nn.avg_pool2d", (x,), attrs, build, (x, kernel_size, stride, padding, count_include_pad))

    def adaptive_avg_pool2d(self, x: Any, output_size: Any) -> Any:
        size = _pair(output_size)

        def build(p: list[Any], size: tuple[int, int]) -> Any:
            return self._op.adaptive_avg_pool(p[0], self._op.constant(np.array(size, np.int64)))

        return self._run_attrs("nn.adaptive_avg_pool2d", (x,), (size,), build, (x, output_size))

    def batch_norm(self, x: Any, running_mean: Any, running_var: Any, weight: Any, bias: Any, eps: float = 1e-5) -> Any:
        if weight is None or bias is None or not isinstance(x, np.ndarray) or x.ndim < 2:
            return self._fallback("nn.batch_norm", (x, running_mean, running_var, weight, bias, eps))

        def build(p: list[Any], eps: float) -> Any:
            return self._op.batch_norm_inference(p[0], p[3], p[4], p[1], p[2], eps)

        original = (x, running_mean, running_var, weight, bias, eps)
        return self._run_attrs("nn.batch_norm", (x, running_mean, running_var, weight, bias), (float(eps),), build, original)

    def layer_norm(self, x: Any, normalized_shape: Any, weight: Any = None, bias: Any = None, eps: float = 1e-5) -> Any:
        shape = (int(normalized_shape),) if isinstance(normalized_shape, int) else tuple(int(d) for d in normalized_shape)

        def build(p: list[Any], shape: tuple[int, ...], eps: float) -> Any:
            axes = self._op.constant(np.arange(-len(shape), 0, dtype=np.int64))
            out = self._op.mvn(p[0], axes, True, eps, "inside_sqrt")
            if p[1] is not None:
                out = self._op.multiply(out, p[1])
            if p[2] is not None:
                out = self._op.add(out, p[2])
            return out

        original = (x, normalized_shape, weight, bias, eps)
        return self._run_attrs("nn.layer_norm", (x, weight, bias), (shape, float(eps)), build, original)


def _pair(value: Any) -> tuple[int, int]:
    if isinstance(value, (int, np.integer)):
        return (int(value), int(value))
    a, b = value
    return (int(a), int(b))
