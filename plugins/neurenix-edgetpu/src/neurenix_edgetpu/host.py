"""LiteRT with the XNNPACK delegate as a host runtime for ``cpu:0`` (``runtime="litert"``, API 1.2).

The edgetpu plugin's fp32 TFLite writer (``lowering.lower(graph, "fp32", io="float")``, the same
model ``nx.compile(..., device="edgetpu", precision="fp32")`` writes) run by LiteRT's interpreter
with its default delegate, XNNPACK (``OpResolverType.BUILTIN``). This is LiteRT doing what it is
for on a CPU, not Edge TPU emulation: no Edge TPU delegate is loaded and the device stays ``cpu:0``.

* Model I/O: the writer's ``io="float"`` models take and return exactly the graph's values
  (float32 NCHW images, integer ids, bool masks); the NCHW<->NHWC transposes are ops inside the
  model, so XNNPACK runs them and the Python side does no arithmetic.
* Precision: fp32 weights and activations. XNNPACK computes float32 as float32 unless asked
  for fp16 inference (a delegate flag this runtime never sets). Static int8: below.
* Threads: ``options.threads`` is passed as the interpreter's ``num_threads``, which LiteRT
  hands to the XNNPACK delegate it creates. ``None`` becomes the number of CPUs this process
  may run on: LiteRT's Python wrapper otherwise creates a one-thread interpreter
  (``num_threads or 1``), while OpenVINO and XLA:CPU, measured against it, use every core.
  LiteRT has no getter for the count, so ``threads`` reads back the value the interpreter was
  created with, and the summary says how many ops the XNNPACK delegate took (read from the
  interpreter's node list), i.e. whether that count applies to the model at all.
* Per-call cost: a one-input, one-output model calls the plugin's fast path
  (``runtime.Runner.invoke1``: LiteRT's ``SetTensor``/``Invoke``/``GetTensor`` bindings under
  the runner's lock, skipping the public methods' reference-count check). Measured on the
  2-vCPU development VM (ai-edge-litert 2.3.0) with a 1x16 ReLU model, median of 20,000 calls:
  bare ``Invoke()`` 0.33 us, bare ``SetTensor``+``Invoke``+``GetTensor`` 0.88 us, the public
  ``set_tensor``+``invoke``+``get_tensor`` 1.03 us, this model's ``__call__`` 1.27 us: the
  wrapper adds about 0.4 us to the bare calls (the lock that makes it thread-safe, which the
  public methods do not take, and one tuple), 0.9 us to ``Invoke()`` alone.

Static int8 (API 1.5, ``quantized_precisions = {"int8"}``): a model compiled with
``precision="int8"`` for ``cpu:0`` comes with the core's plan (``options.plan``), and the same
writer writes the full-integer model the edgetpu device writes for int8
(``lower(graph, "int8", plan, io="float", stem=...)``): every scale and zero point is the core's,
QUANTIZE after the float32 inputs and DEQUANTIZE before the outputs are ops inside the model, so
the I/O contract above holds. XNNPACK runs it on its int8 (QS8) kernels, on AMX tiles where this
process may use them; the summary says int8, the kernels, and how many ops XNNPACK took (an op
it does not take runs on LiteRT's own int8 kernels, named there). The stem is the device's
``stem="auto"`` choice (``lower_s2d.choose_stem``): space-to-depth only where XNNPACK's int8 runs
on AMX tiles. Measured on the 2-vCPU development VM (Xeon with AMX-INT8, one thread, median of
200 calls): a 64x64 3->16->32 CNN 0.48 ms plain, 0.19 ms space-to-depth; a six-conv 128x128 CNN
2.8 -> 2.0 ms; the integers out are the same. Against the core's integer reference
(``run_quantized``, TFLite's fixed-point arithmetic) the outputs are at most one output step away
(30 batches each of a CNN, an MLP with tanh, the stem CNN; 2-11% of elements one step off, the
rest equal): XNNPACK requantizes in float, so a value on a rounding boundary may land one step
away, which the core's check (``Compiled.verify``'s bound) allows. Not int16: the writer writes
8-bit per-tensor activations only (``lowering._act``), so there is no 16x8 model to run; the
core does not offer int16 plans here. A layer or plan the int8 writer cannot write (a transposed
convolution, a per-channel activation) is refused with a typed error naming this runtime.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any, Final

import numpy as np

from neurenix_core.contract import Graph, HostModel, HostOptions, HostRuntime
from neurenix_core.errors import BackendUnavailableError, CompilationError, QuantizationError, UnsupportedOperationError

__all__ = ["LiteRTHostModel", "LiteRTHostRuntime"]

_WHO: Final = "host runtime litert (plugin edgetpu)"
_REMEDY: Final = "pass runtime='auto' (or another runtime name) to nx.compile to run it elsewhere"
#: Int8 models elsewhere: another runtime with the core's plan, or the core's integer reference.
_INT8_REMEDY: Final = ("pass runtime='auto' to nx.compile to run it on another runtime's int8 kernels "
                       "(or runtime='numpy', the core's integer reference)")


class LiteRTHostModel(HostModel):
    """One fp32 or int8 TFLite model (float32 I/O) in one LiteRT interpreter with the XNNPACK delegate.

    Calls are serialized by the runner's lock: a TFLite interpreter owns its input and output
    buffers, so set/invoke/get from two threads must not interleave.
    """

    def __init__(self, runner: Any, casts: Sequence[np.dtype[Any] | None], threads: int, summary: str) -> None:
        self.runner = runner
        self.threads = threads
        self.summary = summary
        self._casts = tuple(casts)
        # The hot path is chosen once: one input, one output, no dtype to restore. It calls the
        # runner's bound method directly (one Python frame per call, not three).
        self._single = len(runner.input_details) == 1 and len(runner.output_details) == 1 and casts[0] is None
        self._invoke1 = runner.invoke1

    def __call__(self, *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
        if self._single:
            # GetTensor returns a copy, so the result survives the next call.
            return (self._invoke1(inputs[0]),)
        return self._many(*inputs)

    def call_one(self, x: np.ndarray) -> np.ndarray:
        return self._invoke1(x) if self._single else self._many(x)[0]

    def _many(self, *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
        outs = self.runner.invoke(*inputs)
        return tuple(o if dtype is None else o.astype(dtype) for o, dtype in zip(outs, self._casts))

    @property
    def config(self) -> dict[str, Any]:
        """LiteRT's configuration as the plugin's runner records it (runtime, threads, kernels,
        precision, the int8 stem, ops the delegate took, ops left to LiteRT's own kernels)."""
        return dict(self.runner.config)


class LiteRTHostRuntime(HostRuntime):
    """LiteRT's interpreter with XNNPACK, loaded once per process."""

    name = "litert"
    #: The writer's int8 is the full-integer model the Edge TPU takes (8-bit per-tensor
    #: activations); it writes no 16x8 model, so int16 plans go to another runtime.
    quantized_precisions = frozenset({"int8"})

    def __init__(self, graph_ops: Iterable[str], graph_dtypes: Iterable[str]) -> None:
        """``graph_ops``/``graph_dtypes``: the manifest's (plugin.py passes them, so this module
        does not import the one that imports it)."""
        from neurenix_edgetpu.runtime import KERNELS, load_litert

        try:
            self.litert = load_litert()
        except BackendUnavailableError as exc:
            raise BackendUnavailableError(f"{_WHO}: {exc}") from exc
        self.version = _litert_version(self.litert)
        # The fp32 writer lowers every op the manifest declares: its precision-specific
        # refusals (lowering._float_only) concern int8 models only, refused when compiled (_write).
        self.graph_ops = frozenset(graph_ops)
        self.graph_dtypes = frozenset(graph_dtypes)
        # BUILTIN is the resolver that applies LiteRT's default delegate, XNNPACK.
        self._resolver = getattr(self.litert.OpResolverType, KERNELS["xnnpack"])

    def compile(self, graph: Graph, options: HostOptions) -> LiteRTHostModel:
        # getattr: a core before API 1.5 passes HostOptions without ``plan`` (fp32 only).
        plan = getattr(options, "plan", None)
        precision = _precision(options.precision, plan)
        threads = _threads(options.threads)
        stem = "plain" if plan is None else self._int8_stem()
        data, casts, stem = _write(graph, precision, plan, stem)
        runner = self._runner(data, threads, precision, stem)
        return LiteRTHostModel(runner, casts, threads, self._summary(runner, threads))

    def _int8_stem(self) -> str:
        """The stem the edgetpu device's ``stem="auto"`` writes on this host: space-to-depth where
        XNNPACK's int8 runs on AMX tiles in this process (the same integers, fewer tile blocks)."""
        from neurenix_edgetpu.amx import xnnpack_amx
        from neurenix_edgetpu.lower_s2d import choose_stem

        # emulated=True: the host CPU runs the model (what the device's emulation means too).
        return choose_stem("auto", precision="int8", kernels="xnnpack", emulated=True,
                           amx=lambda: xnnpack_amx(self._start_xnnpack))

    def _start_xnnpack(self) -> None:
        # XNNPACK asks Linux for AMX when LiteRT first creates its delegate: a one-op model does.
        from neurenix_edgetpu.backend import _one_op_model
        from neurenix_edgetpu.native_log import native_stderr_to_logging

        it = self.litert.Interpreter(model_content=_one_op_model(), num_threads=1, experimental_op_resolver_type=self._resolver)
        with native_stderr_to_logging():
            it.allocate_tensors()

    def _runner(self, data: bytes, threads: int, precision: str, stem: str) -> Any:
        from neurenix_edgetpu.runtime import Runner

        try:
            interpreter = self.litert.Interpreter(model_content=data, num_threads=threads,
                                                  experimental_op_resolver_type=self._resolver)
        except (ValueError, RuntimeError) as exc:
            raise CompilationError(f"{_WHO}: LiteRT could not load the written {precision} model: {exc}; {_REMEDY}") from exc
        config: dict[str, Any] = {"runtime": f"LiteRT {self.version}", "threads": threads, "kernels": "xnnpack",
                                  "precision": precision}
        if precision == "int8":
            config["stem"] = stem
        return Runner(interpreter, f"{_WHO}, cpu:0 graph", config)  # allocates the tensors

    def _summary(self, runner: Any, threads: int) -> str:
        cfg = runner.config
        left = "" if cfg["cpu_kernel_ops"] == "-" else f" (LiteRT kernels: {cfg['cpu_kernel_ops']})"
        return (f"LiteRT {self.version} with the XNNPACK delegate on cpu:0, {_precision_words(cfg)}, {threads} thread(s); "
                f"XNNPACK took {cfg['delegated_ops']} ops{left}")


def _precision(asked: str, plan: Any) -> str:
    """"fp32", or "int8" with the core's static plan; anything else is refused (typed, named)."""
    if asked == "fp32" and plan is None:
        return "fp32"
    if asked == "int8" and plan is not None:
        return "int8"
    if plan is None:
        raise CompilationError(f"{_WHO}: precision={asked!r} on cpu:0 needs the core's static quantization plan "
                               f"(compile with calibration=...); {_REMEDY}")
    raise CompilationError(f"{_WHO} runs static int8 plans only (the edgetpu writer writes 8-bit activations, no 16x8 "
                           f"models), not {asked!r}; {_INT8_REMEDY}")


def _precision_words(cfg: dict[str, Any]) -> str:
    """The summary's precision: "fp32", or int8 with the kernels that run it (XNNPACK's int8,
    on AMX tiles where this process has them, and the stem written)."""
    if cfg.get("precision") != "int8":
        return "fp32"
    tiles = " on AMX tiles" if cfg.get("x86_amx") == "granted" else ""
    stem = ", space-to-depth stem" if cfg.get("stem") == "space_to_depth" else ""
    return f"int8 with the core's plan (XNNPACK's int8 kernels{tiles}{stem})"


def _threads(asked: int | None) -> int:
    """``threads=`` as LiteRT takes it: a positive int; None is every CPU this process may use."""
    if asked is None:
        try:
            return len(os.sched_getaffinity(0)) or 1
        except (AttributeError, OSError):  # not Linux: no affinity mask to read
            return os.cpu_count() or 1
    if isinstance(asked, bool) or not isinstance(asked, (int, np.integer)) or asked < 1:
        raise CompilationError(f"{_WHO}: threads={asked!r} must be a positive int (or None for every CPU)")
    return int(asked)


def _write(graph: Graph, precision: str, plan: Any, stem: str) -> tuple[bytes, list[np.dtype[Any] | None], str]:
    """The float-I/O TFLite model of ``graph`` (fp32, or int8 with ``plan``), per output the dtype
    to restore where the model's differs from the opset's (None: the model returns the opset's
    dtype), and the stem written ("space_to_depth" only where the int8 writer found one)."""
    from neurenix_core.contract import infer_values
    from neurenix_edgetpu.lowering import lower

    remedy = _REMEDY if plan is None else _INT8_REMEDY
    try:
        lowered = lower(graph, precision, plan, io="float", stem=stem)
    except UnsupportedOperationError as exc:
        message = f"{_WHO} cannot write this cpu:0 graph as {precision} TFLite: {exc}; {remedy}"
        raise UnsupportedOperationError(message, node=exc.node) from exc
    except (QuantizationError, CompilationError) as exc:  # a plan the int8 writer cannot express
        raise CompilationError(f"{_WHO} cannot write this cpu:0 graph as {precision} TFLite: {exc}; {remedy}") from exc
    specs = infer_values(graph)
    casts: list[np.dtype[Any] | None] = []
    for out in lowered.outputs:
        want = np.dtype(specs[out.name].dtype)
        casts.append(None if out.dtype == want else want)
    return lowered.data, casts, lowered.stem


def _litert_version(module: Any) -> str:
    """The installed LiteRT package's version (ai-edge-litert, or tflite-runtime where that is
    the one ``load_litert`` found): part of the core's cache key for the runtime choice."""
    from importlib import metadata

    dist = "tflite-runtime" if module.__name__.startswith("tflite_runtime") else "ai-edge-litert"
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return str(getattr(module, "__version__", "unknown"))
