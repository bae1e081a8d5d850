"""Pictures of models and diffs as Graphviz DOT, rendered to SVG/PNG by the ``dot`` program.

A node reads as its op type plus its key attributes; initializers (and Constant nodes) are folded
into their consumer's label ("W 64x3x7x7") instead of drawn, edges carry tensor shapes, and
If/Loop/Scan bodies are clusters.

Text from a model (names, string attributes, symbolic dims) can hold anything: quotes, ``<``,
newlines, backslashes, control characters. Labels are therefore always HTML-like labels built by
``html_text`` (escaped entities; backslashes doubled, because dot expands ``\\N``, ``\\G``... even
inside HTML labels; control characters shown as ``\\xNN``, since they would make the label
ill-formed XML). Hover text is not a DOT attribute at all (dot's escString tooltips expand
backslash sequences unpredictably): graph elements get ids we generate, and after layout each
SVG ``<title>`` is replaced by our own XML-escaped text. Node ids never contain model text.
"""

from __future__ import annotations

import difflib
import html
import re
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterable

import graphviz
import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from graphtool.diff import ADDED, CHANGED, REMOVED, DiffResult, GraphDiff, detail_text, change_text, describe
from graphtool.errors import GraphtoolError, UsageError
from graphtool.ir.graph import Graph, Node, constant_node_value
from graphtool.ir.model import Model
from graphtool.ir.tensor import dtype_name

DEFAULT_MAX_NODES = 2000  # dot: 1,746-node densenet121 in ~4 s; a 3,000-node graph can take 30 s
LABEL_WIDTH = 48  # characters of one label line before it is cut with an ellipsis
COLORS = {  # fill, border
    ADDED: ("#c6efce", "#2e7d32"),
    REMOVED: ("#ffc7ce", "#c62828"),
    CHANGED: ("#ffe699", "#b7791f"),
    "context": ("#ffffff", "#9e9e9e"),
    "op": ("#eef3fb", "#5b7db1"),
}
_SHAPE_ATTRS = {"kernel_shape", "strides", "dilations", "output_shape", "output_padding"}


# ---------------------------------------------------------------------------------- text


def clean_text(text: str) -> str:
    """Text safe for XML 1.0: control characters become visible ``\\xNN``, newlines stay."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch == "\n":
            out.append(ch)
        elif ch == "\t":
            out.append(" ")
        elif code < 0x20 or 0x7F <= code < 0xA0:
            out.append(f"\\x{code:02x}")
        elif 0xD800 <= code <= 0xDFFF or code in (0xFFFE, 0xFFFF):
            out.append("\ufffd")
        else:
            out.append(ch)
    return "".join(out)


def _cut(line: str, limit: int | None) -> str:
    return line if limit is None or len(line) <= limit else line[: limit - 1] + "…"


def html_text(text: str, limit: int | None = LABEL_WIDTH) -> str:
    """The body of an HTML-like DOT label showing ``text`` exactly (lines cut at ``limit``)."""
    lines = [_cut(line, limit) for line in clean_text(text).split("\n")]
    return "<BR/>".join(html.escape(line, quote=True).replace("\\", "\\\\") for line in lines)


def html_label(*parts: str) -> str:
    """An HTML-like label from already-escaped parts, one per line (dot rejects an empty one)."""
    return "<" + ("<BR/>".join(p for p in parts if p) or " ") + ">"


def small(text_html: str, color: str = "#555555") -> str:
    """Small coloured text; nothing for no text (dot rejects empty elements like <FONT></FONT>)."""
    return f'<FONT POINT-SIZE="8" COLOR="{color}">{text_html}</FONT>' if text_html else ""


def xml_text(text: str) -> str:
    return html.escape(clean_text(text), quote=False)


# ---------------------------------------------------------------------------------- values


def shape_text(shape: list[Any] | tuple[Any, ...] | None) -> str | None:
    if shape is None:
        return None
    if len(shape) == 0:
        return "scalar"
    if len(shape) == 1:
        return f"[{'?' if shape[0] is None else shape[0]}]"
    return "x".join("?" if d is None else str(d) for d in shape)


def value_shape(graph: Graph, value: str) -> list[Any] | None:
    """The shape recorded for a value in its own scope (captured values live in a parent)."""
    g: Graph | None = graph
    while g is not None:
        if value in g.nx:
            shape = g.shape(value)
            if shape is not None or not g.is_free(value):
                return shape
        g = g.parent
    return None


def attr_text(key: str, value: Any) -> str:
    if key == "to" and isinstance(value, int):
        return dtype_name(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        if key in _SHAPE_ATTRS and all(isinstance(v, int) for v in value):
            return "x".join(map(str, value))
        return "[" + ",".join(attr_text(key, v) for v in value) + "]"
    if isinstance(value, TensorProto):
        if int(np.prod(value.dims)) <= 4 and value.data_type != TensorProto.STRING:
            array = numpy_helper.to_array(value)
            flat = ",".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in array.ravel().tolist())
            return flat if array.ndim == 0 else f"[{flat}]"
        return f"tensor {shape_text(list(value.dims))}"
    return str(value)


def small_value(array: np.ndarray) -> str | None:
    """Values worth showing: integer constants of up to 8 elements (shapes, axes, indices) and
    scalars; a float vector's values are noise in a picture."""
    if array.size > 8 or array.dtype.kind not in "biuf" or (array.dtype.kind == "f" and array.size > 1):
        return None
    flat = array.ravel().tolist()
    text = ",".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in flat)
    return text if array.ndim == 0 else f"[{text}]"


class _Schemas:
    """Input slot names from the ONNX schemas ("X", "W", "B"), for folded-constant lines."""

    def __init__(self, model: Model):
        self.opsets = model.opset_imports
        self.cache: dict[tuple[str, str], list[tuple[str, bool]] | None] = {}

    def slot_name(self, node: Node, slot: int) -> str:
        key = (node.domain, node.op_type)
        if key not in self.cache:
            domain = "" if node.domain == "ai.onnx" else node.domain
            version = self.opsets.get(domain, self.opsets.get("ai.onnx" if domain == "" else domain, 1))
            try:
                schema = onnx.defs.get_schema(node.op_type, version or 1, domain)
                self.cache[key] = [
                    (p.name, p.option == onnx.defs.OpSchema.FormalParameterOption.Variadic) for p in schema.inputs
                ]
            except Exception:  # unknown or custom op: positional names
                self.cache[key] = None
        params = self.cache[key]
        if not params:
            return f"in{slot}"
        if slot < len(params):
            return params[slot][0]
        name, variadic = params[-1]
        return f"{name}{slot - len(params) + 1}" if variadic else f"in{slot}"


# ---------------------------------------------------------------------------------- the picture


@dataclass
class Picture:
    """A DOT graph plus what the SVG/HTML renderings add: hover text and side-panel details."""

    dot: graphviz.Digraph
    titles: dict[str, str] = field(default_factory=dict)  # element id -> hover text
    info: dict[str, dict[str, Any]] = field(default_factory=dict)  # element id -> panel details
    rows: list[dict[str, Any]] = field(default_factory=list)  # diff: the table of changes
    notes: list[str] = field(default_factory=list)
    shown: int = 0
    total: int = 0
    title: str = ""

    @property
    def source(self) -> str:
        return self.dot.source

    def pipe(self, fmt: str) -> bytes:
        try:
            return self.dot.pipe(format=fmt, quiet=True)  # dot's own stderr would break our one-line promise
        except graphviz.ExecutableNotFound:
            raise GraphtoolError("rendering needs Graphviz's 'dot' program (apt-get install graphviz)") from None
        except graphviz.CalledProcessError as err:
            stderr = (err.stderr or b"").decode("utf-8", "replace").strip().splitlines()
            raise GraphtoolError(f"dot failed: {stderr[0] if stderr else err}") from None

    def svg(self) -> str:
        """The SVG with our hover text in each element's <title>."""
        return set_titles(self.pipe("svg").decode("utf-8"), self.titles)

    def render(self, fmt: str) -> bytes:
        if fmt == "dot":
            return self.source.encode("utf-8")
        if fmt == "svg":
            return self.svg().encode("utf-8")
        if fmt == "png":
            return self.pipe("png")
        if fmt == "html":
            from graphtool.render.html import page

            return page(self).encode("utf-8")
        raise UsageError(f"unknown picture format '{fmt}'")


_TITLE = re.compile(r'(<g id="([A-Za-z0-9_]+)" class="(?:node|edge|cluster)">\s*<title>)([^<]*)(</title>)')


def set_titles(svg: str, titles: dict[str, str]) -> str:
    def swap(m: re.Match[str]) -> str:
        text = titles.get(m.group(2))
        return m.group(0) if text is None else m.group(1) + xml_text(text) + m.group(4)

    return _TITLE.sub(swap, svg)


def _new_dot(title_html: str) -> graphviz.Digraph:
    dot = graphviz.Digraph("graphtool", strict=False)
    dot.attr("graph", rankdir="TB", nodesep="0.25", ranksep="0.35", fontname="Helvetica", fontsize="11",
             labelloc="t", label=f"<{title_html}>" if title_html else "")
    dot.attr("node", shape="box", style="rounded,filled", fontname="Helvetica", fontsize="10",
             margin="0.08,0.04", height="0.3")
    dot.attr("edge", fontname="Helvetica", fontsize="8", color="#666666", arrowsize="0.6")
    return dot


class _Labels:
    """Labels, hover text and panel details of op nodes (shared by model and diff pictures)."""

    def __init__(self, model: Model, fold_constant_nodes: bool):
        self.schemas = _Schemas(model)
        self.fold_constant_nodes = fold_constant_nodes

    def folded(self, graph: Graph, value: str) -> tuple[str, np.ndarray | None, list[Any] | None] | None:
        """(description, small value or None, shape) when ``value`` is drawn inside its consumer."""
        g: Graph | None = graph
        while g is not None and value:
            if value in g.initializers:
                tensor = g.initializers[value]
                array = tensor.numpy() if tensor.size <= 8 and tensor.external is None else None
                return value, array, list(tensor.dims)
            producer = g.producer(value)
            if producer is not None:
                if self.fold_constant_nodes and producer.op_type == "Constant" and producer.domain in ("", "ai.onnx"):
                    array = constant_node_value(producer)
                    return value, array if array is not None and array.size <= 8 else None, (
                        list(array.shape) if array is not None else None)
                return None
            if value in g.inputs or not g.is_free(value):
                return None
            g = g.parent
        return None

    def is_folded_node(self, node: Node) -> bool:
        return (self.fold_constant_nodes and node.op_type == "Constant" and node.domain in ("", "ai.onnx")
                and not any(node.graph.is_output(v) for v in node.outputs))

    def op(self, graph: Graph, node: Node, extra: Iterable[str] = (), max_attrs: int = 4) -> tuple[str, str, dict[str, Any]]:
        """(HTML label, hover text, panel details) of one op node."""
        op = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"
        attrs = {k: v for k, v in node.attrs.items() if not isinstance(v, Graph)
                 and not (isinstance(v, list) and v and isinstance(v[0], Graph))}
        attr_lines = [f"{k}={_cut(attr_text(k, v), 28)}" for k, v in attrs.items()]
        parts = [f"<B>{html_text(op or '?')}</B>"]
        if node.name:
            parts.append(small(html_text(node.name, 36)))
        shown = attr_lines[:max_attrs] + ([f"+{len(attr_lines) - max_attrs} more"] if len(attr_lines) > max_attrs else [])
        parts += [html_text(line) for line in shown]
        constants: list[str] = []
        for slot, value in enumerate(node.inputs):
            fold = self.folded(graph, value)
            if fold is None:
                continue
            _, array, shape = fold
            tiny = small_value(array) if array is not None else None
            slot_name = self.schemas.slot_name(node, slot)
            line = f"{slot_name} = {tiny}" if tiny is not None else f"{slot_name} {shape_text(shape) or '?'}"
            constants.append(line)
            parts.append(small(html_text(line), "#1f4e79"))
        parts += [small(html_text(line), "#7a4b00") for line in extra]
        hover = [op + (f"  {node.name}" if node.name else "")]
        hover += [f"{k} = {attr_text(k, v)}" for k, v in attrs.items()]
        hover += [f"in {self.schemas.slot_name(node, s)}: {v or '(none)'}" for s, v in enumerate(node.inputs)]
        hover += [f"out {s}: {v}" for s, v in enumerate(node.outputs)]
        hover += list(extra)
        info = {
            "op_type": op,
            "name": node.name,
            "attributes": {k: _cut(attr_text(k, v), 200) for k, v in attrs.items()},
            "inputs": node.inputs,
            "outputs": node.outputs,
            "constants": constants,
        }
        return html_label(*parts), "\n".join(hover), info


def _edge_label(graph: Graph, value: str) -> dict[str, str]:
    """The shape label of an edge. An ``xlabel`` is placed after layout: a plain ``label`` becomes
    a node of its own in dot's ranking and made a 1,500-node graph take 48 s instead of 6 s."""
    text = shape_text(value_shape(graph, value))
    return {"xlabel": html_label(html_text(text, 32))} if text else {}


# ---------------------------------------------------------------------------------- model view


class _ModelView:
    def __init__(self, model: Model, max_nodes: int, around: str | None, depth: int):
        self.model = model
        self.labels = _Labels(model, fold_constant_nodes=True)
        self.graph_keys: dict[int, int] = {}
        self.selected: dict[int, set[int]] | None = None  # graph key -> node ids (None: all)
        self.picture = Picture(_new_dot(""))
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
            names = sorted({n.name for _, g in self.model.graphs() for n in g.nodes() if n.name})
            close = difflib.get_close_matches(target, names, n=3)
            hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
            raise UsageError(f"--around: no node or value named {target!r}{hint}")
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
        detail = " ".join(x for x in (dtype_name(dtype) if dtype else "", shape_text(graph.shape(value)) or "") if x)
        target.node(vid, label=html_label(html_text(value, 40), small(html_text(detail))), shape="ellipse",
                    style="filled", fillcolor=fill, color=line, id=vid)
        pic.titles[vid] = f"{kind} {value}\n{detail}"
        pic.info[vid] = {kind: value, "type": detail}

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
        self.picture.dot.edge(src, dst, id=eid, **_edge_label(graph, value), **style)
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


def model_picture(model: Model, around: str | None = None, depth: int = 2,
                  max_nodes: int = DEFAULT_MAX_NODES) -> Picture:
    """The picture of a model (or of the nodes within ``depth`` hops of ``around``).

    Past ``max_nodes`` the first nodes in topological order are drawn and the rest stand behind
    one "… N more nodes" node (and a note), so a huge model still gives a picture of its start.
    """
    if max_nodes < 1:
        raise UsageError("--max-nodes must be at least 1")
    return _ModelView(model, max_nodes, around, depth).build()


def infer_shapes(model: Model) -> Model:
    """A copy of ``model`` with ONNX shape inference's value_info (for shape labels on edges);
    the model itself when inference fails (pictures never depend on it)."""
    from graphtool.io import load_proto
    from graphtool.ir.to_onnx import to_onnx

    try:
        proto = to_onnx(model)
        inferred = onnx.shape_inference.infer_shapes(proto, check_type=False, strict_mode=False)
        return load_proto(inferred, model.base_dir)
    except Exception:  # noqa: BLE001 — shapes are decoration; a model inference rejects still draws
        return model


# ---------------------------------------------------------------------------------- diff view


class _DiffView:
    """One merged graph per graph pair: B's nodes plus A's removed ones, coloured by change."""

    def __init__(self, result: DiffResult, context: int):
        self.result = result
        self.context = context
        self.labels_a = _Labels(result.a, fold_constant_nodes=False)
        self.labels_b = _Labels(result.b, fold_constant_nodes=False)
        c = result.counts
        legend = (
            f'<TABLE BORDER="0" CELLSPACING="2"><TR>'
            f'<TD BGCOLOR="{COLORS[REMOVED][0]}">{c[REMOVED]} removed</TD>'
            f'<TD BGCOLOR="{COLORS[ADDED][0]}">{c[ADDED]} added</TD>'
            f'<TD BGCOLOR="{COLORS[CHANGED][0]}">{c[CHANGED]} changed</TD>'
            f'<TD>{c["unchanged"]} unchanged</TD></TR>'
        )
        self.legend = legend
        self.picture = Picture(_new_dot(""))
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
        if result.equal:
            pic.dot.node("same", label=html_label(html_text("no differences")), shape="note", id="same")
            pic.titles["same"] = "no differences"
        pic.total = result.a.node_count() + result.counts[ADDED]
        counts = result.counts
        pic.title = (f"{counts[REMOVED]} removed, {counts[ADDED]} added, {counts[CHANGED]} changed, "
                     f"{counts['unchanged']} unchanged")
        note = f"showing {pic.shown} of {pic.total} nodes ({self.context} hop{'s' if self.context != 1 else ''} of context)"
        pic.notes.append(note)
        pic.dot.attr("graph", label=f'<{self.legend}<TR><TD COLSPAN="4">{small(html_text(note, 120))}</TD></TR></TABLE>>')
        return pic

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
        edges = self._edges(gi, gd)
        adjacent: dict[str, set[str]] = {}
        for src, dst, _, _, _ in edges:
            adjacent.setdefault(src, set()).add(dst)
            adjacent.setdefault(dst, set()).add(src)
        focus = list(status)
        seen = {k: 0 for k in focus}
        queue = deque(focus)
        while queue:
            key = queue.popleft()
            if seen[key] >= self.context:
                continue
            for other in adjacent.get(key, ()):
                if other not in seen and other[:1] == "d":
                    seen[other] = seen[key] + 1
                    queue.append(other)
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
            label, hover, info = labels.op(graph, node, extra=[_cut(e, 44) for e in extra])
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
            pic.dot.edge(src, dst, id=eid, **_edge_label(graph, value), **style)
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


def diff_picture(result: DiffResult, context: int = 1) -> Picture:
    """Changed nodes coloured (added green, removed red, changed amber) with ``context`` hops of
    unchanged neighbours, so a few changes in a big model make a readable picture."""
    if context < 0:
        raise UsageError("--context must be 0 or more")
    return _DiffView(result, context).build()
