"""The story of a diff: its node changes grouped into named kinds of change, largest first.

A diff of a model and its optimized form is hundreds of node changes, almost all consequences of
a few rewrites: ``BatchNormalization`` folded into 53 convolutions shows as 53 removed
BatchNormalizations, 53 changed Convs and 200 removed Constants that fed them. ``summarize``
names the rewrites and puts every ``NodeDiff`` into exactly one ``ChangeGroup`` (so the counts
add up and nothing is lost). Each graph's changes are classified in this order, first rule wins:

1. dead code: removed nodes that did not reach any output of the old graph;
2. rewrites: ``graphtool.fusion_trace`` maps each node of the new graph to the old
   ops it stands for (``Conv+BatchNormalization → Conv``); the old ops, the constants folded
   into it and the new node(s) form one occurrence. A traced node that stands for the same op
   but whose constant-only inputs were computed away is a folded subgraph (``Shape→Gather→Concat
   folded``), or, when those were Constant ops alone, ``Constant → initializer``;
3. removed Constant ops whose readers all still exist (now reading an initializer), and removed
   ops whose readers now read a constant at the same input (a subgraph folded to an initializer);
4. consequences: a removed (added) node all of whose readers belong to one group joins it;
5. weights: changed nodes whose only change is the values of constant inputs;
6. the rest by op type (``Identity removed``), readers first so that what only fed them joins
   them; last, a changed node whose only change is reading a value from a removed/added node of
   one group joins that group (the Identity's readers), else it is grouped by what changed.

A subgraph that came or went with its owner (an If folded away, a Loop added) joins its owner's
group. Graph-level changes (opset, inputs/outputs, metadata, unused initializers) become groups
with no nodes; renamed graph inputs/outputs are their own group. Every step does a bounded amount
of work per node or edge (the trace's walks are capped), so the cost is linear in graph size.

The trace needs value names kept across the two models, which optimizers do; for unrelated or
wholly renamed models it finds little, and the changes fall through to the by-op groups.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from graphtool.diff.run import ADDED, CHANGED, REMOVED, DiffResult, GraphDiff, NodeDiff
from graphtool.fusion_trace import Fusion, trace_graphs
from graphtool.ir.graph import Graph, Node

FUSION, FOLDED, CONST_INIT, DEAD = "fusion", "folded", "constant-to-initializer", "dead-code"
WEIGHTS, RENAMED, GRAPH = "weights", "renamed", "graph"
_REWRITES = ("fused", "replaced", "expanded")
CONSTANT_OPS = ("Constant", "ConstantOfShape")
_VALUE_DETAILS = {"initializer", "constant"}  # a constant input's values changed
_WIRING_DETAILS = {"input"} | _VALUE_DETAILS  # what a folded/removed neighbour changes in its readers


@dataclass
class ChangeGroup:
    """One named kind of change and every node change it accounts for.

    ``count`` counts occurrences (53 rewrites, 300 constants, 2 opset changes); ``nodes`` holds
    every ``NodeDiff`` the group explains, so a viewer can highlight them. ``occurrences`` splits
    ``nodes`` into one list per rewrite or folded region (the examples a report shows; nodes that
    joined as consequences are in ``nodes`` only); ``changes`` holds graph-level change dicts;
    ``refs`` locates each node in ``DiffResult.as_dict()``: (graph index, node index).
    """

    kind: str
    title: str
    count: int = 0
    nodes: list[NodeDiff] = field(default_factory=list)
    occurrences: list[list[NodeDiff]] = field(default_factory=list)
    changes: list[dict[str, Any]] = field(default_factory=list)
    refs: list[tuple[int, int]] = field(default_factory=list)
    max_abs_diff: float | None = None

    def tally(self) -> dict[str, int]:
        """How many of the group's nodes were removed, added, changed."""
        out = {REMOVED: 0, ADDED: 0, CHANGED: 0}
        for nd in self.nodes:
            out[nd.change] += 1
        return out

    def as_dict(self) -> dict[str, Any]:
        """For ``--json``: nodes as [graph index, node index] into the same document's
        ``graphs[].nodes[]``, which already hold every change in full."""
        out: dict[str, Any] = {
            "kind": self.kind,
            "title": self.title,
            "count": self.count,
            "node_counts": self.tally(),
            "nodes": [list(r) for r in self.refs],  # graphs[g].nodes[i] of the same JSON document
        }
        if self.changes:
            out["changes"] = self.changes
        if self.max_abs_diff is not None:
            out["max_abs_diff"] = self.max_abs_diff if math.isfinite(self.max_abs_diff) else str(self.max_abs_diff)
        return out


def summarize(result: DiffResult) -> list[ChangeGroup]:
    """Every change of ``result`` in exactly one group: node groups largest first (by nodes,
    then count), then the graph-level groups."""
    builder = _Builder(result)
    for index, gd in enumerate(result.graphs):
        builder.graph(index, gd)
    builder.graph_level()
    groups = list(builder.groups.values())
    for group in groups:
        if group.kind != GRAPH and group.kind != RENAMED:
            group.count = len(group.occurrences)
        group.refs = [builder.where[id(nd)] for nd in group.nodes]
    # node groups by how much of the diff they explain; graph-level changes (no nodes) after them
    return sorted(groups, key=lambda g: (not g.nodes, -len(g.nodes), -g.count, g.title))


def chain(ops: list[str]) -> str:
    """``Shape→Gather→Concat``: the distinct op types of a region in order of first appearance."""
    return "→".join(dict.fromkeys(ops)) or "?"


class _Builder:
    """Assigns the NodeDiffs of one DiffResult to groups, graph by graph."""

    def __init__(self, result: DiffResult):
        self.result = result
        self.groups: dict[tuple[str, str], ChangeGroup] = {}
        self.owner: dict[int, tuple[str, str]] = {}  # id(NodeDiff) -> group key
        self.where: dict[int, tuple[int, int]] = {}  # id(NodeDiff) -> (graph index, node index)
        self.nodes: dict[tuple[int, int], NodeDiff] = {}  # (id(Graph), node id) -> its NodeDiff
        self._shared: set[int] = set()  # old-graph nodes no folded region may take (see _region)

    # -- bookkeeping

    def group(self, kind: str, title: str) -> ChangeGroup:
        key = (kind, title)
        if key not in self.groups:
            self.groups[key] = ChangeGroup(kind, title)
        return self.groups[key]

    def add(self, kind: str, title: str, nodes: list[NodeDiff], occurrence: bool = True) -> None:
        """Put the not yet assigned ``nodes`` into a group; as one occurrence unless ``occurrence``
        is False (consequences of an occurrence already there)."""
        fresh = list({id(nd): nd for nd in nodes if id(nd) not in self.owner}.values())
        if not fresh:
            return
        group = self.group(kind, title)
        for nd in fresh:
            self.owner[id(nd)] = (kind, title)
        group.nodes += fresh
        if occurrence:
            group.occurrences.append(fresh)

    def free(self, nd: NodeDiff | None) -> bool:
        return nd is not None and id(nd) not in self.owner

    # -- one graph

    def graph(self, index: int, gd: GraphDiff) -> None:
        by_a: dict[int, NodeDiff] = {}
        by_b: dict[int, NodeDiff] = {}
        for k, nd in enumerate(gd.nodes):
            self.where[id(nd)] = (index, k)
            if nd.a is not None:
                by_a[nd.a.id] = nd
            if nd.b is not None:
                by_b[nd.b.id] = nd
            for node in (nd.a, nd.b):
                if node is not None:
                    self.nodes[(id(node.graph), node.id)] = nd
        ga, gb = gd.a, gd.b
        if ga is None or gb is None:
            self._whole(gd)
            return
        order_a, order_b = ga.topological_order(), gb.topological_order()
        self._shared = set()
        self._dead_code(ga, order_a, by_a)
        self._rewrites(ga, gb, by_a, by_b)
        self._constants(ga, gb, gd.matches, order_a, by_a)
        self._by_readers(ga, order_a, by_a, REMOVED, final=False)
        self._by_readers(gb, order_b, by_b, ADDED, final=False)
        for nd in gd.nodes:
            if self.free(nd) and _values_only(nd):
                self.add(WEIGHTS, "weights changed", [nd])
                group = self.groups[(WEIGHTS, "weights changed")]
                for d in nd.details:
                    delta = d.get("max_abs_diff")
                    if isinstance(delta, (int, float)):
                        group.max_abs_diff = max(group.max_abs_diff or 0.0, float(delta))
        self._by_readers(ga, order_a, by_a, REMOVED, final=True)
        self._by_readers(gb, order_b, by_b, ADDED, final=True)
        for nd in gd.nodes:
            if self.free(nd):
                self._changed(ga, gb, nd, by_a, by_b)

    def _whole(self, gd: GraphDiff) -> None:
        """A subgraph that came or went with its owner (an If removed, a Loop added) is part of
        the owner's story: its nodes join the owner's group. A function's body, or a subgraph
        whose owner stayed, is grouped by op type."""
        graph = gd.a if gd.a is not None else gd.b
        owner = self.nodes.get((id(graph.parent), graph.owner)) if graph is not None else None
        key = self.owner.get(id(owner)) if owner is not None else None
        for nd in gd.nodes:
            if key is not None:
                self.add(*key, [nd], occurrence=False)
            else:
                self.add(nd.change, f"{_op(nd.node)} {nd.change}", [nd])

    def _dead_code(self, ga: Graph, order_a: list[Node], by_a: dict[int, NodeDiff]) -> None:
        """Removed nodes that reached no output of the old graph (captures by subgraphs count)."""
        live: set[int] = set()
        outputs = set(ga.outputs)
        for node in reversed(order_a):
            if any(v in outputs or any(c.id in live for c, _ in ga.uses(v)) for v in node.outputs if v):
                live.add(node.id)
        dead = [nd for i, nd in by_a.items() if i not in live and nd.change == REMOVED]
        for nd in dead:
            self.add(DEAD, "dead code removed", [nd])

    def _rewrites(self, ga: Graph, gb: Graph, by_a: dict[int, NodeDiff], by_b: dict[int, NodeDiff]) -> None:
        """Name what each new node stands for: the old ops it replaced, the constants it folded."""
        trace = trace_graphs(ga, gb)
        for f in trace.fusions:
            if f.kind in _REWRITES:
                nodes = [by_a[i] for i in (*f.absorbed, *f.folded) if i in by_a]
                nodes += [by_b[i] for i in f.new_ids if i in by_b]
                if not _plain_edit(f, nodes, ga, gb):
                    self.add(FUSION, f.pattern, nodes)
            elif f.kind == "unchanged" and f.folded:
                folded = [by_a[i] for i in f.folded if i in by_a and by_a[i].change == REMOVED]
                if not folded:
                    continue
                ops = [ga.node(i).op_type for i in f.folded if i in by_a]
                computing = [op for op in ops if op != "Constant"]
                if not computing:
                    for nd in folded:
                        self.add(CONST_INIT, "Constant → initializer", [nd])
                    continue
                readers = [by_b[i] for i in f.new_ids if i in by_b and _only_wiring(by_b[i])]
                self.add(FOLDED, f"{chain(computing)} folded", folded + readers)

    def _constants(self, ga: Graph, gb: Graph, matches: dict[int, int], order_a: list[Node],
                   by_a: dict[int, NodeDiff]) -> None:
        """Removed ops whose readers still exist and now read a constant in their place."""
        for node in order_a:
            nd = by_a.get(node.id)
            if not self.free(nd) or nd.change != REMOVED:  # type: ignore[union-attr]
                continue
            uses = [(c, slot) for v in node.outputs if v for c, slot in ga.uses(v)]
            if not uses or any(c.id not in matches or slot < 0 for c, slot in uses):
                continue
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                self.add(CONST_INIT, "Constant → initializer", [nd])  # type: ignore[list-item]
                continue
            reads_const = all(_is_const(gb, _slot(gb.node(matches[c.id]).inputs, slot)) for c, slot in uses)
            if reads_const:
                region = self._region(ga, node, by_a)
                ops = [n.node.op_type for n in region]  # type: ignore[union-attr]
                computing = [op for op in ops if op != "Constant"]
                self.add(FOLDED, f"{chain(computing)} folded", region)

    def _region(self, ga: Graph, root: Node, by_a: dict[int, NodeDiff]) -> list[NodeDiff]:
        """``root`` and the removed, unassigned nodes that only fed it (in old-graph order).
        ``_shared`` remembers the nodes refused (read elsewhere too), so a value with many
        readers is looked at once, not once per reader."""
        region: dict[int, NodeDiff] = {root.id: by_a[root.id]}
        stack = [root]
        while stack:
            node = stack.pop()
            for v in node.inputs:
                p = ga.producer(v) if v else None
                if p is None or p.id in region or not self.free(by_a.get(p.id)):
                    continue
                if by_a[p.id].change != REMOVED or p.id in self._shared:
                    continue
                if all(c.id in region for u in p.outputs if u for c, _ in ga.uses(u)) and not any(
                        ga.is_output(u) for u in p.outputs):
                    region[p.id] = by_a[p.id]
                    stack.append(p)
                else:  # it feeds this region and something else: no later region can take it either
                    self._shared.add(p.id)
        return sorted(region.values(), key=lambda nd: nd.a.order)  # type: ignore[union-attr]

    def _by_readers(self, graph: Graph, order: list[Node], index: dict[int, NodeDiff], change: str,
                    final: bool) -> None:
        """A removed (added) node whose readers are all in one group joins it: the constants and
        shape computations that fed a fused region, the helpers a fused op reads. With ``final``,
        the others start a group of their op type (``Identity removed``) that what fed them can
        join: nodes are visited readers first."""
        for node in reversed(order):
            nd = index.get(node.id)
            if not self.free(nd) or nd.change != change:  # type: ignore[union-attr]
                continue
            keys: set[tuple[str, str] | None] = set()
            for v in node.outputs:
                if not v:
                    continue
                if graph.is_output(v):
                    keys.add(None)
                for c, _ in graph.uses(v):
                    other = index.get(c.id)
                    keys.add(self.owner.get(id(other)) if other is not None else None)
            key = keys.pop() if len(keys) == 1 else None
            # an op-type group takes only the constants that fed it, not whole upstream chains
            if key is not None and (key[0] not in (REMOVED, ADDED) or node.op_type in CONSTANT_OPS):
                self.add(*key, [nd], occurrence=False)  # type: ignore[list-item]
            elif final:
                self.add(change, f"{_op(node)} {change}", [nd])  # type: ignore[list-item]

    def _changed(self, ga: Graph, gb: Graph, nd: NodeDiff, by_a: dict[int, NodeDiff],
                 by_b: dict[int, NodeDiff]) -> None:
        """A changed node that only reads from removed/added nodes of one group joins it (the
        readers of a removed Identity); any other change is grouped by op and what changed."""
        if _only_wiring(nd):
            strong: dict[tuple[str, str], None] = {}  # groups of what it reads instead, by slot
            weak: dict[tuple[str, str], None] = {}  # the same tensor, from a rewritten producer
            for d in nd.details:
                slot = d.get("slot", -1)
                same = d["what"] == "input" and d["old"] == d["new"] and not _is_const(gb, d["new"] or "")
                pa = ga.producer(_slot(nd.a.inputs, slot)) if nd.a is not None else None
                pb = gb.producer(_slot(nd.b.inputs, slot)) if nd.b is not None else None
                for p, index in ((pa, by_a), (pb, by_b)):
                    other = index.get(p.id) if p is not None else None
                    if other is not None and id(other) in self.owner:
                        (weak if same else strong)[self.owner[id(other)]] = None
            keys = list(strong or weak)
            if len(keys) > 1 and {k for k, _ in keys} <= {FOLDED, CONST_INIT}:
                keys = keys[:1]  # a reader of several folded inputs: the first one's group
            if len(keys) == 1:
                self.add(*keys[0], [nd], occurrence=False)
                return
        what = sorted({d["name"] if d["what"] == "attribute" else _DETAIL_LABEL.get(d["what"], d["what"])
                       for d in nd.details})
        self.add(CHANGED, f"{_op(nd.node)}: {', '.join(what)} changed", [nd])

    # -- graph level

    def graph_level(self) -> None:
        scoped = [("", d) for d in self.result.model_changes]
        scoped += [(gd.scope, d) for gd in self.result.graphs for d in gd.graph_changes]
        for scope, d in scoped:
            what = d["what"]
            if what.endswith(" renamed"):
                kind, title = RENAMED, "inputs/outputs renamed"
            else:
                kind, title = GRAPH, _GRAPH_TITLES.get(what.split(" ")[0], "model metadata")
                if "initializer" in what:
                    title = "unused initializers"
            entry = dict(d, scope=scope) if scope and scope != "main" else dict(d)
            group = self.group(kind, title)
            group.changes.append(entry)
            group.count += 1


_DETAIL_LABEL = {"op_type": "op type", "input": "inputs", "initializer": "weights", "constant": "weights"}
_GRAPH_TITLES = {
    "ir_version": "opset/IR version", "opset": "opset/IR version",
    "input": "inputs/outputs", "output": "inputs/outputs",
    "function": "functions",
}


def _op(node: Node) -> str:
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"


def _values_only(nd: NodeDiff) -> bool:
    """Only constant values changed: a constant input's, or a Constant op's own value."""
    constant_op = nd.node.op_type in CONSTANT_OPS and nd.node.domain in ("", "ai.onnx")
    return nd.change == CHANGED and bool(nd.details) and all(
        d["what"] in _VALUE_DETAILS or (constant_op and d["what"] == "attribute" and d["name"].startswith("value"))
        for d in nd.details)


def _slot(values: list[str], slot: int) -> str:
    return values[slot] if 0 <= slot < len(values) else ""


def _only_wiring(nd: NodeDiff) -> bool:
    return nd.change == CHANGED and bool(nd.details) and all(d["what"] in _WIRING_DETAILS for d in nd.details)


def _plain_edit(f: Fusion, nodes: list[NodeDiff], ga: Graph, gb: Graph) -> bool:
    """A "rewrite" that only removed or inserted ops: ``Identity+Relu → Relu`` is an Identity
    removed, ``Conv → Sigmoid+Conv`` a Sigmoid added. Told apart from ``Conv+BatchNormalization →
    Conv`` by the kept nodes: rewired only (no attribute, op type or constant input changed)."""
    for nd in nodes:
        if nd.change == CHANGED and not all(_rewired(d, ga, gb) for d in nd.details):
            return False
    old = Counter(_qualified_op(ga.node(i)) for i in f.absorbed)
    new = Counter(f"{d or 'ai.onnx'}::{o}" for d, o in f.new_ops)
    return old <= new or new <= old


def _rewired(detail: dict[str, Any], ga: Graph, gb: Graph) -> bool:
    """An input that reads another computed value (not a new or different constant)."""
    old, new = detail.get("old"), detail.get("new")
    return (detail["what"] == "input" and bool(old) and bool(new)
            and not _is_const(ga, old) and not _is_const(gb, new))


def _qualified_op(node: Node) -> str:
    return f"{node.domain or 'ai.onnx'}::{node.op_type}"


def _is_const(graph: Graph, value: str) -> bool:
    """Provably constant without reading it: an initializer (not overridable) or a Constant's output."""
    if not value:
        return False
    if value in graph.initializers:
        return not (graph.overridable_initializers and graph.is_input(value))
    producer = graph.producer(value)
    return producer is not None and producer.op_type == "Constant" and producer.domain in ("", "ai.onnx")
