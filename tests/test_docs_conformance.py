"""docs/conformance.md lists the kit's tests as the kit collects them, and its results table is
of a run of this suite (issue #29): both cheap, nothing of the kit runs."""

from __future__ import annotations

from typing import Any

import pytest
from repo_scripts import ROOT, load_script

GEN: Any = load_script("gen_conformance_doc")
PAGE = ROOT / "docs" / "conformance.md"


@pytest.fixture(scope="module")
def collected() -> list[str]:
    return GEN.collected_ids()


def test_test_list_is_current(collected: list[str]) -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert GEN.render(text, collected) == text, "docs/conformance.md is stale: run python scripts/gen_conformance_doc.py"


def test_every_suite_module_is_a_listed_capability(collected: list[str]) -> None:
    modules = {p.stem.removeprefix("test_") for p in (ROOT / "neurenix_core" / "testing" / "suite").glob("test_*.py")}
    assert {c.name for c in GEN.capabilities(collected)} == modules
    assert "autograd" in modules


def test_results_table_adds_up_to_the_collected_suite(collected: list[str]) -> None:
    rows = GEN.results_rows(PAGE.read_text(encoding="utf-8"))
    assert {"cpu", "cuda", "tpu", "npu", "edgetpu", "ort"} <= set(rows)
    stale = {name: total for name, total in rows.items() if total != len(collected)}
    assert not stale, (f"results of another suite ({stale}, the kit has {len(collected)} tests): rerun the kit with "
                       "--neurenix-report and python scripts/gen_conformance_doc.py --report REPORT")


def test_results_table_is_read_back_from_a_report() -> None:
    report = {"backends": {"acme": {"device": "acme:0", "emulated": True, "fallbacks": {"sort": 2},
                                    "totals": {"passed": 5, "failed": 1, "skipped": 2, "xfailed": 0}}}}
    text = f"x\n{GEN.RESULTS_BEGIN}\n{GEN.RESULTS_END}\ny\n"
    table = GEN.replace_between(text, GEN.RESULTS_BEGIN, GEN.RESULTS_END, GEN.results_section(report))
    assert "| acme | acme:0 (emulated) | 5 | 1 | 2 | 0 | 2 (1) |" in table
    assert GEN.results_rows(table) == {"acme": 8}
