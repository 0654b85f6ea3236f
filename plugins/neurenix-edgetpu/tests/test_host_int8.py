"""Static int8 on LiteRT's XNNPACK kernels for cpu:0 (issue #44, host runtime API 1.5).

``nx.compile(graph, device="cpu", precision="int8", calibration=...)`` offers the core's static
plan to the host runtimes listing int8 (``HostRuntime.quantized_precisions``). LiteRT takes it:
the edgetpu writer's full-integer model with float32 I/O (``neurenix_edgetpu.host``), run by
XNNPACK's int8 kernels. Real LiteRT throughout; the device is ``cpu:0``, not an emulated Edge TPU.

Agreement with the core's integer reference (``run_quantized``, TFLite's fixed-point arithmetic):
XNNPACK requantizes each layer's int32 accumulators with a float multiplier, so a value on a
rounding boundary lands one step away from TFLite's fixed-point result; such a step in an inner
layer moves an output by at most about one output step more. The tests allow 2 output steps on
any element (:data:`_STEPS`; measured: at most 1 on 30 batches of each model) and a mean of
0.3 steps over all elements (:data:`_MEAN`; measured 0.02-0.11: the share of elements one step
away): a dropped bias or a wrong scale moves many elements by many steps.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

import neurenix_core as nx
from neurenix_core.graph.ir import Graph, Node, TensorSpec
from neurenix_core.graph.ir.host import HostOptions
from neurenix_core.graph.reference.run import run_quantized

torch = pytest.importorskip("torch")

from host_models import host_runtime
from host_models import torch_cnn as _cnn
from host_models import torch_mlp as _mlp

#: Output steps any element may be from the integer reference (see the module docstring).
_STEPS = 2.0
#: Mean distance from the integer reference over every output element, in output steps.
_MEAN = 0.3


def _litert() -> Any:
    return host_runtime("litert")


def _batches(shape: tuple[int, ...], n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(n)]


def _stem_cnn() -> Any:
    """A 3-channel 3x3 stem then a stride-2 3x3 convolution: the pattern the space-to-depth stem
    rewrites (lower_s2d.py), so the stem choice of this CPU is exercised."""
    torch.manual_seed(0)
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10)).eval()


@pytest.fixture
def state(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A fresh state folder, so the choice cache of another test or process does not answer."""
    from neurenix_core.plugins.state import registry

    monkeypatch.setattr(registry().config, "state_dir", str(tmp_path))
    return tmp_path


def _steps_off(compiled: Any, x: np.ndarray) -> np.ndarray:
    """How far each element of ``compiled(x)`` is from the integer reference, in output steps."""
    graph = compiled.graph.with_input_shapes(x.shape)
    want = np.asarray(run_quantized(graph, compiled.plan, x), np.float64)  # one output: the array itself
    got = np.asarray(compiled(x).numpy(), np.float64)
    step = float(np.max(compiled.plan.activations[graph.outputs[0]].scale))
    return np.abs(got - want).ravel() / step


def test_litert_lists_int8_and_not_int16() -> None:
    # The writer writes 8-bit per-tensor activations only: no 16x8 model for int16 plans.
    assert _litert().quantized_precisions == frozenset({"int8"})


@pytest.mark.parametrize(("make", "shape"), [(_cnn, (2, 3, 32, 32)), (_mlp, (4, 64)), (_stem_cnn, (1, 3, 64, 64))],
                         ids=["cnn", "mlp", "stem_cnn"])
def test_int8_models_run_on_litert_and_agree_with_the_integer_reference(make: Any, shape: tuple[int, ...]) -> None:
    compiled = nx.compile(nx.nn.from_torch(make()), device="cpu", precision="int8", calibration=_batches(shape, 8, 5),
                          runtime="litert", threads=1)
    off = np.concatenate([_steps_off(compiled, x) for x in _batches(shape, 6, 100)])
    assert off.max() <= _STEPS and off.mean() <= _MEAN, (off.max(), off.mean())
    summary = compiled.summary
    for words in ("LiteRT", "XNNPACK delegate on cpu:0", "int8 with the core's plan (XNNPACK's int8 kernels",
                  "1 thread(s)", "runtime litert (runtime='litert' asked)"):
        assert words in summary, summary
    assert "emulated" not in summary and "fp32" not in summary


@pytest.mark.parametrize(("make", "shape"), [(_cnn, (2, 3, 32, 32)), (_mlp, (4, 64))], ids=["cnn", "mlp"])
def test_xnnpack_takes_every_op_of_the_int8_model(make: Any, shape: tuple[int, ...]) -> None:
    compiled = nx.compile(nx.nn.from_torch(make()), device="cpu", precision="int8", calibration=_batches(shape, 4, 5),
                          runtime="numpy")
    compiled(_batches(shape, 1, 0)[0])
    graph = compiled.graph.with_input_shapes(shape)
    model = _litert().compile(graph, HostOptions(precision="int8", threads=1, plan=compiled.plan))
    cfg = model.config
    assert cfg["precision"] == "int8" and cfg["kernels"] == "xnnpack" and cfg["cpu_kernel_ops"] == "-", cfg
    taken, total = map(int, cfg["delegated_ops"].split("/"))
    assert taken == total > 0, cfg  # QUANTIZE, the int8 layers and DEQUANTIZE all in XNNPACK
    assert f"XNNPACK took {taken}/{total} ops" in model.summary, model.summary


def test_the_stem_is_the_devices_auto_choice_and_changes_no_integer() -> None:
    from neurenix_edgetpu.amx import xnnpack_amx

    shape = (1, 3, 64, 64)
    compiled = nx.compile(nx.nn.from_torch(_stem_cnn()), device="cpu", precision="int8", calibration=_batches(shape, 4, 5),
                          runtime="numpy")
    x = _batches(shape, 1, 7)[0]
    compiled(x)
    rt = _litert()
    model = rt.compile(compiled.graph.with_input_shapes(shape), HostOptions(precision="int8", threads=1, plan=compiled.plan))
    granted = xnnpack_amx(rt._start_xnnpack) == "granted"
    assert model.config["stem"] == ("space_to_depth" if granted else "plain"), model.config
    assert ("space-to-depth stem" in model.summary) == granted and ("on AMX tiles" in model.summary) == granted, model.summary
    # The rewritten stem computes the plain one's integers (lower_s2d.py): same outputs.
    from neurenix_edgetpu.lowering import lower

    plain = rt._runner(lower(compiled.graph.with_input_shapes(shape), "int8", compiled.plan, io="float", stem="plain").data,
                       1, "int8", "plain")
    np.testing.assert_array_equal(model(x)[0], plain.invoke1(x))


def _conv_transpose_graph() -> Graph:
    """conv, ReLU, a stride-2 transposed convolution: the last has no int8 form in the writer."""
    rng = np.random.default_rng(0)
    conv = {"in_channels": 3, "out_channels": 8, "kernel_size": (3, 3), "groups": 1, "stride": (1, 1), "padding": (1, 1),
            "dilation": (1, 1)}
    return Graph((TensorSpec("x", (1, 3, 32, 32)),), (
        Node("c", "conv2d", ("x",), "a", conv, {"weight": rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32),
                                                "bias": rng.normal(0, 0.1, 8).astype(np.float32)}),
        Node("r", "relu", ("a",), "b"),
        Node("ct", "conv_transpose2d", ("b",), "y", {"stride": (2, 2), "padding": (0, 0)},
             {"weight": rng.normal(0, 0.3, (8, 4, 2, 2)).astype(np.float32), "bias": np.zeros(4, np.float32)}),
    ), ("y",))


def test_a_graph_the_int8_writer_cannot_write_is_refused_naming_litert(state: Any) -> None:
    graph, cal = _conv_transpose_graph(), _batches((1, 3, 32, 32), 4, 1)
    refusal = r"host runtime litert \(plugin edgetpu\) cannot write .* as int8 TFLite: layer 'ct' \(conv_transpose2d\).*runtime='auto'"
    with pytest.raises(nx.UnsupportedOperationError, match=refusal):
        nx.compile(graph, device="cpu", precision="int8", calibration=cal, runtime="litert")(cal[0])
    # The default choice skips litert with that reason and runs the model elsewhere.
    compiled = nx.compile(graph, device="cpu", precision="int8", calibration=cal)
    compiled(cal[0])
    assert not re.search(r"(?<!host )runtime litert \(", compiled.summary), compiled.summary
    assert "litert: host runtime litert (plugin edgetpu) cannot write" in compiled.summary, compiled.summary


def test_int16_is_refused_for_litert() -> None:
    shape = (4, 64)
    with pytest.raises(nx.UnsupportedOperationError, match=r"runtime='litert' was asked, but litert has no int16 kernels"):
        nx.compile(nx.nn.from_torch(_mlp()), device="cpu", precision="int16", calibration=_batches(shape, 4, 5),
                   runtime="litert")(_batches(shape, 1, 0)[0])


def test_compile_refuses_a_precision_without_its_plan() -> None:
    rt = _litert()
    graph = nx.compile(nx.nn.from_torch(_mlp()), device="cpu", runtime="numpy").graph.with_input_shapes((4, 64))
    with pytest.raises(nx.CompilationError, match=r"litert.*precision='int8' on cpu:0 needs the core's static quantization plan"):
        rt.compile(graph, HostOptions(precision="int8", threads=1))


@pytest.mark.parametrize(("make", "shape"), [(_cnn, (2, 3, 32, 32)), (_stem_cnn, (1, 3, 64, 64))], ids=["cnn", "stem_cnn"])
def test_the_default_choice_measures_litert_for_int8(state: Any, make: Any, shape: tuple[int, ...]) -> None:
    # Which runtime wins is a timing on a shared machine: only that litert took part is asserted.
    compiled = nx.compile(nx.nn.from_torch(make()), device="cpu", precision="int8", calibration=_batches(shape, 4, 5))
    compiled(_batches(shape, 1, 0)[0])
    # Chosen or not, litert compiled, agreed with the integer reference and was timed: its time
    # is in the measured list (a refusal or a wrong result would list it under "not used").
    assert re.search(r"measured [^;]*\blitert [0-9.e+-]+ ms", compiled.summary), compiled.summary
