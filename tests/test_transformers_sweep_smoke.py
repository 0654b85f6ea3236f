"""benchmarks/transformers_sweep.py on two tiny architectures (BERT, GPT-2) through its own
functions: both build from their config classes without a download, import with from_torch, run
on cpu:0 and match eager PyTorch; the summary and --diff read the records."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="the sweep builds PyTorch models")
pytest.importorskip("transformers", reason="the sweep enumerates transformers' auto mappings")

ROOT = Path(__file__).resolve().parents[1]


def _sweep() -> Any:
    spec = importlib.util.spec_from_file_location("transformers_sweep", ROOT / "benchmarks" / "transformers_sweep.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_bert_and_gpt2_pass_on_cpu(tmp_path: Path) -> None:
    import torch

    import neurenix_core as nx
    from neurenix_core import errors

    sweep = _sweep()
    types = sweep.model_types()
    assert types["bert"] == "BertModel" and types["gpt2"] == "GPT2Model"
    records = []
    for name in ("bert", "gpt2"):
        with sweep.alarm(60):
            outcome, error = sweep.run_type(torch, nx, errors, name, types[name], "cpu:0", seed=0)
        assert outcome == "pass", (name, outcome, error)
        records.append({"name": name, "model": types[name], "outcome": outcome, "error": error})
    assert "pass 2/2" in sweep.summary(records)
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"meta": {}, "types": [{"name": "bert", "model": "BertModel", "outcome": "crash", "error": ""}]}))
    # an old record without a device is read as its file's device (cpu:0 when the meta names none)
    assert any(line.split()[:5] == ["bert", "cpu:0", "crash", "->", "pass"] for line in sweep.diff(str(old), records).splitlines())


def test_tiny_build_is_tiny() -> None:
    """The shrink reaches nested configs and keeps special token ids inside the small vocabulary."""
    import torch

    sweep = _sweep()
    model = sweep.build(torch, "gpt2", "GPT2Model", seed=0)
    assert sum(p.numel() for p in model.parameters()) < 100_000
    config = sweep.tiny_config(__import__("transformers").CONFIG_MAPPING["gpt2"], model_type="gpt2")
    assert config.vocab_size == sweep.VOCAB and config.eos_token_id < sweep.VOCAB


def test_grouped_mm_fallback_imports() -> None:
    """transformers 5's mixture-of-experts op ``transformers::grouped_mm_fallback`` (found by the
    sweep: Aria, DeepSeek-V4, Cohere2-MoE ...): rows sorted by expert, one expert with no rows,
    and rows past the last count (zero in PyTorch), dynamic row count included."""
    import numpy as np
    import torch
    from transformers.integrations import moe  # noqa: F401 - registers torch.ops.transformers.grouped_mm_fallback

    from neurenix_core import nn

    class Experts(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(0)))

        def forward(self, x: Any, offs: Any) -> Any:
            return torch.ops.transformers.grouped_mm_fallback(x, self.weight, offs)

    module = Experts().eval()
    x = torch.randn(7, 4, generator=torch.Generator().manual_seed(1))
    offs = torch.tensor([2, 2, 6], dtype=torch.int32)  # expert 1 has no rows; row 6 is past the last count
    with torch.no_grad():
        want = module(x, offs).numpy()
    assert not want[6].any()
    got = np.asarray(nn.from_torch(module, (x, offs), static=True)(x.numpy(), offs.numpy()))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    dynamic = nn.from_torch(module, (x, offs), dynamic_shapes=({0: torch.export.Dim.AUTO}, None))
    x9 = torch.randn(9, 4, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want9 = module(x9, offs).numpy()
    np.testing.assert_allclose(np.asarray(dynamic(x9.numpy(), offs.numpy())), want9, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- emulated devices
#: device -> (its plugin's module, the precision the sweep runs it in: tpu:0's default is bf16).
DEVICES = {"npu:0": ("neurenix_npu_openvino", ""), "tpu:0": ("neurenix_tpu", "fp32"),
           "cuda:0": ("neurenix_cuda_tc", ""), "edgetpu:0": ("neurenix_edgetpu", "")}
#: An encoder (BERT), a causal LM whose Conv1D layers are gemm (GPT-2: edgetpu:0 places them on
#: cpu:0) and a vision transformer (ViT).
DEVICE_SAMPLE = ("bert", "gpt2", "vit")


@pytest.fixture(scope="module")
def prepared() -> dict[str, Any]:
    """The sample types built, run eagerly and imported once for every device's test."""
    import torch

    import neurenix_core as nx
    from neurenix_core import errors

    sweep = _sweep()
    types = sweep.model_types()
    out = {}
    for name in DEVICE_SAMPLE:
        with sweep.alarm(120):
            out[name] = sweep.prepare(torch, nx, errors, name, types[name], seed=0)
        assert isinstance(out[name], sweep.Prepared), (name, out[name])
    return out


@pytest.mark.parametrize("device", list(DEVICES))
def test_sample_passes_on_emulated_device(device: str, prepared: dict[str, Any]) -> None:
    """Each sample type, imported once, compiles on the device and matches eager PyTorch at the
    sweep's float32 tolerance; the record says where its nodes ran."""
    import torch

    import neurenix_core as nx
    from neurenix_core import errors

    module, precision = DEVICES[device]
    pytest.importorskip(module, reason=f"the {device} plugin ({module}) is not installed")
    if device.split(":")[0] not in {d.type for d in nx.devices()}:
        pytest.skip(f"{device} is not available: set NEURENIX_EMULATE=cuda,tpu,npu,edgetpu")
    sweep = _sweep()
    records = []
    for name, ready in prepared.items():
        with sweep.alarm(120):
            fields = sweep.run_device(torch, nx, errors, ready, device, precision)
        assert fields["outcome"] == "pass", (name, device, fields)
        assert fields["precision"] == "fp32" and fields["placement"].startswith(device), fields
        records.append({"name": name, "device": device} | fields)
    assert f"pass {len(DEVICE_SAMPLE)}/{len(DEVICE_SAMPLE)}" in sweep.summary(records)
    # BERT's and ViT's ops are all declared by every plugin: nothing is placed on cpu:0.
    assert all(r["on_device"] for r in records if r["name"] != "gpt2"), records


def test_precision_argument() -> None:
    """--precision: one value for every device, or per device (a device not named: its default)."""
    sweep = _sweep()
    assert sweep.precisions("fp32", ["npu:0", "tpu:0"]) == {"npu:0": "fp32", "tpu:0": "fp32"}
    assert sweep.precisions("tpu:0=fp32", ["npu:0", "tpu:0"]) == {"npu:0": "", "tpu:0": "fp32"}
    with pytest.raises(ValueError, match="cuda:0"):
        sweep.precisions("cuda:0=fp16", ["npu:0"])
