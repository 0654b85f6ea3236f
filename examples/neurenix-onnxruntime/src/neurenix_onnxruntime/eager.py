"""Eager ops through ONNX Runtime: one cached single-node session per op signature.

An op call builds (once per op, attributes, input dtypes and ranks) a one-node ONNX graph with
symbolic dimensions, opens an ``InferenceSession`` on the backend's provider, and runs it. A
signature ONNX Runtime refuses (no kernel for the dtype: ``NOT_IMPLEMENTED`` / type errors) is
remembered with ORT's message and goes to the host under the core's fallback policy; under policy
``error`` the FallbackError carries ORT's reason and the ORT exception as its cause.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper
from onnxruntime.capi import onnxruntime_pybind11_state as ort_state

from neurenix_core.contract import fallback
from neurenix_core.errors import FallbackError, ShapeError

if TYPE_CHECKING:
    from neurenix_onnxruntime.backend import ORTBackend

__all__ = ["FAILED_AT_RUN", "OPSET", "REJECTED_BY_ORT", "KernelCache"]

#: Default ONNX opset of every graph we build (Gelu needs 20; ORT 1.18+ runs it).
OPSET = 21
#: ORT exceptions meaning "this graph cannot run here" at session creation.
REJECTED_BY_ORT: tuple[type[BaseException], ...] = (ort_state.NotImplemented, ort_state.InvalidGraph, ort_state.Fail, ort_state.InvalidArgument)
#: ORT exceptions raised by ``run`` for inputs that do not fit (shapes that do not broadcast ...).
FAILED_AT_RUN: tuple[type[BaseException], ...] = (ort_state.InvalidArgument, ort_state.RuntimeException, ort_state.Fail)

Key = tuple[Any, ...]


class Rejected(Exception):
    """ORT refused a signature; ``str()`` is ORT's message (kept as the cause of what is raised)."""


def _freeze(attrs: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in attrs.items()))


def single_node_model(op_type: str, dtypes: Sequence[np.dtype[Any]], ranks: Sequence[int], attrs: Mapping[str, Any], out_dtype: np.dtype[Any] | None) -> onnx.ModelProto:
    """A one-node ONNX model with symbolic dims, so one session serves every shape of a rank."""
    inputs = [
        helper.make_tensor_value_info(f"x{i}", helper.np_dtype_to_tensor_dtype(dt), [f"d{i}_{j}" for j in range(r)])
        for i, (dt, r) in enumerate(zip(dtypes, ranks))
    ]
    out_type = helper.np_dtype_to_tensor_dtype(out_dtype if out_dtype is not None else dtypes[0])
    node = helper.make_node(op_type, [f"x{i}" for i in range(len(dtypes))], ["y"], **attrs)
    graph = helper.make_graph([node], f"neurenix_{op_type}", inputs, [helper.make_tensor_value_info("y", out_type, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="neurenix-onnxruntime")
    model.ir_version = 10  # the newest IR every ORT >= 1.18 reads
    return model


class KernelCache:
    """Sessions per op signature for one backend, plus the signatures ORT refused (and why)."""

    def __init__(self, backend: ORTBackend) -> None:
        self._backend = backend
        self._sessions: dict[Key, Any] = {}
        self.rejected: dict[Key, str] = {}

    def session(self, op_type: str, dtypes: Sequence[np.dtype[Any]], ranks: Sequence[int], attrs: Mapping[str, Any], out_dtype: np.dtype[Any] | None = None) -> Any:
        key = (op_type, tuple(str(d) for d in dtypes), tuple(ranks), _freeze(attrs), str(out_dtype))
        sess = self._sessions.get(key)
        if sess is not None:
            return sess
        if key in self.rejected:
            raise Rejected(self.rejected[key])
        model = single_node_model(op_type, dtypes, ranks, attrs, out_dtype)
        try:
            sess = ort.InferenceSession(model.SerializeToString(), self._backend.session_options(), providers=self._backend.eager_providers)
        except REJECTED_BY_ORT as exc:
            self.rejected[key] = f"{type(exc).__name__}: {exc}"
            raise Rejected(self.rejected[key]) from exc
        self._sessions[key] = sess
        return sess

    def run(self, name: str, op_type: str, inputs: Sequence[np.ndarray], attrs: Mapping[str, Any] | None = None, out_dtype: np.dtype[Any] | None = None) -> np.ndarray:
        attrs = attrs or {}
        sess = self.session(op_type, [a.dtype for a in inputs], [a.ndim for a in inputs], attrs, out_dtype)
        # Not np.ascontiguousarray: it turns 0-d arrays into 1-d ones.
        feed = {f"x{i}": a if a.flags.c_contiguous else np.array(a, order="C") for i, a in enumerate(inputs)}
        try:
            return sess.run(None, feed)[0]
        except FAILED_AT_RUN as exc:
            shapes = ", ".join(str(a.shape) for a in inputs)
            raise ShapeError(f"{name} on {self._backend.label}: ONNX Runtime refused operands of shapes {shapes}: {exc}") from exc

    def __len__(self) -> int:
        return len(self._sessions)


def host_fallback(backend: ORTBackend, name: str, reason: str, cause: BaseException | None, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run ``name`` with the core's CPU kernel under the fallback policy (storage is host NumPy,
    so the result stays on the ort device without a copy back)."""
    if fallback.get_fallback_policy() == "error":
        raise FallbackError(
            f"{name} is not native on {backend.label} (backend {backend.name}): {reason}. The fallback policy is 'error': "
            "allow host fallback with nx.fallback_policy('allow') or NEURENIX_FALLBACK=allow, or move the tensors with .to('cpu')."
        ) from cause
    fallback.record(name, backend.name, backend.label)
    return backend.cpu_op(name)(*args, **kwargs)


def guarded(backend: ORTBackend, name: str, native: Callable[..., np.ndarray]) -> Callable[..., Any]:
    """Wrap a native kernel: a signature ORT refuses, or one it would compute differently from
    the array API (``native`` raises ``Rejected``), runs on the host under the fallback policy."""

    def op(*args: Any, **kwargs: Any) -> Any:
        try:
            return native(*args, **kwargs)
        except Rejected as exc:
            return host_fallback(backend, name, str(exc), exc.__cause__ or exc, args, kwargs)

    op.__name__ = name.replace(".", "_")
    return op
