"""What one op box says (label), its hover text, and its side-panel details.

A box reads like Netron's: the op type in bold, the few attributes that differ from the schema
default (``Schemas.is_default``; ``Box.all_attrs`` shows every one), and the constants folded into it
— initializers and, in model pictures, Constant nodes — as "W 64x3x7x7" or, for small integer
values, "axes = [0]". The node's name, every attribute and every input/output with its type go
to the hover text and to the panel, where the search box also finds them (``Box.names`` puts
the name in the box too).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from graphtool.ir.graph import Graph, Node, constant_node_value
from graphtool.ir.model import Model
from graphtool.ir.tensor import dtype_name
from graphtool.render.schemas import Schemas
from graphtool.render.text import attr_text, cut, html_label, html_text, shape_text, small, small_value
from graphtool.render.weights import WeightRef

MAX_BOX_ATTRS = 4  # attribute lines in a box before "+N more"


@dataclass(frozen=True)
class Box:
    """What a box shows beyond Netron's default: every attribute, and the node's name."""

    all_attrs: bool = False  # also attributes equal to their schema default
    names: bool = False  # the node's name under its op type (Netron's "Show Names")
WEIGHT_COLOR = "#1f4e79"
EXTRA_COLOR = "#7a4b00"


def value_shape(graph: Graph, value: str) -> list[Any] | None:
    """The shape recorded for a value in its own scope (captured values live in a parent)."""
    g: Graph | None = graph
    while g is not None:
        if value in g.nx:
            shape = g.declared_shape(value)
            if shape is not None or not g.is_free(value):
                return shape
        g = g.parent
    return None


def value_type(graph: Graph, value: str, full: bool = False) -> str:
    """``float32 1x64x56x56`` as far as it is known, searching enclosing scopes like value_shape;
    symbolic dims shortened unless ``full``."""
    g: Graph | None = graph
    while g is not None:
        if value in g.nx or value in g.initializers:
            dtype = g.dtype(value)
            shape = g.declared_shape(value)
            if dtype is not None or shape is not None or not g.is_free(value):
                return " ".join(x for x in (dtype_name(dtype) if dtype else "", shape_text(shape, full) or "") if x)
        g = g.parent
    return ""


def typed_row(row: dict[str, Any], graph: Graph, value: str) -> dict[str, Any]:
    """``row`` with the value's ``type`` (short dims) and, where shortening changed it, ``full``
    (the panel shows it on hover)."""
    row["type"] = value_type(graph, value) if value else ""
    full = value_type(graph, value, True) if value else ""
    if full != row["type"]:
        row["full"] = full
    return row


@dataclass
class Folded:
    """A constant drawn inside its consumer: its values when small, its shape, its weight id."""

    value: str
    array: np.ndarray | None  # only when small enough to print
    dims: list[Any] | None
    weight: str | None  # key into Labels.weights (panel statistics)


def _is_constant_op(node: Node) -> bool:
    return node.op_type == "Constant" and node.domain in ("", "ai.onnx")


class Labels:
    """Labels, hover text and panel details of op nodes (shared by model and diff pictures).

    ``weights`` collects a ``WeightRef`` per folded constant, keyed by the id the panel data
    uses; the HTML page computes their statistics (``render.weights``) when it is written.
    """

    def __init__(self, model: Model, fold_constant_nodes: bool, box: Box = Box(),
                 weights: dict[str, WeightRef] | None = None, prefix: str = "w"):
        self.schemas = Schemas(model.opset_imports)
        self.fold_constant_nodes = fold_constant_nodes
        self.all_attrs = box.all_attrs
        self.names = box.names
        self.weights: dict[str, WeightRef] = weights if weights is not None else {}
        self._ids: dict[tuple[int, str], str] = {}
        self._prefix = prefix

    def _weight_id(self, graph: Graph, value: str, ref: WeightRef) -> str:
        key = (id(graph), value)
        if key not in self._ids:
            wid = f"{self._prefix}{len(self._ids)}"
            self._ids[key] = wid
            self.weights[wid] = ref
        return self._ids[key]

    def folded(self, graph: Graph, value: str) -> Folded | None:
        """How ``value`` is drawn inside its consumer, or None when it is an edge."""
        g: Graph | None = graph
        while g is not None and value:
            if value in g.initializers:
                tensor = g.initializers[value]
                small_array = tensor.numpy() if tensor.size <= 8 and tensor.external is None else None
                ref = WeightRef(tuple(tensor.dims), tensor.data_type, tensor.numpy,
                                tensor.iter_chunks if tensor.external is not None else None)
                return Folded(value, small_array, list(tensor.dims), self._weight_id(g, value, ref))
            producer = g.producer(value)
            if producer is not None:
                if self.fold_constant_nodes and _is_constant_op(producer):
                    array = constant_node_value(producer)
                    if array is None:
                        return Folded(value, None, None, None)
                    ref = WeightRef(tuple(array.shape), _onnx_dtype(array), lambda a=array: a)
                    return Folded(value, array if array.size <= 8 else None, list(array.shape),
                                  self._weight_id(g, value, ref))
                return None
            if value in g.inputs or not g.is_free(value):
                return None
            g = g.parent
        return None

    def is_folded_node(self, node: Node) -> bool:
        return (self.fold_constant_nodes and _is_constant_op(node)
                and not any(node.graph.is_output(v) for v in node.outputs))

    def op(self, graph: Graph, node: Node, extra: Iterable[str] = ()) -> tuple[str, str, dict[str, Any]]:
        """(HTML label, hover text, panel details) of one op node."""
        extra = list(extra)
        op = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"
        attrs = {k: v for k, v in node.attrs.items() if not isinstance(v, Graph)
                 and not (isinstance(v, list) and v and isinstance(v[0], Graph))}
        texts = {k: attr_text(k, v) for k, v in attrs.items()}
        defaults = [k for k, v in attrs.items() if self.schemas.is_default(node, k, v)]
        boxed = [f"{k}={cut(t, 28)}" for k, t in texts.items() if self.all_attrs or k not in defaults]
        if not self.all_attrs and len(boxed) > MAX_BOX_ATTRS:
            boxed = boxed[:MAX_BOX_ATTRS - 1] + [f"+{len(boxed) - MAX_BOX_ATTRS + 1} more"]
        parts = [f"<B>{html_text(op or '?')}</B>"]
        if self.names and node.name:
            parts.append(small(html_text(node.name, 40), "#666666"))
        parts += [small(html_text(line), "#333333") for line in boxed]
        inputs: list[dict[str, Any]] = []
        for slot, value in enumerate(node.inputs):
            slot_name = self.schemas.slot_name(node, slot)
            row: dict[str, Any] = {"slot": slot_name, "value": value}
            fold = self.folded(graph, value)
            if fold is None:
                typed_row(row, graph, value)
            else:
                tiny = small_value(fold.array) if fold.array is not None else None
                line = f"{slot_name} = {tiny}" if tiny is not None else f"{slot_name} {shape_text(fold.dims) or '?'}"
                parts.append(small(html_text(line), WEIGHT_COLOR))
                row["type"] = value_type(graph, value) or shape_text(fold.dims) or ""
                row["weight"] = fold.weight
                if tiny is not None:
                    row["values"] = tiny
            inputs.append(row)
        parts += [small(html_text(line), EXTRA_COLOR) for line in extra]
        outputs = [typed_row({"slot": self.schemas.output_name(node, s), "value": v}, graph, v)
                   for s, v in enumerate(node.outputs)]
        hover = [op + (f"  {node.name}" if node.name else "")]
        hover += [f"{k} = {t}" for k, t in texts.items()]
        hover += [f"in {r['slot']}: {r['value'] or '(none)'}" for r in inputs]
        hover += [f"out {s}: {v}" for s, v in enumerate(node.outputs)]
        hover += extra
        info = {
            "op_type": op,
            "name": node.name,
            "attributes": {k: cut(t, 200) for k, t in texts.items()},
            "defaults": defaults,
            "inputs": inputs,
            "outputs": outputs,
        }
        subgraphs = [k for k, v in node.attrs.items() if k not in attrs]
        if subgraphs:
            info["subgraphs"] = subgraphs
        return html_label(*parts), "\n".join(hover), info


def _onnx_dtype(array: np.ndarray) -> int:
    from onnx import helper

    try:
        return helper.np_dtype_to_tensor_dtype(array.dtype)
    except Exception:  # noqa: BLE001 — object/str arrays: "undefined" is honest
        return 0
