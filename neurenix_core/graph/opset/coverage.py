"""What a compiling plugin's declarations mean for the opset: lowered natively, decomposed, or on the CPU.

A plugin declares ``Capabilities.graph_ops`` (the ops its ``neurenix_compile`` lowers) and
``graph_dtypes``. Against the opset that sorts every op into one of three groups: ``native``
(declared), ``decomposed`` (a composite the plugin does not declare: the core rewrites it into
primitives, which run where they are declared) and ``on_cpu`` (a primitive the plugin does not
declare: partitioned placement runs it on ``cpu:0``). Plugin docs embed :func:`markdown` between
markers so the list is generated from the declarations, not written by hand
(``scripts/gen_plugin_ops_doc.py``; ``tests/test_docs_plugin_ops.py`` keeps them current).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import final

from neurenix_core.graph import opset

__all__ = ["Coverage", "coverage", "markdown"]


@final
@dataclass(frozen=True, slots=True)
class Coverage:
    """Every opset op in exactly one group, except an undeclared ``constant`` (fed as an input)."""

    native: tuple[str, ...]
    decomposed: tuple[str, ...]
    on_cpu: tuple[str, ...]
    dtypes: tuple[str, ...]


def coverage(graph_ops: Collection[str] | None, graph_dtypes: Collection[str]) -> Coverage:
    """Sort the opset by a plugin's declarations (None: the 17 first-release ops)."""
    declared = set(opset.LEGACY_OPS if graph_ops is None else graph_ops)
    unknown = declared - set(opset.OPSET)
    if unknown:
        raise ValueError(f"declared ops not in the opset: {sorted(unknown)}")
    native = sorted(declared)
    decomposed = sorted(n for n, d in opset.OPSET.items() if n not in declared and d.composite)
    # ``constant`` is data, not work: undeclared, its value is fed to the device as an input.
    on_cpu = sorted(n for n, d in opset.OPSET.items() if n not in declared and not d.composite and n != "constant")
    return Coverage(tuple(native), tuple(decomposed), tuple(on_cpu), tuple(sorted(graph_dtypes)))


def _by_category(names: Collection[str]) -> str:
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(opset.OPSET[name].category, []).append(name)
    if not groups:
        return "none\n"
    return "".join(f"- {cat}: {', '.join(f'`{n}`' for n in sorted(ops))}\n" for cat, ops in sorted(groups.items()))


def markdown(plugin: str, graph_ops: Collection[str] | None, graph_dtypes: Collection[str]) -> str:
    """The generated section of a plugin's doc page."""
    c = coverage(graph_ops, graph_dtypes)
    total = len(opset.OPSET)
    return (
        f"Generated from the `{plugin}` manifest (`capabilities.graph_ops`, `graph_dtypes`): "
        f"{len(c.native)} of the {total} opset ops are lowered natively, on values of dtype "
        f"{', '.join(f'`{d}`' for d in c.dtypes)}.\n\n"
        f"**Lowered natively** ({len(c.native)}):\n\n{_by_category(c.native)}\n"
        f"**Decomposed by the core** into primitives ({len(c.decomposed)}):\n\n{_by_category(c.decomposed)}\n"
        f"**On the CPU instead** (partitioned placement runs these on `cpu:0` and reports them) ({len(c.on_cpu)}):\n\n"
        f"{_by_category(c.on_cpu)}"
        + ("" if "constant" in c.native else "\n`constant` is not declared: constant values are fed to the device as inputs.\n")
    )
