"""Each plugin's doc page lists the ops it lowers, generated from its manifest, and the list is current."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from repo_scripts import load_script

from neurenix_core.graph import opset
from neurenix_core.graph.opset.coverage import coverage, markdown

ROOT = Path(__file__).resolve().parents[1]


def _generator() -> Any:
    return load_script("gen_plugin_ops_doc")


GEN = _generator()


@pytest.mark.parametrize("plugin", sorted(GEN.PAGES))  # type: ignore[attr-defined]
def test_plugin_page_lists_its_declared_ops(plugin: str) -> None:
    page = GEN.PAGES[plugin]  # type: ignore[attr-defined]
    text = page.read_text()
    assert GEN.render(plugin, text) == text, f"{page} is stale: run python scripts/gen_plugin_ops_doc.py"  # type: ignore[attr-defined]


def test_coverage_sorts_every_op_once() -> None:
    c = coverage(("conv2d", "linear", "relu"), ("float32",))
    groups = [set(c.native), set(c.decomposed), set(c.on_cpu)]
    assert set().union(*groups) == set(opset.OPSET) - {"constant"}  # data, fed as an input
    assert sum(map(len, groups)) == len(opset.OPSET) - 1
    assert "linear" in c.native and "gelu" in c.decomposed and "matmul" in c.on_cpu
    assert "`matmul`" in markdown("x", ("conv2d",), ("float32",)).split("On the CPU instead")[1]


def test_unknown_declared_op_is_refused() -> None:
    with pytest.raises(ValueError, match="not_an_op"):
        coverage(("conv2d", "not_an_op"), ("float32",))
