"""The Tensor Core alignment validator, the zero-padding pass and the validate-tc command."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from neurenix_cuda_tc.alignment import align_model, validate_model
from neurenix_cuda_tc.capability import UnknownPrecisionError
from neurenix_cuda_tc.models import nx_cnn, optimized_cnn, unoptimized_cnn

from neurenix_core.errors import UnsupportedOperationError
from neurenix_core.testing.reference import TOLERANCES


def test_seed_unoptimized_model_findings() -> None:
    findings = validate_model(unoptimized_cnn(), precision="fp16")
    dims = {(f.layer, f.kind): f.message for f in findings}
    assert "3->67" in dims[("0", "conv_channels")]
    assert "67->129" in dims[("2", "conv_channels")]
    assert "129->251" in dims[("6", "linear_features")]
    assert ("0", "memory_format") in dims and ("2", "memory_format") in dims
    assert len(findings) == 5


def test_seed_optimized_twin_has_no_findings() -> None:
    assert validate_model(optimized_cnn(), precision="fp16", batch_size=64) == []


def test_rules_per_precision_and_batch_size() -> None:
    import torch

    lin = torch.nn.Linear(12, 20)
    assert validate_model(lin, precision="tf32") == []  # multiples of 4
    assert [f.kind for f in validate_model(lin, precision="fp16")] == ["linear_features"]
    assert "16" in validate_model(torch.nn.Linear(24, 24), precision="int8")[0].message
    batch = validate_model(torch.nn.Linear(64, 64), precision="bf16", batch_size=30)
    assert [(f.kind, f.suggestion) for f in batch] == [("batch_size", "use 32")]
    with pytest.raises(UnknownPrecisionError):
        validate_model(lin, precision="fp12")


def test_attention_and_head_dim_findings() -> None:
    import torch

    kinds = {f.kind for f in validate_model(torch.nn.MultiheadAttention(60, 4), precision="fp16")}
    assert kinds == {"attention_dim", "head_dim"}  # 60 and head_dim 15
    head_only = validate_model(torch.nn.MultiheadAttention(72, 6), precision="fp16")  # head_dim 12
    assert [f.kind for f in head_only] == ["head_dim"] and "64" in head_only[0].suggestion
    assert validate_model(torch.nn.MultiheadAttention(512, 8), precision="fp16") == []


def test_neurenix_models_are_validated_with_their_layer_names() -> None:
    findings = validate_model(nx_cnn(), precision="fp16", memory_format=False)
    assert [(f.layer, f.kind) for f in findings] == [("0", "conv_channels"), ("2", "conv_channels"), ("6", "linear_features")]


def _residual() -> Any:
    import torch

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1 = torch.nn.Linear(30, 62)
            self.bn = torch.nn.BatchNorm1d(30)
            self.fc2 = torch.nn.Linear(62, 30)
            self.head = torch.nn.Linear(30, 13)

        def forward(self, x: Any) -> Any:
            h = torch.relu(self.fc1(x))
            h = self.fc2(torch.nn.functional.gelu(h)) + x  # residual add: padding must be sliced off
            return self.head(self.bn(h))

    return Block()


def _cnn_bn() -> Any:
    import torch

    m = torch.nn.Sequential(
        torch.nn.Conv2d(3, 67, 3, padding=1), torch.nn.BatchNorm2d(67), torch.nn.SiLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(67, 129, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(2), torch.nn.Flatten(),
        torch.nn.Linear(129 * 4, 251), torch.nn.Sigmoid(),
    )
    with torch.no_grad():
        m[1].running_mean.uniform_(-1, 1)
        m[1].running_var.uniform_(0.5, 2)
        m[1].bias.uniform_(-1, 1)
    return m


@pytest.mark.parametrize(("make", "shape"), [(unoptimized_cnn, (2, 3, 16, 16)), (_cnn_bn, (2, 3, 16, 16)), (_residual, (4, 30))])
def test_padded_models_give_identical_outputs(make: Any, shape: tuple[int, ...]) -> None:
    import torch

    torch.manual_seed(0)
    model = make().eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    padded, done = align_model(model, precision="fp16")
    assert done, "something must have been padded"
    x = torch.randn(shape)
    with torch.no_grad():
        # Equal within float32 rounding: padded layers may take another CPU kernel (see the table).
        np.testing.assert_allclose(padded.eval()(x).numpy(), model(x).numpy(), *TOLERANCES["float32"])
    # The user's model is untouched.
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_padding_fixes_layers_within_the_growth_cap() -> None:
    padded, done = align_model(unoptimized_cnn(), precision="fp16")
    remaining = validate_model(padded, precision="fp16", memory_format=False)
    # 3 -> 8 would grow the input 2.7x (cap 1.2x), so only the first conv's input stays unaligned.
    assert [(f.layer, f.message.split(" (")[0]) for f in remaining] == [("0", "Conv channels 3->72")]
    assert any("67 -> 72" in d for d in done) and any("251 -> 256" in d for d in done)
    import torch

    assert padded.get_submodule("6").weight.shape == torch.Size([256, 136])


def test_inputs_are_zero_padded_when_the_cap_allows() -> None:
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(30, 64), torch.nn.ReLU(), torch.nn.Linear(64, 20)).eval()
    padded, done = align_model(model, precision="fp16")
    assert any("input 30 -> 32" in d for d in done) and any("20 -> 24" in d for d in done)
    x = torch.randn(5, 30)
    with torch.no_grad():
        np.testing.assert_allclose(padded(x).numpy(), model(x).numpy(), atol=1e-6)
    assert validate_model(padded, precision="fp16") == []


def test_untraceable_models_and_foreign_objects_are_refused() -> None:
    import torch

    class Branchy(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(3, 5)

        def forward(self, x: Any) -> Any:
            return self.fc(x) if x.sum() > 0 else x  # data-dependent: fx cannot trace it

    with pytest.raises(UnsupportedOperationError, match="torch.fx"):
        align_model(Branchy())
    with pytest.raises(UnsupportedOperationError, match="cannot lower a builtins.dict"):
        validate_model({"not": "a model"})


def test_validate_tc_command(capsys: Any, tmp_path: Any) -> None:
    from neurenix_core.cli.main import main

    assert main(["validate-tc", "neurenix_cuda_tc.models:unoptimized_cnn"]) == 1
    out = capsys.readouterr().out
    assert "3->67" in out and "129->251" in out and "5 Tensor Core finding(s)" in out
    assert main(["validate-tc", "neurenix_cuda_tc.models:optimized_cnn", "--batch-size", "64"]) == 0
    script = tmp_path / "my_model.py"
    script.write_text("import torch\nnet = torch.nn.Linear(100, 10)\n")
    assert main(["validate-tc", f"{script}:net", "--json", "--precision", "tf32"]) == 1
    assert '"linear_features"' in capsys.readouterr().out
    assert main(["validate-tc", f"{script}:missing"]) == 2
    assert "has no attribute 'missing'" in capsys.readouterr().err
