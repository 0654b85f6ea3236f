"""The layers of docs/architecture.md, checked against the code.

The page's table is the source: each row is a layer (from the bottom), each cell a package of
``neurenix_core`` (``graph.compile``), ``X.*`` for the submodules of ``X`` without its ``__init__``
(the namespace ``X`` then sits in a higher row). The import graph comes from the source with
``ast`` (tests/architecture/test_import_graph.py: imports inside functions and the package's lazy
tables count, ``TYPE_CHECKING`` does not). The rules:

* every module belongs to a row, and every row's package exists;
* an import points to the same package, a package of the same layer, or a lower layer;
* no two packages import each other (directly or around a loop), within a layer included;
* no two files import each other, ``TYPE_CHECKING`` included, in the core and in each plugin.

Importing ``a.b.c`` runs ``a/b/__init__.py`` first, so what a package's ``__init__`` imports at
module level counts as imported by each of its submodules (the root package's ``__init__`` aside:
it is every module's parent, and loads only the bottom layers at module level). That is how a
namespace above its submodules (``nx.nn``) would pull a higher layer into ``nn.module``.

An import the page lists under "Allowed exceptions" passes, with its reason beside it there.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.architecture.test_import_graph import (
    PACKAGE,
    _imported_names,
    _is_type_checking,
    _resolve,
    cycles,
    import_graph,
    module_files,
)

ROOT = PACKAGE.parent
PAGE = ROOT / "docs" / "architecture.md"
PLUGIN_PACKAGES = sorted(p for p in (ROOT / "plugins").glob("*/src/neurenix_*") if p.is_dir() and not p.name.endswith(".egg-info"))


def _table(marker: str) -> list[list[str]]:
    text = PAGE.read_text()
    block = text.split(f"<!-- {marker}: begin -->", 1)[1].split(f"<!-- {marker}: end -->", 1)[0]
    rows = [line.strip().strip("|").split("|") for line in block.strip().splitlines()[2:]]
    return [[cell.strip() for cell in row] for row in rows if any(cell.strip() for cell in row)]


def layers() -> list[list[str]]:
    """The packages of each layer, bottom first, as the page's table gives them."""
    return [re.findall(r"`([^`]+)`", row[1]) for row in _table("layers")]


def exceptions() -> set[tuple[str, str]]:
    return {(re.findall(r"`([^`]+)`", row[0])[0], re.findall(r"`([^`]+)`", row[1])[0]) for row in _table("exceptions")}


def _relative(module: str) -> str:
    return "" if module == "neurenix_core" else module.removeprefix("neurenix_core.")


def package_of(module: str, table: list[list[str]]) -> str | None:
    """The row entry ``module`` belongs to: a namespace ``X`` alone when ``X.*`` is listed, else
    the longest listed package that contains it."""
    rel = _relative(module)
    entries = [e for row in table for e in row]
    if rel == "":
        return "neurenix_core" if "neurenix_core" in entries else None
    if rel in entries and f"{rel}.*" in entries:
        return rel
    best: str | None = None
    for entry in entries:
        name = entry.removesuffix(".*")
        inside = rel.startswith(name + ".") if entry.endswith(".*") else (rel == name or rel.startswith(name + "."))
        if inside and (best is None or len(name) > len(best.removesuffix(".*"))):
            best = entry
    return best


def _layer_index(table: list[list[str]]) -> dict[str, int]:
    return {entry: i for i, row in enumerate(table) for entry in row}


def _module_level_imports(module: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """What ``module`` imports when it is loaded: top-level statements (class bodies and ``if``/
    ``try`` blocks included), not function bodies, ``TYPE_CHECKING`` aside."""
    stack: list[ast.AST] = list(ast.parse(path.read_text(), filename=str(path)).body)
    found: set[str] = set()
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            tree = ast.Module(body=[node], type_ignores=[])
            found.update(t for n in _imported_names(module, path.name == "__init__.py", tree) if (t := _resolve(n, mods)))
            continue
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))
    return found


def import_graph_with_packages() -> dict[str, set[str]]:
    """The import graph plus, for each module, what its enclosing packages' ``__init__`` files
    import at module level (run before the module itself)."""
    mods = module_files()
    graph = {m: set(t) for m, t in import_graph().items()}
    init_imports = {m: _module_level_imports(m, p, mods) for m, p in mods.items() if p.name == "__init__.py" and m != "neurenix_core"}
    for module in mods:
        parts = module.split(".")
        for depth in range(2, len(parts)):
            package = ".".join(parts[:depth])
            graph[module] |= {t for t in init_imports.get(package, set()) if t != module and not t.startswith(module + ".")}
    return graph


def package_graph(table: list[list[str]]) -> dict[str, dict[str, list[str]]]:
    """package -> package it imports -> the module-level edges behind it (``a -> b``)."""
    graph: dict[str, dict[str, list[str]]] = {e: {} for row in table for e in row}
    for source, targets in import_graph_with_packages().items():
        a = package_of(source, table)
        for target in targets:
            b = package_of(target, table)
            if a is not None and b is not None and a != b:
                graph[a].setdefault(b, []).append(f"{source} -> {target}")
    return graph


def test_the_page_lists_every_module_once_and_only_packages_that_exist() -> None:
    table = layers()
    entries = [e for row in table for e in row]
    assert len(entries) == len(set(entries)), "a package is listed twice"
    mods = module_files()
    unplaced = [m for m in mods if package_of(m, table) is None]
    assert not unplaced, f"modules in no layer of docs/architecture.md: {unplaced}"
    missing = [e for e in entries if e != "neurenix_core" and not any(_relative(m) == e.removesuffix(".*") for m in mods)]
    assert not missing, f"docs/architecture.md lists packages that do not exist: {missing}"


def test_imports_point_down_or_sideways() -> None:
    table = layers()
    level = _layer_index(table)
    allowed = exceptions()
    upward = [
        f"{a} (layer {level[a] + 1}) imports {b} (layer {level[b] + 1}): {', '.join(edges[:3])}"
        for a, targets in package_graph(table).items()
        for b, edges in targets.items()
        if level[b] > level[a] and (a, b) not in allowed
    ]
    assert not upward, "imports against the layering:\n" + "\n".join(upward)


def test_no_two_packages_import_each_other() -> None:
    graph = {a: set(targets) for a, targets in package_graph(layers()).items()}
    found = cycles(graph)
    assert not found, "packages importing each other:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_a_package_init_counts_for_its_submodules() -> None:
    graph = import_graph_with_packages()
    # graph/quantization/__init__.py loads calibration at module level: so does importing verify.
    assert "neurenix_core.graph.quantization.calibration" in graph["neurenix_core.graph.quantization.verify"]
    # nx.nn loads GraphModule on first access only: nn.module does not import graph.models.
    assert not any(t.startswith("neurenix_core.graph.models") for t in graph["neurenix_core.nn.module"])


def test_every_listed_exception_is_still_needed() -> None:
    graph = package_graph(layers())
    stale = [pair for pair in exceptions() if pair[1] not in graph.get(pair[0], {})]
    assert not stale, f"docs/architecture.md allows imports nobody makes any more: {stale}"


def _all_imports(root: Path) -> dict[str, set[str]]:
    """Every module ``root``'s files import, ``TYPE_CHECKING`` included (mutual imports under
    ``TYPE_CHECKING`` still mean two files that cannot be read apart)."""
    mods = module_files(root)
    out: dict[str, set[str]] = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        out[name] = {t for n in _every_import(name, path.name == "__init__.py", tree) if (t := _resolve(n, mods)) and t != name}
    return out


def _every_import(module: str, is_package: bool, tree: ast.AST) -> Iterator[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            # _imported_names skips TYPE_CHECKING blocks: read them here as plain code.
            yield from _imported_names(module, is_package, ast.Module(body=node.body, type_ignores=[]))
    yield from _imported_names(module, is_package, tree)


def mutual_pairs(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted((a, b) for a, targets in graph.items() for b in targets if a < b and a in graph.get(b, set()))


def test_the_pair_finder_sees_type_checking_imports() -> None:
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import X\n")
    assert "pkg.b.X" in set(_every_import("pkg.a", False, tree))
    assert mutual_pairs({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [("a", "b")]


@pytest.mark.parametrize("root", [PACKAGE, *PLUGIN_PACKAGES], ids=lambda p: p.name)
def test_no_two_files_import_each_other(root: Path) -> None:
    pairs = mutual_pairs(_all_imports(root))
    assert not pairs, "files importing each other:\n" + "\n".join(f"{a} <-> {b}" for a, b in pairs)
