"""docs/vendors.md's TOML block is the template's entry point (its python blocks run in tests/test_docs_snippets.py)."""

from __future__ import annotations

from doc_snippets import ROOT, blocks


def test_toml_block_matches_the_template() -> None:
    (toml,) = blocks((ROOT / "docs" / "vendors.md").read_text(), "toml")
    template = (ROOT / "examples" / "vendor-template" / "pyproject.toml").read_text()
    assert toml.code.strip() in template
