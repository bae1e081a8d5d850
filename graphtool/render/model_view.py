"""The picture of a model: one box per op, initializers and Constant nodes folded into their
consumer, shapes on edges, If/Loop/Scan bodies as (nested) clusters, and at most ``max_nodes``
boxes (the first in topological order, then one "… N more nodes" box)."""

from __future__ import annotations

import difflib
from collections import deque

import graphviz

from graphtool.diff import describe
from graphtool.errors import UsageError
from graphtool.ir.graph import Graph, Node
from graphtool.ir.model import Model
from graphtool.ir.tensor import dtype_name
from graphtool.render.labels import Box, Labels, value_shape
from graphtool.render.picture import COLORS, Picture, edge_label, new_dot
from graphtool.render.text import html_label, html_text, shape_text, small


class ModelView:
    """Builds one model picture (see ``render.dot.model_picture``)."""

    def __init__(self, model: Model, max_nodes: int, around: str | None, depth: int, box: Box = Box()):
        self.model = model
        self.picture = Picture(new_dot(""))
        self.labels = Labels(model, fold_constant_nodes=True, box=box, weights=self.picture.weights)
        self.graph_keys: dict[int, int] = {}
        self.selected: dict[int, set[int]] | None = None  # graph key -> node ids (None: all)
        self.stubs: dict[tuple[int, str], str] = {}
        self.edge_count = 0
        self.truncated = False
        self.max_nodes = max_nodes
        self.focus_graph: Graph | None = None
        self.cluster_of: dict[int, tuple[Graph, Node]] = {}  # subgraph key -> (parent, owner)
        self.drawn_ids: set[tuple[int, int]] = set()
        self.elision_sources: set[str] = set()
        self.output_nodes: list[tuple[Graph, str, str]] = []  # (graph, value, element id)
        if around is not None:
            self._select_around(around, depth)

    def gkey(self, graph: Graph) -> int:
        return self.graph_keys.setdefault(id(graph), len(self.graph_keys))

    # -- selection

    def _around_hint(self, target: str) -> str:
        """What the user may have meant: an op type's nodes, names containing the text, or the
        closest names (difflib)."""
        graphs = [g for _, g in self.model.graphs()]
        typed = [n.name or f"#{n.id}" for g in graphs for n in g.nodes(target)]
        if typed:
            shown = ", ".join(repr(t) for t in typed[:3])
            return (f"; {target} is an op type ({len(typed)} node{'s' if len(typed) != 1 else ''}): "
                    f"give a node name, e.g. {shown}")
        names = sorted({n.name for g in graphs for n in g.nodes() if n.name})
        low = target.lower()
        close = [n for n in names if low in n.lower()][:3] or difflib.get_close_matches(target, names, n=3)
        if not close:
            values = sorted({v for g in graphs for v in g.values()})
            close = [v for v in values if low in v.lower()][:3] or difflib.get_close_matches(target, values, n=3)
        return f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""

    def _select_around(self, target: str, depth: int) -> None:
        found: tuple[Graph, list[Node]] | None = None
        for graph in self.model.graph.walk():
            by_name = [n for n in graph.nodes() if n.name == target]
            if by_name:
                found = (graph, by_name)
                break
            if graph.has_value(target):
                producer = graph.producer(target)
                nodes = [producer] if producer is not None else graph.consumers(target)
                if nodes:
                    found = (graph, nodes)
                    break
        if found is None:
            raise UsageError(f"--around: no node or value named {target!r}{self._around_hint(target)}")
        graph, start = found
        seen = {n.id: 0 for n in start}
        queue = deque(start)
        while queue:
            node = queue.popleft()
            if seen[node.id] >= depth:
                continue
            near = [graph.producer(v) for v in node.inputs] + [c for v in node.outputs for c in graph.consumers(v)]
            for other in near:
                if other is not None and other.id not in seen:
                    seen[other.id] = seen[node.id] + 1
                    queue.append(other)
        self.selected = {self.gkey(graph): set(seen)}
        self.focus_graph = graph

    def _wanted(self, graph: Graph, node: Node, inside_selected: bool) -> bool:
        if self.selected is None or inside_selected:
            return True
        return node.id in self.selected.get(self.gkey(graph), set())

    # -- emission

    def build(self) -> Picture:
        model, pic = self.model, self.picture
        root = self.focus_graph if self.focus_graph is not None else model.graph
        drawn = self._plan(root)
        self._emit_graph(root, dict(drawn), root)
        for graph, nodes in drawn:
            self._emit_edges(graph, nodes)
        for graph, value, vid in self.output_nodes:
            src = self._source(graph, value)
            if src is not None:
                self._edge(src, vid, graph, value)
        if self.truncated:
            elided = pic.total - pic.shown
            note = (f"{elided} more nodes not drawn (--max-nodes {self.max_nodes}); "
                    "use --around NODE --depth K to see a region, or raise --max-nodes")
            pic.notes.append(note)
            pic.dot.node("elided", label=html_label(html_text(f"… {elided} more nodes"),
                                                    small(html_text("--around NODE --depth K, or raise --max-nodes"))),
                         shape="note", style="filled,dashed", fillcolor="#f5f5f5", id="elided")
            pic.titles["elided"] = note
            for src in sorted(self.elision_sources):
                pic.dot.edge(src, "elided", style="dashed", color="#aaaaaa")
        name = model.graph.name or "graph"
        summary = f"{name} · {pic.total} nodes"
        if pic.shown != pic.total:
            summary += f" · showing {pic.shown}"
        fns = len(model.functions)
        if fns:
            pic.notes.append(f"{fns} model-local function{'s' if fns != 1 else ''} not drawn")
        pic.title = summary
        pic.dot.attr("graph", label=html_label(html_text(summary, 120), *[small(html_text(n, 120)) for n in pic.notes]))
        return pic

    def _plan(self, root: Graph) -> list[tuple[Graph, list[Node]]]:
        """Which nodes to draw, graph by graph: topological order, at most max_nodes in all."""
        plan: list[tuple[Graph, list[Node]]] = []

        def visit(graph: Graph, inside: bool) -> None:
            nodes: list[Node] = []
            plan.append((graph, nodes))
            for node in graph.topological_order():
                if not self._wanted(graph, node, inside) or self.labels.is_folded_node(node):
                    continue
                if self.picture.shown >= self.max_nodes:
                    self.truncated = True
                    return
                nodes.append(node)
                self.picture.shown += 1
                self.drawn_ids.add((self.gkey(graph), node.id))
                for sub in node.subgraphs():
                    self.cluster_of[self.gkey(sub)] = (graph, node)
                    visit(sub, True)

        visit(root, self.selected is None)
        self.picture.total = sum(
            1 for g in self.model.graph.walk() for n in g.nodes() if not self.labels.is_folded_node(n))
        return plan

    def node_id(self, graph: Graph, node: Node) -> str:
        return f"g{self.gkey(graph)}n{node.id}"

    def _emit_graph(self, graph: Graph, plan: dict[Graph, list[Node]], root: Graph) -> graphviz.Digraph:
        """Declare a graph's nodes, in the root or in a cluster nested in its owner's graph."""
        pic = self.picture
        target = pic.dot
        gk = self.gkey(graph)
        nodes = plan[graph]
        if graph is not root:
            _, owner = self.cluster_of[gk]
            attr = next((k for k, v in owner.attrs.items()
                         if v is graph or (isinstance(v, list) and any(s is graph for s in v))), "body")
            cluster = graphviz.Digraph(name=f"cluster_g{gk}")
            label = f"{owner.op_type} {describe(owner)} · {attr}"
            cluster.attr(label=html_label(html_text(label, 60)), style="rounded,dashed", color="#888888",
                         fontsize="9", id=f"c{gk}")
            pic.titles[f"c{gk}"] = label
            target = cluster
        for node in nodes:
            nid = self.node_id(graph, node)
            label, hover, info = self.labels.op(graph, node)
            fill, border = COLORS["op"]
            target.node(nid, label=label, fillcolor=fill, color=border, id=nid)
            pic.titles[nid] = hover
            pic.info[nid] = info
            for sub in node.subgraphs():
                if sub in plan:
                    target.subgraph(self._emit_graph(sub, plan, root))
        self._emit_io(graph, target, nodes)
        return target

    def _emit_io(self, graph: Graph, target: graphviz.Digraph, nodes: list[Node]) -> None:
        gk = self.gkey(graph)
        drawn = {n.id for n in nodes}
        used_inputs = {v for n in nodes for v in n.inputs if v in graph.inputs and v not in graph.initializers}
        for k, value in enumerate(graph.inputs):
            if value in graph.initializers:
                continue
            if self.selected is not None and value not in used_inputs:
                continue
            self._io_node(target, graph, value, f"g{gk}i{k}", "input", "#e8f5e9", "#66bb6a")
        for k, value in enumerate(graph.outputs):
            producer = graph.producer(value)
            if self.selected is not None and (producer is None or producer.id not in drawn):
                continue
            vid = f"g{gk}o{k}"
            self._io_node(target, graph, value, vid, "output", "#fff3e0", "#ffa726")
            self.output_nodes.append((graph, value, vid))

    def _io_node(self, target: graphviz.Digraph, graph: Graph, value: str, vid: str, kind: str, fill: str,
                 line: str) -> None:
        """A graph input or output as an ellipse labelled with its name, dtype and shape."""
        pic = self.picture
        dtype = graph.dtype(value)
        detail = " ".join(x for x in (dtype_name(dtype) if dtype else "", shape_text(graph.declared_shape(value)) or "") if x)
        target.node(vid, label=html_label(html_text(value, 40), small(html_text(detail))), shape="ellipse",
                    style="filled", fillcolor=fill, color=line, id=vid)
        pic.titles[vid] = f"{kind} {value}\n{detail}"
        pic.info[vid] = {kind: value, "type": detail}
        full = " ".join(x for x in (dtype_name(dtype) if dtype else "", shape_text(graph.declared_shape(value), True) or "") if x)
        if full != detail:
            pic.info[vid]["full"] = full
        if graph.parent is not None:  # a body's input/output: the panel lists it under its owner
            owner = graph.parent.node(graph.owner) if graph.owner is not None and graph.owner in graph.parent._node else None
            pic.info[vid]["graph"] = f"{owner.op_type} {describe(owner)}" if owner is not None else (graph.name or "subgraph")
        if kind == "input" and (graph is self.focus_graph or graph is self.model.graph):
            pic.start.append(vid)  # the page opens at the first input of the drawn graph

    def _source(self, graph: Graph, value: str) -> str | None:
        """The element an edge carrying ``value`` starts from (None: folded or not drawn)."""
        if not value or self.labels.folded(graph, value) is not None:
            return None
        g: Graph | None = graph
        while g is not None:
            gk = self.gkey(g)
            producer = g.producer(value)
            if producer is not None:
                if (gk, producer.id) in self.drawn_ids:
                    return self.node_id(g, producer)
                return None if self.truncated else self._stub(g, value)
            if value in g.inputs:
                k = list(g.inputs).index(value)
                drawn_io = self.selected is None or g is self.focus_graph or gk in self.cluster_of
                return f"g{gk}i{k}" if drawn_io else self._stub(g, value)
            if not g.is_free(value):
                return None
            g = g.parent
        return None

    def _stub(self, graph: Graph, value: str) -> str:
        key = (self.gkey(graph), value)
        if key not in self.stubs:
            sid = f"s{len(self.stubs)}"
            self.stubs[key] = sid
            self.picture.dot.node(sid, label=html_label(small(html_text(value, 32))), shape="plaintext",
                                  style="dashed", id=sid)
            self.picture.titles[sid] = f"{value} (not drawn)"
        return self.stubs[key]

    def _edge(self, src: str, dst: str, graph: Graph, value: str, **style: str) -> None:
        eid = f"e{self.edge_count}"
        self.edge_count += 1
        self.picture.dot.edge(src, dst, id=eid, **edge_label(self.picture, src, graph, value), **style)
        shape = shape_text(value_shape(graph, value))
        self.picture.titles[eid] = value + (f"  {shape}" if shape else "")

    def _emit_edges(self, graph: Graph, nodes: list[Node]) -> None:
        gk = self.gkey(graph)
        for node in nodes:
            nid = self.node_id(graph, node)
            for value in dict.fromkeys(v for v in node.inputs if v):
                src = self._source(graph, value)
                if src is None:
                    continue
                captured = graph.producer(value) is None and graph.is_free(value)
                self._edge(src, nid, graph, value, **({"style": "dashed"} if captured else {}))
            for value in node.outputs:
                if not value:
                    continue
                for consumer, _ in graph.uses(value):
                    if (gk, consumer.id) in self.drawn_ids:
                        continue
                    if self.truncated:
                        self.elision_sources.add(nid)
                    elif self.selected is not None:
                        self._edge(nid, self._stub(graph, value), graph, value, style="dashed")
                    break
            for sub in node.subgraphs():  # a body's results flow back into its owner
                sk = self.gkey(sub)
                if sk not in self.cluster_of:
                    continue
                for k, value in enumerate(sub.outputs):
                    self._edge(f"g{sk}o{k}", nid, sub, value, style="dotted", color="#888888")

