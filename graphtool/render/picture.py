"""``Picture``: a Graphviz DOT graph plus what the SVG and HTML renderings add to it.

Hover text is not a DOT attribute at all (dot's escString tooltips expand backslash sequences
unpredictably): graph elements get ids we generate, and after layout each SVG ``<title>`` is
replaced by our own XML-escaped text. Node ids never contain model text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import graphviz

from graphtool.diff import ADDED, CHANGED, REMOVED
from graphtool.errors import GraphtoolError, UsageError
from graphtool.ir.graph import Graph
from graphtool.render.labels import value_shape
from graphtool.render.text import html_text, shape_text, xml_text
from graphtool.render.weights import WeightRef, weight_stats

COLORS = {  # fill, border
    ADDED: ("#c6efce", "#2e7d32"),
    REMOVED: ("#ffc7ce", "#c62828"),
    CHANGED: ("#ffe699", "#b7791f"),
    "context": ("#ffffff", "#9e9e9e"),
    "op": ("#eef3fb", "#5b7db1"),
}
NODE_POINTS = 10  # the op type's font size in a box


@dataclass
class Picture:
    """A DOT graph plus what the SVG/HTML renderings add: hover text, side-panel details, the
    table of changes and groups of a diff, and the weights whose statistics the page shows."""

    dot: graphviz.Digraph
    titles: dict[str, str] = field(default_factory=dict)  # element id -> hover text
    info: dict[str, dict[str, Any]] = field(default_factory=dict)  # element id -> panel details
    rows: list[dict[str, Any]] = field(default_factory=list)  # diff: the table of changes
    groups: list[dict[str, Any]] = field(default_factory=list)  # diff: {title, kind, count, ids}
    weights: dict[str, WeightRef] = field(default_factory=dict)  # weight id -> lazy values
    start: list[str] = field(default_factory=list)  # element ids the page opens at (first wins)
    notes: list[str] = field(default_factory=list)
    shown: int = 0
    total: int = 0
    title: str = ""
    labelled: set[tuple[str, str]] = field(default_factory=set)  # (edge source, value) with a shape label
    legend: list[dict[str, Any]] = field(default_factory=list)  # diff: {text, fill, border}; the page's key

    @property
    def source(self) -> str:
        return self.dot.source

    def pipe(self, fmt: str, dot: graphviz.Digraph | None = None) -> bytes:
        try:
            return (dot or self.dot).pipe(format=fmt, quiet=True)  # dot's own stderr would break our one-line promise
        except graphviz.ExecutableNotFound:
            raise GraphtoolError("rendering needs Graphviz's 'dot' program (apt-get install graphviz)") from None
        except graphviz.CalledProcessError as err:
            stderr = (err.stderr or b"").decode("utf-8", "replace").strip().splitlines()
            raise GraphtoolError(f"dot failed: {stderr[0] if stderr else err}") from None

    def svg(self, graph_label: bool = True) -> str:
        """The SVG with our hover text in each element's <title>. ``graph_label=False`` leaves out
        the graph's own label (a diff's legend): the HTML page shows it beside the view instead."""
        dot = None
        if not graph_label:
            dot = self.dot.copy()
            dot.attr("graph", label="")
        return set_titles(self.pipe("svg", dot).decode("utf-8"), self.titles)

    def weight_stats(self) -> dict[str, dict[str, str]]:
        """Statistics of the folded weights, computed now (bounded: see ``render.weights``)."""
        return weight_stats(self.weights)

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


def new_dot(title_html: str) -> graphviz.Digraph:
    dot = graphviz.Digraph("graphtool", strict=False)
    dot.attr("graph", rankdir="TB", nodesep="0.25", ranksep="0.35", forcelabels="false", fontname="Helvetica", fontsize="11",
             labelloc="t", label=f"<{title_html}>" if title_html else "")
    dot.attr("node", shape="box", style="rounded,filled", fontname="Helvetica", fontsize=str(NODE_POINTS),
             margin="0.08,0.04", height="0.3")
    dot.attr("edge", fontname="Helvetica", fontsize="8", color="#666666", arrowsize="0.6")
    return dot


def edge_label(picture: Picture, src: str, graph: Graph, value: str) -> dict[str, str]:
    """The shape label of an edge. An ``xlabel`` is placed after layout: a plain ``label`` becomes
    a node of its own in dot's ranking and made a 1,500-node graph take 48 s instead of 6 s.
    A value read by several ops is labelled once, on its first edge: the same text on every edge
    of a fan-out stacked identical labels on each other near the source (the others' hover text
    still says the shape)."""
    text = shape_text(value_shape(graph, value))
    if not text or (src, value) in picture.labelled:
        return {}
    picture.labelled.add((src, value))
    # (the graph's forcelabels=false: a label dot cannot place clear of nodes and other labels is
    # left out rather than drawn over them.) A cell with a margin: dot keeps the label's box clear of nodes and other labels, and the
    # browser's text box (its line height, a wider fallback font) stays inside what dot reserved
    return {"xlabel": f'<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="2"><TR><TD>'
                      f'{html_text(text, 32)}</TD></TR></TABLE>>'}
