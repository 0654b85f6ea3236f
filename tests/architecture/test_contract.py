"""``neurenix_core.contract``: the one module a backend plugin imports from the core.

Every name docs/vendors.md's table lists is in it and is the very object its home module defines
(hook markers, classes and registries must be identical, not copies); importing it loads none of
the layers it points into; the first-party plugins and the vendor template import the core only
through it, ``errors`` and the conformance kit (their tests may reach further).
"""

from __future__ import annotations

import ast
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from neurenix_core import contract

ROOT = Path(__file__).resolve().parents[2]
#: What a plugin's source may import from the core besides the contract: the error hierarchy,
#: the conformance kit, and the package itself (``import neurenix_core as nx`` in examples).
OTHER_ALLOWED = ("neurenix_core", "neurenix_core.contract", "neurenix_core.errors", "neurenix_core.testing")


def _vendor_table_names() -> set[str]:
    """The names in the first column of docs/vendors.md's contract table (``| names | for |``)."""
    text = (ROOT / "docs" / "vendors.md").read_text()
    table = text.split("\n| names | for |\n", 1)[1].split("\n\n", 1)[0]
    first_cells = [line.split("|")[1] for line in table.splitlines()[1:]]
    # Parenthesised parts describe a name (its fields, its functions): not names of the module.
    return {m for cell in first_cells for m in re.findall(r"`([A-Za-z_]\w*)", re.sub(r"\([^)]*\)", "", cell))}


def test_the_vendor_table_lists_exactly_the_contract() -> None:
    names = _vendor_table_names() - {"nx"}
    assert names - set(contract.__all__) == set(), "docs/vendors.md lists names the contract lacks"
    assert set(contract.__all__) - names == set(), "the contract has names docs/vendors.md does not list"


@pytest.mark.parametrize("name", contract.__all__)
def test_a_name_is_the_object_its_home_module_defines(name: str) -> None:
    if name in contract.MODULES:
        expected = importlib.import_module(contract.MODULES[name])
    else:
        expected = getattr(importlib.import_module(contract.HOMES[name]), name)
    assert getattr(contract, name) is expected


def test_an_unknown_name_says_where_the_list_is() -> None:
    with pytest.raises(AttributeError, match="docs/vendors.md"):
        contract.no_such_name  # noqa: B018


def test_importing_the_contract_loads_no_layer_it_points_into() -> None:
    code = ("import sys, json, neurenix_core.contract\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('neurenix_core.graph.compile', 'neurenix_core.graph.reference', "
            "'neurenix_core.graph.quantization', 'neurenix_core.graph.exporters')))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env={"NEURENIX_BACKENDS": "-onnxruntime", "PATH": ""})
    assert json.loads(out.stdout) == []


def _core_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "neurenix_core" and not node.level:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "neurenix_core")
    return found


PLUGIN_SOURCES = sorted(
    [*ROOT.glob("plugins/*/src/neurenix_*/**/*.py"), *ROOT.glob("examples/vendor-template/src/**/*.py"),
     *ROOT.glob("examples/neurenix-onnxruntime/src/**/*.py")],
)


@pytest.mark.parametrize("path", PLUGIN_SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_plugin_sources_import_the_core_through_the_contract(path: Path) -> None:
    stray = sorted(m for m in _core_imports(path) if m not in OTHER_ALLOWED and not m.startswith("neurenix_core.testing."))
    assert not stray, f"{path.relative_to(ROOT)} imports {stray}: import those names from neurenix_core.contract (add them there if missing)"
