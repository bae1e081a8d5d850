"""Diff two models: match their nodes, then say what was added, removed or changed.

Matching runs in phases, each a handful of dict lookups per node (no all-pairs comparison):

1. Structure. Every node gets a forward hash (op type, domain, attributes, and the hashes of
   what feeds each input slot, computed in topological order from the graph inputs and from
   initializers, which hash by dtype + shape + content) and a backward hash (the same over its
   consumers, from the graph outputs back). Equal forward hashes mean the same computation from
   the same sources; equal backward hashes mean the same use. Hashes unique on both sides match;
   so do nodes equal in both hashes (paired in topological order). Names play no part, so a
   renamed, re-numbered or reordered copy matches completely.
2. Names: node names unique on both sides; then nodes that produce a value of the same name with
   the same op type (optimizers keep value names).
3. Neighbours: from every matched pair, walk to producers and consumers of the same op type at
   the same slot (linear propagation); leftovers find a node of their op type near the same
   matched ancestors (or descendants), and last a node reading exactly the same inputs (which is
   how an op-type change shows).

Structure goes before names on purpose: exporters number their nodes ("Conv_12"), so one
inserted op renumbers everything after it, and name-first matching would pair the wrong nodes.

Subgraphs (If/Loop/Scan bodies) are diffed recursively, paired by owner node + attribute name;
model-local functions are paired by (domain, name, overload). Renaming internal values or nodes
is never a change; renaming a main-graph input or output is (callers feed inputs by name).

The modules, by job: graphtool.diff.values (content keys, one line per change), graphtool.diff.match
(the phases above), this module (the results and the walk over graphs, subgraphs and functions),
graphtool.diff.summary (the changes grouped and named), graphtool.diff.text (the report).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable

from graphtool.diff.changes import graph_changes, node_changes
from graphtool.diff.match import Matcher
from graphtool.diff.values import (
    array_key,
    change_text,
    describe,
    detail_text,
    format_value,
    tensor_key,
    type_string,
    value_change,
)
from graphtool.ir.from_onnx import gc_paused_if_big
from graphtool.ir.graph import Graph, Node
from graphtool.ir.model import Model

ADDED, REMOVED, CHANGED = "added", "removed", "changed"
__all__ = [  # the value helpers are re-exported: graphtool.diff.run is where callers look for them
    "ADDED", "REMOVED", "CHANGED", "NodeDiff", "GraphDiff", "DiffResult", "diff", "diff_graphs",
    "array_key", "change_text", "describe", "detail_text", "format_value", "tensor_key", "type_string", "value_change",
]


# ---------------------------------------------------------------------------------- results


@dataclass
class NodeDiff:
    """One added, removed or changed node; ``a``/``b`` are the node in each model (or None)."""

    change: str
    scope: str
    a: Node | None
    b: Node | None
    details: list[dict[str, Any]] = field(default_factory=list)

    @property
    def node(self) -> Node:
        return self.b if self.b is not None else self.a  # type: ignore[return-value]

    def as_dict(self) -> dict[str, Any]:
        node = self.node
        return {
            "change": self.change,
            "scope": self.scope,
            "op_type": node.op_type,
            "domain": node.domain,
            "name": node.name,
            "outputs": node.outputs,
            "old": describe(self.a) if self.a is not None and self.change == CHANGED else None,
            "details": self.details,
        }


@dataclass
class GraphDiff:
    """The diff of one pair of graphs (either side None when the whole graph came or went)."""

    scope: str
    a: Graph | None
    b: Graph | None
    matches: dict[int, int] = field(default_factory=dict)  # a node id -> b node id
    nodes: list[NodeDiff] = field(default_factory=list)
    unchanged: int = 0
    graph_changes: list[dict[str, Any]] = field(default_factory=list)
    matched_by: Counter = field(default_factory=Counter)
    # values read by the same name on both sides whose maker changed (a new producer, a constant):
    # said once here, not as a change of each reader (``changes.node_changes``)
    value_changes: list[dict[str, Any]] = field(default_factory=list)

    def count(self, change: str) -> int:
        return sum(1 for n in self.nodes if n.change == change)

    def as_dict(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "counts": {
                ADDED: self.count(ADDED),
                REMOVED: self.count(REMOVED),
                CHANGED: self.count(CHANGED),
                "unchanged": self.unchanged,
            },
            "matched_by": dict(sorted(self.matched_by.items())),
            "graph_changes": self.graph_changes,
            "value_changes": self.value_changes,
            "nodes": [n.as_dict() for n in self.nodes],
        }


# set by graphtool.diff.text (a floor above): the report ``summary()`` prints, and the groups
# ``str()`` names; ``import graphtool.diff`` loads both
REPORT: Any = None
GROUPS: Any = None


@dataclass
class DiffResult:
    """Everything ``diff`` found. ``graphs[0]`` is the main graph; subgraphs and functions follow.

    ``str(result)`` is one line (counts and the largest groups); ``result.summary()`` is what
    ``graphtool diff`` prints (≤ 40 lines); ``result.as_dict()`` is ``--json``'s document."""

    a: Model
    b: Model
    graphs: list[GraphDiff]
    model_changes: list[dict[str, Any]]

    @property
    def counts(self) -> dict[str, int]:
        """Nodes removed, added, changed, unchanged, and graph-level changes, over all graphs."""
        counts = {ADDED: 0, REMOVED: 0, CHANGED: 0, "unchanged": 0}
        for g in self.graphs:
            for change in (ADDED, REMOVED, CHANGED):
                counts[change] += g.count(change)
            counts["unchanged"] += g.unchanged
        counts["graph_changes"] = len(self.model_changes) + sum(len(g.graph_changes) for g in self.graphs)
        return counts

    @property
    def equal(self) -> bool:
        """True when nothing differs."""
        c = self.counts
        return c[ADDED] == c[REMOVED] == c[CHANGED] == c["graph_changes"] == 0

    def summary(self, max_lines: int = 40, show_all: bool = False) -> str:
        """The text report: counts, what changed grouped and largest first (named rewrites,
        folds, dead code, weights), then examples; at most ``max_lines`` lines unless ``show_all``."""
        return REPORT(self, "A", "B", show_all=show_all, max_lines=max_lines)

    def __str__(self) -> str:
        c = self.counts
        if self.equal:
            return f"no differences ({c['unchanged']} nodes matched)"
        groups = GROUPS(self) if GROUPS is not None else []
        top = "; ".join(f"{g.title}" + (f" ×{g.count}" if g.count > 1 else "") for g in groups[:3])
        more = f"; … {len(groups) - 3} more groups" if len(groups) > 3 else ""
        return (f"{c[REMOVED]} removed, {c[ADDED]} added, {c[CHANGED]} changed, {c['unchanged']} unchanged"
                + (f": {top}{more}" if top else ""))

    def __repr__(self) -> str:
        return f"<DiffResult {self}>"

    def node_diffs(self) -> Iterable[NodeDiff]:
        """Every node change, in every graph."""
        for g in self.graphs:
            yield from g.nodes

    def as_dict(self) -> dict[str, Any]:
        """The JSON document (``graphtool diff --json``)."""
        return {
            "equal": self.equal,
            "counts": self.counts,
            "nodes": {"a": self.a.node_count(), "b": self.b.node_count()},
            "model_changes": self.model_changes,
            "graphs": [g.as_dict() for g in self.graphs],
        }


# ---------------------------------------------------------------------------------- driver


def _whole(graph: Graph, scope: str, change: str) -> list[GraphDiff]:
    """A graph present on one side only: every node (and nested subgraph) added or removed."""
    gd = GraphDiff(scope, graph if change == REMOVED else None, graph if change == ADDED else None)
    out = [gd]
    for node in graph.topological_order():
        side = {"a": node, "b": None} if change == REMOVED else {"a": None, "b": node}
        gd.nodes.append(NodeDiff(change, scope, **side))
        out += _owned_whole(node, scope, change)
    return out


def _owned_whole(node: Node, scope: str, change: str) -> list[GraphDiff]:
    out: list[GraphDiff] = []
    for key, k, sub in _subgraph_attrs(node):
        out += _whole(sub, _sub_scope(scope, node, key, k), change)
    return out


def _subgraph_attrs(node: Node) -> list[tuple[str, int, Graph]]:
    found: list[tuple[str, int, Graph]] = []
    for key, value in node.attrs.items():
        if isinstance(value, Graph):
            found.append((key, 0, value))
        elif isinstance(value, list) and value and isinstance(value[0], Graph):
            found.extend((key, k, sub) for k, sub in enumerate(value))
    return found


def _sub_scope(scope: str, owner: Node, key: str, k: int) -> str:
    suffix = f"[{k}]" if k else ""
    return f"{scope}/{owner.op_type}({describe(owner)}).{key}{suffix}"


def diff_graphs(ga: Graph, gb: Graph, scope: str = "main", main: bool = True, parent: Matcher | None = None) -> list[GraphDiff]:
    """Diff two graphs (and, recursively, the subgraphs of their matched nodes)."""
    m = Matcher(ga, gb, by_name=main, parent=parent)
    m.run()
    gd = GraphDiff(scope, ga, gb, matches=dict(m.a2b), matched_by=m.how)
    gd.graph_changes = graph_changes(m, main)
    nested: list[GraphDiff] = []
    position_b = m.hb.index
    placed: list[tuple[float, NodeDiff]] = []
    values: dict[str, dict[str, Any]] = {}
    for node in m.hb.order:
        a_id = m.b2a.get(node.id)
        if a_id is None:
            placed.append((position_b[node.id], NodeDiff(ADDED, scope, None, node)))
            nested += _owned_whole(node, scope, ADDED)
            continue
        a = ga.node(a_id)
        details = node_changes(m, a, node, values)
        if details:
            placed.append((position_b[node.id], NodeDiff(CHANGED, scope, a, node, details)))
        else:
            gd.unchanged += 1
        # only ops with subgraph attributes (``Hashes.owners``) have nested graphs to diff:
        # converting every op's attributes again to find out cost 12% of a million-op diff
        if a_id in m.ha.owners or node.id in m.hb.owners:
            nested += _diff_owned(a, node, scope, m)
    for node in m.ha.order:
        if node.id in m.a2b:
            continue
        before = [m.a2b[p.id] for p in (ga.producer(v) for v in node.inputs) if p is not None and p.id in m.a2b]
        where = max((position_b[b] for b in before), default=-1) + 0.5
        placed.append((where, NodeDiff(REMOVED, scope, node, None)))
        nested += _owned_whole(node, scope, REMOVED)
    placed.sort(key=lambda item: item[0])
    gd.nodes = [nd for _, nd in placed]
    gd.value_changes = list(values.values())
    return [gd, *nested]


def _diff_owned(a: Node, b: Node, scope: str, m: Matcher) -> list[GraphDiff]:
    subs_a = {(key, k): sub for key, k, sub in _subgraph_attrs(a)}
    subs_b = {(key, k): sub for key, k, sub in _subgraph_attrs(b)}
    out: list[GraphDiff] = []
    for key, k in sorted(set(subs_a) | set(subs_b)):
        where = _sub_scope(scope, b, key, k)
        if (key, k) not in subs_b:
            out += _whole(subs_a[(key, k)], where, REMOVED)
        elif (key, k) not in subs_a:
            out += _whole(subs_b[(key, k)], where, ADDED)
        else:
            out += diff_graphs(subs_a[(key, k)], subs_b[(key, k)], where, main=False, parent=m)
    return out


def _model_changes(a: Model, b: Model) -> list[dict[str, Any]]:
    changes: list[dict[str, Any]] = []
    if a.ir_version != b.ir_version:
        changes.append({"what": "ir_version", "old": a.ir_version, "new": b.ir_version})
    oa, ob = a.opset_imports, b.opset_imports
    for domain in sorted(set(oa) | set(ob)):
        if oa.get(domain) != ob.get(domain):
            changes.append({"what": "opset", "domain": domain or "ai.onnx", "old": oa.get(domain), "new": ob.get(domain)})
    pa, pb = a.proto_shell, b.proto_shell
    for fld in ("producer_name", "producer_version", "domain", "model_version", "doc_string"):
        if getattr(pa, fld) != getattr(pb, fld):
            changes.append({"what": fld, "old": getattr(pa, fld), "new": getattr(pb, fld)})
    ma = {p.key: p.value for p in pa.metadata_props}
    mb = {p.key: p.value for p in pb.metadata_props}
    for key in sorted(set(ma) | set(mb)):
        if ma.get(key) != mb.get(key):
            changes.append({"what": "metadata", "key": key, "old": ma.get(key), "new": mb.get(key)})
    return changes


def diff(a: Model, b: Model) -> DiffResult:
    """Match and compare two models (see the module docstring for how nodes are matched).

    On big models the collector is paused while they are matched (``gc_paused``): the models
    live through the diff and so do the matcher's tables, and each collection would walk millions
    of them to find nothing (13% of a million-node diff with nothing paused; 3% more with the
    models frozen but the tables walked; issue 19)."""
    with gc_paused_if_big(a.node_count() + b.node_count()):
        return _diff(a, b)


def _diff(a: Model, b: Model) -> DiffResult:
    graphs = diff_graphs(a.graph, b.graph)
    changes = _model_changes(a, b)
    funcs_a = {fn.key: fn for fn in a.functions}
    funcs_b = {fn.key: fn for fn in b.functions}
    for key in sorted(set(funcs_a) | set(funcs_b)):
        scope = f"function {key[0]}:{key[1]}" + (f":{key[2]}" if key[2] else "")
        if key not in funcs_b:
            changes.append({"what": "function removed", "name": scope})
            graphs += _whole(funcs_a[key].body, scope, REMOVED)
        elif key not in funcs_a:
            changes.append({"what": "function added", "name": scope})
            graphs += _whole(funcs_b[key].body, scope, ADDED)
        else:
            graphs += diff_graphs(funcs_a[key].body, funcs_b[key].body, scope, main=False)
    return DiffResult(a, b, graphs, changes)
