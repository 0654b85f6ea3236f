"""Mixed precision instead of refusal (issue #44): a calibrated int8 plan that verification would
refuse keeps the layers whose rounding loses the model in float (graph/quantization/mixed.py).

The transformers are tiny and random, so they are given what breaks per-tensor int8 in trained
ones: two residual-stream channels far larger than the others (a ViT's "massive activations",
BERT's outlier dimensions), which every layer norm scales down. Quantizing a layer norm's input
(the residual add) then rounds the other channels away; before this change nx.compile refused
both models on every device, now the adds stay in float and the rest is int8.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import neurenix_core as nx
from neurenix_core.graph import quantization as Q
from neurenix_core.graph.quantization import mixed as M
from neurenix_core.graph.quantization import verify as V
from neurenix_core.graph.reference.run import run_quantized

DEVICES = [d for d in ("cpu", "npu") if any(str(x) == f"{d}:0" for x in nx.devices())]
OUTLIERS = [5, 17]  # the planted channels


class _Logits(torch.nn.Module):
    def __init__(self, model: Any, names: list[str]) -> None:
        super().__init__()
        self.model, self.names = model, names

    def forward(self, *xs: Any) -> Any:
        return self.model(**dict(zip(self.names, xs))).logits


def _layer_norms_scale_outliers_down(model: Any) -> None:
    for m in model.modules():
        if isinstance(m, torch.nn.LayerNorm):
            m.weight[OUTLIERS] = 0.01


def _vit() -> tuple[Any, list[np.ndarray]]:
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    config = ViTConfig(image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
                       intermediate_size=128, num_labels=10)
    vit = ViTForImageClassification(config).eval()
    with torch.no_grad():  # outliers in the residual stream from the start: the position embeddings
        vit.vit.embeddings.position_embeddings[..., OUTLIERS] += torch.tensor([30.0, -30.0])
        _layer_norms_scale_outliers_down(vit)
    rng = np.random.default_rng(0)
    calibration = [rng.standard_normal((8, 3, 32, 32)).astype(np.float32) for _ in range(4)]
    return nx.nn.from_torch(_Logits(vit, ["pixel_values"]).eval(), (torch.from_numpy(calibration[0]),)), calibration


def _bert() -> tuple[Any, list[tuple[np.ndarray, np.ndarray]]]:
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    config = BertConfig(vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                        num_labels=4, max_position_embeddings=64)
    bert = BertForSequenceClassification(config).eval()
    with torch.no_grad():  # outliers written into the residual stream by the first FFN
        bert.bert.encoder.layer[0].output.dense.bias[OUTLIERS] = torch.tensor([100.0, -100.0])
        _layer_norms_scale_outliers_down(bert)
    rng = np.random.default_rng(0)
    calibration = [(rng.integers(3, 128, (8, 16)).astype(np.int64), np.ones((8, 16), np.int64)) for _ in range(4)]
    example = tuple(torch.from_numpy(a) for a in calibration[0])
    return nx.nn.from_torch(_Logits(bert, ["input_ids", "attention_mask"]).eval(), example), calibration


@pytest.fixture(scope="module", params=["vit", "bert"])
def transformer(request: pytest.FixtureRequest) -> tuple[str, Any, list[Any]]:
    model, calibration = {"vit": _vit, "bert": _bert}[request.param]()
    return request.param, model, calibration


def _args(batch: Any) -> tuple[Any, ...]:
    return batch if isinstance(batch, tuple) else (batch,)


def test_refused_without_mixed_precision(transformer: tuple[str, Any, list[Any]]) -> None:
    """With min/max ranges both plans are over 30% and refused; the default least-error ranges
    bring the BERT's plan within 30%: it compiles all-int8."""
    name, model, calibration = transformer
    with pytest.raises(nx.CompilationError, match=r"int8 plan does not describe the model: the integer reference is"):
        nx.compile(model, device="cpu", quantize="int8", calibration=calibration, progress=False, mixed_precision=False,
                   calibration_method="minmax")
    if name == "bert":
        compiled = nx.compile(model, device="cpu", quantize="int8", calibration=calibration, progress=False, mixed_precision=False)
        assert compiled.plan is not None and compiled.plan.method == "histogram" and not compiled.float_layers


@pytest.mark.parametrize("device", DEVICES)
def test_compiles_int8_with_the_layer_norm_inputs_in_float(transformer: tuple[str, Any, list[Any]], device: str) -> None:
    name, model, calibration = transformer
    compiled = nx.compile(model, device=device, quantize="int8", calibration=calibration, progress=False)
    assert compiled.precision == "int8"
    floats, graph = compiled.float_layers, compiled.graph
    dropped = {v for f in floats for v in f.values}
    # The residual adds that feed a layer norm are in float, chosen for the norm's error jump (in
    # the ViT every block's: the stream carries the outliers through all of them); the linear
    # layers compute in int8 (every value an integer kernel reads stays int8; a linear's output
    # may stay float: tests/test_int8_float_outputs.py).
    adds_into_norms = {n.inputs[0] for n in graph.nodes if n.op == "layer_norm"} & {n.output for n in graph.nodes if n.op == "add"}
    assert any(f.op == "add" and f.culprit_op == "layer_norm" for f in floats), floats
    assert adds_into_norms <= dropped if name == "vit" else adds_into_norms & dropped, floats
    assert not dropped & M.fixed_values(graph)
    calibrated = Q.calibrate(graph, calibration, progress=False)
    assert set(compiled.plan.activations) == set(calibrated.activations) - dropped
    assert compiled.plan.weights.keys() == calibrated.weights.keys()
    summary = compiled.summary
    assert f"int8, {len(dropped)} of " in summary and "layers kept in float (mixed precision" in summary, summary
    assert all(f.line() in summary for f in sorted(floats, key=lambda f: -f.jump)[:8]), summary  # the largest jumps first
    v = compiled.verification
    assert v.plan_relative <= M.MIXED_TARGET and v.device_relative <= v.device_bound, summary
    # The device computes the mixed plan's integer reference.
    batch = _args(calibration[2])
    want = run_quantized(compiled.graph, compiled.plan, *batch)
    step = float(compiled.plan.activations[compiled.graph.outputs[0]].scale[0])
    assert np.abs(np.asarray(compiled(*batch).numpy()) - want).max() <= 4 * step, name


def _residual_cnn() -> tuple[Any, list[np.ndarray]]:
    """A CNN whose residual add feeds a hardswish: a value the plan could keep in float."""

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU())
            self.body = torch.nn.Conv2d(8, 8, 3, padding=1)
            self.act = torch.nn.Hardswish()
            self.head = torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4))

        def forward(self, x: Any) -> Any:
            h = self.stem(x)
            return self.head(self.act(h + self.body(h)))

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    calibration = [rng.standard_normal((4, 3, 8, 8)).astype(np.float32) for _ in range(4)]
    return nx.nn.from_torch(Net().eval(), (torch.from_numpy(calibration[0]),)), calibration


def test_a_cnn_that_passes_keeps_every_layer_int8() -> None:
    model, calibration = _residual_cnn()
    compiled = nx.compile(model, device="cpu", quantize="int8", calibration=calibration, progress=False)
    graph = compiled.graph
    droppable = {n.output for n in graph.nodes if n.op != "constant"} - M.fixed_values(graph)
    assert droppable & set(compiled.plan.activations)  # there was something to mix: mixing chose not to
    assert compiled.float_layers == () and "kept in float" not in compiled.summary
    assert set(compiled.plan.activations) == set(Q.calibrate(graph, calibration, progress=False).activations)
    assert compiled.verification.plan_relative <= M.MIXED_TARGET
    assert M.mix(graph, compiled.plan, calibration, device="cpu:0", progress=False) is None


def test_a_cnn_between_5_and_30_percent_is_mixed_except_where_float_layers_run_on_the_host() -> None:
    """``mixed.mix_for_device``: a CNN's plan past 5% is mixed on a device that computes float in
    place (its float activations cost OpenVINO no speed: docs/quantization.md), and left all-int8
    under 30% where each float layer is a hop to cpu:0 (edgetpu)."""
    model, calibration = _residual_cnn()
    graph = Q.fold_batch_norm(model.to_graph())
    plan = Q.calibrate(graph, calibration, progress=False)
    add = next(n.output for n in graph.nodes if n.op == "add")
    coarse = dict(plan.activations)
    coarse[add] = dataclasses.replace(coarse[add], scale=coarse[add].scale * np.float32(80.0))  # the residual sum in 3 steps
    rough = dataclasses.replace(plan, activations=coarse)
    assert M.MIXED_TRIGGER < M.plan_error(graph, rough, calibration) <= M.CONSERVATIVE_TRIGGER
    mixed = M.mix_for_device(graph, rough, calibration, device="cpu:0", host=False, progress=False)
    assert mixed is not None and add in {v for f in mixed.float_layers for v in f.values} and mixed.error <= M.MIXED_TARGET, mixed
    assert M.mix_for_device(graph, rough, calibration, device="edgetpu:0", host=True, progress=False) is None


def test_a_hand_made_broken_plan_is_still_refused(transformer: tuple[str, Any, list[Any]]) -> None:
    """A plan given as quantize= is the user's: verified and refused as it is, never mixed, even
    where the broken value is one a mix could keep in float."""
    _, model, calibration = transformer
    compiled = nx.compile(model, device="cpu", quantize="int8", calibration=calibration, progress=False)
    value = next(v for f in compiled.float_layers for v in f.values)
    plan = Q.calibrate(compiled.graph, calibration, progress=False)
    broken = dict(plan.activations)
    broken[value] = dataclasses.replace(broken[value], scale=broken[value].scale * np.float32(0.02))
    with pytest.raises(nx.CompilationError, match=r"plan does not describe the model.*first layer over 30%"):
        nx.compile(compiled.graph, device="cpu", quantize=dataclasses.replace(plan, activations=broken),
                   calibration=calibration, progress=False)


def test_mixing_is_bounded_and_reports_its_runs(transformer: tuple[str, Any, list[Any]]) -> None:
    _, model, calibration = transformer
    graph = Q.fold_batch_norm(model.to_graph())
    plan = Q.calibrate(graph, calibration, progress=False)
    assert M.plan_error(graph, plan, calibration) > V.PLAN_TOLERANCE
    mixed = M.mix(graph, plan, calibration, device="cpu:0", progress=False, max_runs=3)
    assert mixed is not None and mixed.runs <= 3 and mixed.error <= V.PLAN_TOLERANCE
    assert mixed.error == pytest.approx(M.plan_error(graph, mixed.plan, calibration))
    assert f"{mixed.runs} reference runs" in mixed.line()
