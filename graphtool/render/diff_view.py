"""The picture of a diff: one merged graph per graph pair — B's nodes plus A's removed ones —
coloured by change (added green, removed red, changed amber) with a few hops of unchanged
context, so a handful of changes in a big model make a readable picture.

For the HTML page it also records, per changed node, the node before and after (the panel shows
them side by side), and the diff's summary groups (``graphtool.diff.summary``) as lists of the
element ids each group accounts for, so clicking a group lights exactly its nodes.
"""

from __future__ import annotations

import re
from collections import deque
from typing import Any

import graphviz

from graphtool.diff import ADDED, CHANGED, REMOVED, DiffResult, GraphDiff, change_text, describe, detail_text, summarize
from graphtool.ir.graph import Graph, Node
from graphtool.render.labels import Box, Labels, value_shape
from graphtool.render.picture import COLORS, Picture, edge_label, new_dot
from graphtool.render.text import cut, html_label, html_text, shape_text, small


class DiffView:
    """One merged graph per graph pair: B's nodes plus A's removed ones, coloured by change."""

    def __init__(self, result: DiffResult, context: int, box: Box = Box(), max_nodes: int | None = None):
        self.result = result
        self.context = context
        # graphviz lays out a few thousand boxes in seconds and 70k in hours: past ``max_nodes``
        # the first changes in graph order are drawn (with their context) and a note says so
        self.budget = max_nodes
        self.changes_shown = 0
        self.picture = Picture(new_dot(""))
        weights = self.picture.weights
        # Constant ops fold into their readers as in viz: a Constant → initializer move is not a
        # screenful of red boxes (its group still lists them; the reader's box shows the value)
        self.labels_a = Labels(result.a, fold_constant_nodes=True, box=box, weights=weights, prefix="wa")
        self.labels_b = Labels(result.b, fold_constant_nodes=True, box=box, weights=weights, prefix="wb")
        self.keys: dict[int, str] = {}  # id(NodeDiff) -> element id
        c = result.counts
        legend = (
            f'<TABLE BORDER="0" CELLSPACING="2"><TR>'
            f'<TD BGCOLOR="{COLORS[REMOVED][0]}">{c[REMOVED]} removed</TD>'
            f'<TD BGCOLOR="{COLORS[ADDED][0]}">{c[ADDED]} added</TD>'
            f'<TD BGCOLOR="{COLORS[CHANGED][0]}">{c[CHANGED]} changed</TD>'
            f'<TD>{c["unchanged"]} unchanged</TD></TR>'
        )
        self.legend = legend
        self.picture.legend = [
            {"text": f"{c[kind]} {kind}", "fill": COLORS[kind][0], "border": COLORS[kind][1]}
            for kind in (REMOVED, ADDED, CHANGED)] + [
            {"text": f"{c['unchanged']} unchanged", "fill": COLORS["context"][0], "border": COLORS["context"][1]}]
        self.edge_count = 0
        self._io: dict[str, tuple[str, str]] = {}  # io element id -> ("input"|"output", value)
        self._io_done: set[str] = set()

    def build(self) -> Picture:
        pic, result = self.picture, self.result
        for d in result.model_changes:
            pic.rows.append({"id": None, "change": "model", "scope": "model", "op_type": "", "name": "",
                             "details": [change_text(d)]})
        for gi, gd in enumerate(result.graphs):
            for d in gd.graph_changes:
                pic.rows.append({"id": None, "change": "graph", "scope": gd.scope, "op_type": "", "name": "",
                                 "details": [change_text(d)]})
            if gd.nodes:
                self._graph(gi, gd)
        pic.groups = self._groups()
        if result.equal:
            pic.dot.node("same", label=html_label(html_text("no differences")), shape="note", id="same")
            pic.titles["same"] = "no differences"
        pic.total = result.a.node_count() + result.counts[ADDED]
        counts = result.counts
        pic.title = (f"{counts[REMOVED]} removed, {counts[ADDED]} added, {counts[CHANGED]} changed, "
                     f"{counts['unchanged']} unchanged")
        note = f"showing {pic.shown} of {pic.total} nodes ({self.context} hop{'s' if self.context != 1 else ''} of context)"
        changes = sum(len(gd.nodes) for gd in result.graphs)
        if self.changes_shown < changes:
            note += (f"; the first {self.changes_shown} of {changes} changed nodes in graph order "
                     f"(--max-nodes {self.budget}; the text or --json report lists every change)")
        pic.notes.append(note)
        pic.dot.attr("graph", label=f'<{self.legend}<TR><TD COLSPAN="4">{small(html_text(note, 120))}</TD></TR></TABLE>>')
        return pic

    def _groups(self) -> list[dict[str, Any]]:
        """The summary's groups, each with the element ids of exactly the node changes it holds."""
        groups = []
        for group in summarize(self.result):
            ids = [self.keys[id(nd)] for nd in group.nodes if id(nd) in self.keys]
            groups.append({"kind": group.kind, "title": group.title, "count": group.count, "ids": ids})
        return groups

    def _graph(self, gi: int, gd: GraphDiff) -> None:
        pic = self.picture
        status: dict[str, str] = {}
        nodes: dict[str, tuple[Graph, Node, Any]] = {}
        for nd in gd.nodes:
            if nd.b is not None:
                key = f"d{gi}b{nd.b.id}"
                nodes[key] = (nd.b.graph, nd.b, nd)
            else:
                key = f"d{gi}a{nd.a.id}"  # type: ignore[union-attr]
                nodes[key] = (nd.a.graph, nd.a, nd)  # type: ignore[union-attr]
            status[key] = nd.change
            self.keys[id(nd)] = key
        folded = {key for key, (_, node, _) in nodes.items() if self.labels_b.is_folded_node(node)}
        if gd.b is not None:
            folded |= {f"d{gi}b{n.id}" for n in gd.b.nodes("Constant") if self.labels_b.is_folded_node(n)}
        edges = [e for e in self._edges(gi, gd) if e[0] not in folded and e[1] not in folded]
        adjacent: dict[str, set[str]] = {}
        for src, dst, _, _, _ in edges:
            adjacent.setdefault(src, set()).add(dst)
            adjacent.setdefault(dst, set()).add(src)
        focus = [k for k in status if k not in folded]
        left = None if self.budget is None else max(self.budget - self.picture.shown, 0)
        if left is not None:
            focus = focus[:left]
        self.changes_shown += len(focus) + sum(1 for k in status if k in folded)
        seen = {k: 0 for k in focus}
        queue = deque(focus)
        while queue and (left is None or len(seen) < left):
            key = queue.popleft()
            if seen[key] >= self.context:
                continue
            for other in adjacent.get(key, ()):
                if other not in seen and other[:1] == "d":
                    seen[other] = seen[key] + 1
                    queue.append(other)
                    if left is not None and len(seen) >= left:
                        break
        target = pic.dot
        cluster = None
        if gd.scope != "main":
            cluster = graphviz.Digraph(name=f"cluster_d{gi}")
            cluster.attr(label=html_label(html_text(gd.scope, 80)), style="rounded,dashed", color="#888888",
                         fontsize="9", id=f"cd{gi}")
            pic.titles[f"cd{gi}"] = gd.scope
            target = cluster
        for key in seen:
            if key in nodes:
                graph, node, nd = nodes[key]
            else:  # context: an unchanged node, drawn from B
                graph, node, nd = gd.b, gd.b.node(_id_of(key)), None  # type: ignore[union-attr]
            kind = status.get(key, "context")
            extra = [detail_text(d) for d in nd.details][:3] if nd is not None and nd.change == CHANGED else []
            labels = self.labels_b if graph is gd.b else self.labels_a
            label, hover, info = labels.op(graph, node, extra=[cut(e, 44) for e in extra])
            fill, border = COLORS[kind]
            style = {"fillcolor": fill, "color": border}
            if kind == "context":
                style["fontcolor"] = "#666666"
            if kind in (ADDED, REMOVED, CHANGED):
                style["penwidth"] = "2"
            target.node(key, label=label, id=key, **style)
            full = [kind.upper(), hover] + ([detail_text(d) for d in nd.details] if nd is not None else [])
            pic.titles[key] = "\n".join(full)
            info = dict(info, change=kind, scope=gd.scope)
            if nd is not None and nd.details:
                info["details"] = [detail_text(d) for d in nd.details]
            if nd is not None and nd.change == CHANGED and nd.a is not None:
                info["before"] = self.labels_a.op(nd.a.graph, nd.a)[2]  # the panel's left column
            pic.info[key] = info
            pic.shown += 1
        for nd in gd.nodes:
            key = f"d{gi}b{nd.b.id}" if nd.b is not None else f"d{gi}a{nd.a.id}"  # type: ignore[union-attr]
            pic.rows.append({"id": key, "change": nd.change, "scope": gd.scope, "op_type": nd.node.op_type,
                             "name": describe(nd.node), "details": [detail_text(d) for d in nd.details]})
        for src, dst, graph, value, style in edges:
            ends = [src, dst]
            if not all(e in seen or not e.startswith("d") for e in ends):
                continue
            for end in ends:
                if not end.startswith("d") and end not in self._io_done:
                    self._io_node(target, end)
            eid = f"e{self.edge_count}"
            self.edge_count += 1
            pic.dot.edge(src, dst, id=eid, **edge_label(pic, src, graph, value), **style)
            shape = shape_text(value_shape(graph, value))
            pic.titles[eid] = value + (f"  {shape}" if shape else "")
        if cluster is not None:
            pic.dot.subgraph(cluster)

    def _io_node(self, target: graphviz.Digraph, key: str) -> None:
        self._io_done.add(key)
        kind, value = self._io[key]
        fill, border = ("#e8f5e9", "#66bb6a") if kind == "input" else ("#fff3e0", "#ffa726")
        target.node(key, label=html_label(html_text(value, 40)), shape="ellipse", style="filled",
                    fillcolor=fill, color=border, id=key)
        self.picture.titles[key] = f"{kind} {value}"
        self.picture.info[key] = {kind: value}

    def _edges(self, gi: int, gd: GraphDiff) -> list[tuple[str, str, Graph, str, dict[str, str]]]:
        """Directed edges of the merged graph: (src, dst, graph, value, style)."""
        ga, gb = gd.a, gd.b
        edges: list[tuple[str, str, Graph, str, dict[str, str]]] = []
        matches = gd.matches
        removed = {nd.a.id for nd in gd.nodes if nd.change == REMOVED and nd.a is not None}

        def io_key(graph: Graph, value: str, kind: str) -> str:
            names = list(graph.inputs if kind == "input" else graph.outputs)
            key = f"d{gi}{'i' if kind == 'input' else 'o'}{'b' if graph is gb else 'a'}{names.index(value)}"
            key = "v" + key  # io keys never start with "d" (those are op nodes)
            self._io[key] = (kind, value)
            return key

        if gb is not None:
            for node in gb.nodes():
                dst = f"d{gi}b{node.id}"
                for value in dict.fromkeys(v for v in node.inputs if v):
                    producer = gb.producer(value)
                    if producer is not None:
                        edges.append((f"d{gi}b{producer.id}", dst, gb, value, {}))
                    elif value in gb.inputs and value not in gb.initializers:
                        edges.append((io_key(gb, value, "input"), dst, gb, value, {}))
            for value in gb.outputs:
                producer = gb.producer(value)
                if producer is not None:
                    edges.append((f"d{gi}b{producer.id}", io_key(gb, value, "output"), gb, value, {}))
        if ga is not None:
            gone = {"style": "dashed", "color": COLORS[REMOVED][1]}
            for aid in removed:
                node = ga.node(aid)
                dst = f"d{gi}a{aid}"
                for value in dict.fromkeys(v for v in node.inputs if v):
                    producer = ga.producer(value)
                    if producer is not None:
                        src = f"d{gi}b{matches[producer.id]}" if producer.id in matches else f"d{gi}a{producer.id}"
                        edges.append((src, dst, ga, value, gone))
                    elif value in ga.inputs and value not in ga.initializers:
                        edges.append((io_key(ga, value, "input"), dst, ga, value, gone))
                for value in node.outputs:
                    for consumer in ga.consumers(value):
                        if consumer.id in matches:
                            edges.append((dst, f"d{gi}b{matches[consumer.id]}", ga, value, gone))
                    if value in ga.outputs:
                        edges.append((dst, io_key(ga, value, "output"), ga, value, gone))
        return edges


def _id_of(key: str) -> int:
    return int(re.split(r"[ab]", key[1:], maxsplit=1)[1])

