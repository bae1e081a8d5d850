"""Pictures of models and diffs as Graphviz DOT, rendered to SVG/PNG by the ``dot`` program and
to a self-contained HTML page (``render.html``).

This module is the front door of ``graphtool.render``; the work is split by job:

- ``text``: escaping for DOT's HTML-like labels and SVG, short value forms;
- ``schemas``: input slot names and attribute defaults from the ONNX schemas;
- ``labels``: what one op box, its hover text and its panel details say;
- ``weights``: bounded weight statistics for the HTML panel;
- ``picture``: the ``Picture`` (DOT + titles + panel data) and its renderings;
- ``model_view`` / ``diff_view``: the two kinds of picture.

A node reads as its op type plus the attributes that differ from their schema default;
initializers (and Constant nodes) are folded into their consumer's label ("W 64x3x7x7") instead
of drawn, edges carry tensor shapes, and If/Loop/Scan bodies are clusters.
"""

from __future__ import annotations


from graphtool.diff import DiffResult
from graphtool.errors import UsageError
from graphtool.ir.model import Model
from graphtool.render.diff_view import DiffView
from graphtool.render.labels import Box
from graphtool.render.model_view import ModelView
from graphtool.render.picture import COLORS, Picture, set_titles
from graphtool.render.text import attr_text, clean_text, html_label, html_text, shape_text, small, xml_text

__all__ = ["COLORS", "DEFAULT_MAX_NODES", "Picture", "attr_text", "clean_text", "diff_picture", "html_label",
           "html_text", "infer_shapes", "model_picture", "set_titles", "shape_text", "small", "xml_text"]

DEFAULT_MAX_NODES = 2000  # dot: 1,746-node densenet121 in ~1 s; a 3,000-node graph can take 30 s


def model_picture(model: Model, around: str | None = None, depth: int = 2,
                  max_nodes: int = DEFAULT_MAX_NODES, all_attrs: bool = False, names: bool = False) -> Picture:
    """The picture of a model (or of the nodes within ``depth`` hops of ``around``).

    Past ``max_nodes`` the first nodes in topological order are drawn and the rest stand behind
    one "… N more nodes" node (and a note), so a huge model still gives a picture of its start.
    ``all_attrs`` shows attributes equal to their schema default too (hidden by default), ``names``
    each node's name under its op type (by default only in the hover text, panel and search).
    """
    if max_nodes < 1:
        raise UsageError("--max-nodes must be at least 1")
    return ModelView(model, max_nodes, around, depth, Box(all_attrs, names)).build()


def diff_picture(result: DiffResult, context: int = 1, all_attrs: bool = False, names: bool = False,
                 max_nodes: int | None = DEFAULT_MAX_NODES) -> Picture:
    """Changed nodes coloured (added green, removed red, changed amber) with ``context`` hops of
    unchanged neighbours, so a few changes in a big model make a readable picture. Past
    ``max_nodes`` boxes the first changes in graph order are drawn and a note says how many
    (None: all). ``all_attrs`` and ``names`` as for ``model_picture``."""
    if context < 0:
        raise UsageError("--context must be 0 or more")
    if max_nodes is not None and max_nodes < 1:
        raise UsageError("--max-nodes must be at least 1")
    return DiffView(result, context, Box(all_attrs, names), max_nodes).build()


def infer_shapes(model: Model) -> Model:
    """A copy of ``model`` with ONNX shape inference's value_info (for shape labels on edges);
    the model itself when inference fails (pictures never depend on it)."""
    from graphtool.io import load_proto
    from graphtool.ir.to_onnx import to_onnx
    from graphtool.shapes import infer

    try:
        return load_proto(infer(to_onnx(model), data_prop=False), model.base_dir)
    except Exception:  # noqa: BLE001 — shapes are decoration; a model inference rejects still draws
        return model
