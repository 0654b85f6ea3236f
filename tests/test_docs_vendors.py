"""Every Python block of docs/vendors.md runs, in order, in one namespace."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "vendors.md"
_BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def blocks(lang: str) -> list[str]:
    return [body for kind, body in _BLOCK.findall(DOC.read_text()) if kind == lang]


def test_python_blocks_run() -> None:
    code = blocks("python")
    assert len(code) >= 8
    namespace: dict[str, object] = {"__name__": "docs_vendors"}
    for i, body in enumerate(code):
        exec(compile(body, f"{DOC.name}[python block {i}]", "exec"), namespace)  # noqa: S102 - the doc's own examples


def test_toml_block_matches_the_template() -> None:
    (toml,) = blocks("toml")
    template = (DOC.parents[1] / "examples" / "vendor-template" / "pyproject.toml").read_text()
    assert toml.strip() in template
