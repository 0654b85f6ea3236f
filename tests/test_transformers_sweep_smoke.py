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
    assert any(line.split()[:4] == ["bert", "crash", "->", "pass"] for line in sweep.diff(str(old), records).splitlines())


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
