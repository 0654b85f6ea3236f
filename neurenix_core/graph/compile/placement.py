"""Partitioned placement: which nodes of a graph run on the requested device, which on the CPU.

``place(graph, declared, dtypes, device, plugin)`` first decomposes every composite the device does
not declare, then asks of each node "can the device run it?" (its op is declared and every value
it touches has a declared dtype). Consecutive nodes with the same answer form a :class:`Segment`;
device segments are compiled natively by the plugin, CPU segments run on the CPU backend, and the
values crossing between them are transferred. ``constant`` nodes are data: they go with the
device only when it declares ``constant``, otherwise their values are fed to the device segment
as inputs, and they are not reported as off-device work.

The :class:`Placement` report counts nodes and estimated FLOPs per device and lists every
off-device node with its op and the reason; :meth:`Placement.line` is the one line users see.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import final

from neurenix_core.graph import opset
from neurenix_core.graph.ir import Graph, Node, TensorSpec
from neurenix_core.graph.ir.decompose import legalize, makes_new_values
from neurenix_core.graph.ir.shapes import ValueSpec, infer_values
from neurenix_core.plugins.opnames import PORTABLE_ATTRS

__all__ = ["OffDevice", "Placement", "Segment", "count_nodes", "moved_to_cpu", "node_flops", "place"]

CPU = "cpu:0"


@final
@dataclass(frozen=True, slots=True)
class OffDevice:
    """A node that runs on the CPU although another device was requested."""

    node: str
    op: str
    reason: str


@final
@dataclass(frozen=True, slots=True)
class Segment:
    """Consecutive nodes on one device, with the values entering and leaving them."""

    on_device: bool
    nodes: tuple[Node, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    def graph(self, specs: Mapping[str, ValueSpec]) -> Graph:
        """The segment as a Graph a plugin can compile (static shapes and dtypes on its inputs)."""
        return Graph(tuple(TensorSpec(n, specs[n].shape, specs[n].dtype) for n in self.inputs), self.nodes, self.outputs)


@final
@dataclass(frozen=True, slots=True)
class Placement:
    """Where every node of a (legalized) graph runs. ``flops`` are estimates from the opset."""

    device: str
    graph: Graph
    segments: tuple[Segment, ...]
    nodes: Mapping[str, int]
    flops: Mapping[str, int]
    off_device: tuple[OffDevice, ...] = field(default=())
    #: A quantized compile's agreement with the core's integer reference (graph.verify), if run.
    verification: str = ""
    #: Which runtime runs the cpu:0 graph or segments (graph.host_select), and why.
    host_runtime: str = ""
    #: Why the device's nodes do not run as one compiled model, when they do not (its plugin
    #: refused the model: they run eagerly, op by op); part of :meth:`line`.
    execution: str = ""
    #: What runs the device when it is emulated ("emulated: OpenVINO on the host CPU"), named
    #: after the device in :meth:`line`; "" for a real device.
    emulation: str = ""

    @property
    def partitioned(self) -> bool:
        return bool(self.off_device)

    def device_segments(self) -> list[Segment]:
        return [s for s in self.segments if s.on_device]

    def line(self) -> str:
        """One line: "npu:0 runs 41/43 nodes (99.8% of FLOPs); 2 nodes on cpu:0: gather (...)".

        Nodes are the graph's operations; its ``constant`` nodes (weights, data) are not counted
        here or anywhere a count of nodes is printed (:func:`count_nodes`), only named apart."""
        total = sum(self.nodes.values())
        on = self.nodes.get(self.device, 0)
        flops_total = sum(self.flops.values()) or 1
        share = 100.0 * self.flops.get(self.device, 0) / flops_total
        device = f"{self.device} ({self.emulation})" if self.emulation else self.device
        text = f"{device} runs {on}/{total} nodes ({share:.1f}% of FLOPs)"
        if self.execution:
            text = f"{text} {self.execution}"
        if not self.off_device:
            return text
        groups = Counter((o.op, o.reason) for o in self.off_device)
        detail = ", ".join(f"{op}{f' x{n}' if n > 1 else ''} ({reason})" for (op, reason), n in groups.items())
        return f"{text}; {len(self.off_device)} node{'s' if len(self.off_device) > 1 else ''} on {CPU}: {detail}"

    def __str__(self) -> str:
        lines = [self.line()]
        for dev in self.nodes:
            lines.append(f"  {dev}: {_nodes(self.nodes[dev])}, {self.flops.get(dev, 0):,} FLOPs (estimated)")
        for seg in self.segments:
            where = self.device if seg.on_device else CPU
            span = seg.nodes[0].name if len(seg.nodes) == 1 else f"{seg.nodes[0].name} .. {seg.nodes[-1].name}"
            lines.append(f"  segment on {where}: {count_nodes(seg.nodes)}, {span}")
        for o in self.off_device:
            lines.append(f"  off {self.device}: {o.node} ({o.op}): {o.reason}")
        if self.host_runtime:
            lines.append(f"  {self.host_runtime}")
        if self.verification:
            lines.append(f"  {self.verification}")
        return "\n".join(lines)


def _nodes(n: int) -> str:
    return f"{n} node{'' if n == 1 else 's'}"


def count_nodes(nodes: Sequence[Node]) -> str:
    """"36 nodes and 5 constants": the operations, which every node count of a placement, a segment
    and a summary counts, then the ``constant`` nodes (data, not work) apart, so that one graph's
    counts agree wherever they are printed."""
    constants = sum(n.op == "constant" for n in nodes)
    work = _nodes(len(nodes) - constants)
    return work if not constants else f"{work} and {constants} constant{'' if constants == 1 else 's'}"


def node_flops(node: Node, specs: Mapping[str, ValueSpec]) -> int:
    d = opset.OPSET[node.op]
    if d.flops is None:
        return 0
    attrs = opset.attrs_of(node.op, node.attrs)
    return int(d.flops(attrs, [specs[i].shape for i in node.inputs], specs[node.output].shape, node.params))


def _newer_attribute(node: Node) -> str | None:
    """``name=value`` of an attribute the portable op gained after the portable opset, set to
    something other than its default (no plugin lowers it), else None."""
    known = PORTABLE_ATTRS.get(node.op)
    if known is None:
        return None  # an op beyond the portable opset: a plugin that declares it by name lowers all of it
    defaults = opset.OPSET[node.op].attrs
    for key, value in node.attrs.items():
        if key not in known and key in defaults and value != defaults[key]:
            return f"{key}={value!r}"
    return None


def _reason(node: Node, specs: Mapping[str, ValueSpec], declared: Collection[str], dtypes: Collection[str], plugin: str,
            missing: str | None = None, host: bool = False) -> str | None:
    """Why the device cannot run ``node`` (None: it can); ``missing`` says why for an op outside
    ``declared`` (default: the plugin does not declare it). ``host``: the device is cpu:0, which
    runs the whole opset."""
    if node.op not in declared:
        return missing or f"op not declared by plugin {plugin}"
    newer = None if host else _newer_attribute(node)
    if newer is not None:
        return f"attribute {newer} is newer than plugin {plugin}'s lowering of {node.op}"
    for value in (*node.inputs, node.output):
        dtype = specs[value].dtype
        if dtype not in dtypes:
            return f"{dtype} values not supported by plugin {plugin}"
    return None


def _segments(nodes: list[Node], on: list[bool], graph: Graph, host_consts: set[str]) -> tuple[Segment, ...]:
    runs: list[tuple[bool, list[Node]]] = []
    for node, flag in zip(nodes, on):
        if runs and runs[-1][0] == flag:
            runs[-1][1].append(node)
        else:
            runs.append((flag, [node]))
    consumers: dict[str, set[int]] = {}
    for k, (_, members) in enumerate(runs):
        for n in members:
            for i in n.inputs:
                consumers.setdefault(i, set()).add(k)
    out = []
    for k, (flag, members) in enumerate(runs):
        made = {n.output for n in members}
        inputs = tuple(dict.fromkeys(i for n in members for i in n.inputs if i not in made))
        leaving = tuple(n.output for n in members if n.output in graph.outputs or consumers.get(n.output, set()) - {k})
        out.append(Segment(flag, tuple(members), inputs, leaving))
    return tuple(out)


def place(graph: Graph, declared: Collection[str], dtypes: Collection[str], device: str, plugin: str, *,
          decompose: bool = True, missing: str | None = None, refused: Mapping[str, str] | None = None) -> Placement:
    """Decompose what ``declared`` lacks, assign every node, cut segments and count the work.

    ``decompose=False`` keeps composites whole (an undeclared one runs on the CPU) unless one
    becomes a single primitive (``global_avg_pool`` -> ``reduce_mean``): a quantized model's plan
    names the values of the graph it was calibrated on, and a decomposition creating values would
    leave them without parameters. ``missing`` is the reason reported for an op
    outside ``declared`` (default "op not declared by plugin ..."). ``refused`` (node name ->
    reason) sends nodes the plugin's lowering refused to the CPU whatever they declare."""
    legal = legalize(graph, keep=lambda n: n.op in declared or (not decompose and makes_new_values(n)))
    specs = infer_values(legal)
    consts_on_device = "constant" in declared
    nodes = list(legal.nodes)
    on: list[bool] = []
    off: list[OffDevice] = []
    counts: Counter[str] = Counter()
    flops: Counter[str] = Counter()
    host_consts: set[str] = set()
    consumers_on: dict[str, list[bool]] = {}
    refused = refused or {}
    reasons = {n.name: refused.get(n.name) or _reason(n, specs, declared, dtypes, plugin, missing, device == CPU)
               for n in nodes if n.op != "constant"}
    for n in nodes:
        for i in n.inputs:
            consumers_on.setdefault(i, []).append(n.op != "constant" and reasons[n.name] is None)
    for n in nodes:
        if n.op == "constant":
            # Data, not work: it sits with its consumers (on the device only if declared there).
            runs_here = consts_on_device and any(consumers_on.get(n.output, [False]))
            if not runs_here:
                host_consts.add(n.output)
            on.append(runs_here)
            continue
        reason = reasons[n.name]
        on.append(reason is None)
        where = device if reason is None else CPU
        counts[where] += 1
        flops[where] += node_flops(n, specs)
        if reason is not None:
            off.append(OffDevice(n.name, n.op, reason))
    # A host constant read only by device nodes should not split a device run: move it first.
    order = [i for i, n in enumerate(nodes) if n.op == "constant" and not on[i]] + [
        i for i, n in enumerate(nodes) if not (n.op == "constant" and not on[i])]
    nodes, on = [nodes[i] for i in order], [on[i] for i in order]
    if device == CPU:
        on = [True] * len(nodes)
    return Placement(device, legal, _segments(nodes, on, legal, host_consts), dict(counts), dict(flops), tuple(off))


def moved_to_cpu(placement: Placement, segment: Segment, reason: str) -> Placement:
    """The report after the plugin refused a device segment (it then runs on the CPU)."""
    from dataclasses import replace

    specs = infer_values(placement.graph)
    work = [n for n in segment.nodes if n.op != "constant"]
    nodes, flops = Counter(placement.nodes), Counter(placement.flops)
    for n in work:
        nodes[placement.device] -= 1
        nodes[CPU] += 1
        f = node_flops(n, specs)
        flops[placement.device] -= f
        flops[CPU] += f
    segments = tuple(replace(s, on_device=False) if s is segment else s for s in placement.segments)
    off = placement.off_device + tuple(OffDevice(n.name, n.op, reason) for n in work)
    return replace(placement, segments=segments, nodes=dict(nodes), flops=dict(flops), off_device=off)
