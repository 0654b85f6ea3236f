"""docs/models.md carries the opset table generated from the code, and it is current."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from repo_scripts import load_script

from neurenix_core.graph import opset

ROOT = Path(__file__).resolve().parents[1]


def _generator() -> Any:
    return load_script("gen_opset_doc")


def test_opset_table_in_models_md_is_current() -> None:
    gen = _generator()
    text = (ROOT / "docs" / "models.md").read_text()
    assert gen.render(text) == text, "docs/models.md is stale: run python scripts/gen_opset_doc.py"  # type: ignore[attr-defined]
    for name, d in opset.OPSET.items():
        assert f"| `{name}` |" in text
        assert ("composite" in text.split(f"| `{name}` |")[1].split("\n")[0]) == d.composite
