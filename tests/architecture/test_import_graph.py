"""neurenix_core has no import cycles: the graph is built from the source with ``ast`` (nothing is
imported), counting imports inside functions and the lazy submodule table of the package
``__init__`` (``nx.nn``, ``nx.generation`` ...), and leaving out imports under ``TYPE_CHECKING``.

Python imports a package's ``__init__`` before any of its submodules; that implicit step is not an
edge here (every module would otherwise form a cycle with its own package).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "neurenix_core"
#: The lazy tables of the package ``__init__``: attribute name -> module imported on first access.
_LAZY_TABLES = ("_LAZY_MODULES", "_LAZY_ATTRIBUTES")


def module_files(root: Path = PACKAGE) -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def _resolve(name: str, mods: dict[str, Path]) -> str | None:
    """The module a dotted import name lands in (``a.b.func`` -> ``a.b``)."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported_names(module: str, is_package: bool, tree: ast.AST) -> Iterator[str]:
    """Every module name this file imports (relative imports made absolute), TYPE_CHECKING aside."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".") if is_package else module.split(".")[:-1]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            yield from (f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in _LAZY_TABLES for t in node.targets):
            # The package's lazy submodules and attributes are imports too, made on first attribute
            # access (every string constant in the table's value is a module name).
            yield from (v.value for v in ast.walk(node.value) if isinstance(v, ast.Constant) and isinstance(v.value, str) and v.value.startswith("neurenix_core"))
        stack.extend(ast.iter_child_nodes(node))


def import_graph() -> dict[str, set[str]]:
    mods = module_files()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        targets = (_resolve(n, mods) for n in _imported_names(name, path.name == "__init__.py", tree) if n.startswith("neurenix_core"))
        graph[name] = {t for t in targets if t and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    for root, edges in graph.items():
        if root in index:
            continue
        work = [(root, iter(sorted(edges)))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[v] = min(low[v], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_graph_sees_function_level_and_lazy_imports() -> None:
    graph = import_graph()
    # Guards against a graph builder that misses the kinds of imports the rule is about.
    assert "neurenix_core.nn" in graph["neurenix_core"]  # the lazy table of __init__
    assert "neurenix_core.autograd.grad" in graph["neurenix_core"]  # the lazy attribute table (nx.grad)
    assert "neurenix_core.graph.compile.compiler" in graph["neurenix_core"]  # an import inside __getattr__
    assert len(graph) > 60


def test_the_cycle_finder_finds_a_planted_cycle() -> None:
    planted = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(planted) == [["a", "b", "c"]]


def test_neurenix_core_has_no_import_cycles() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles in neurenix_core:\n" + "\n".join(" <-> ".join(c) for c in found)
