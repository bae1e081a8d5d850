"""How the diff keys and writes values: content keys of tensors, short forms of attributes,
one line per change. Below the matcher (graphtool.diff.match) and the report
(graphtool.diff.text); graphtool.render labels its pictures with the same lines."""

from __future__ import annotations

import hashlib
import math
from typing import Any

import numpy as np
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from graphtool.ir.graph import Graph, Node, constant_node_value
from graphtool.ir.tensor import Tensor, dtype_name


def describe(node: Node) -> str:
    """How a node is named in reports: its name, else the first value it produces."""
    if node.name:
        return node.name
    outputs = [o for o in node.outputs if o]
    return f"-> {outputs[0]}" if outputs else f"#{node.id}"


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def tensor_key(tensor: Tensor | TensorProto) -> tuple:
    """(dtype, dims, content digest): equal keys mean equal values, whatever the tensor's name."""
    if isinstance(tensor, Tensor):
        if tensor.data_type == TensorProto.STRING:
            return array_key(tensor.numpy())
        return (tensor.data_type, tensor.dims, _digest(tensor.raw_bytes()))
    return array_key(numpy_helper.to_array(tensor))


def array_key(array: np.ndarray) -> tuple:
    """The same key for a numpy value (a Constant node's), so that a Constant op and an
    initializer holding the same value are the same thing to the diff."""
    array = np.asarray(array)
    if array.dtype.kind in "OUS":
        content = _digest(b"\0".join(str(v).encode() for v in array.ravel()))
        return (TensorProto.STRING, tuple(array.shape), content)
    data_type = helper.np_dtype_to_tensor_dtype(array.dtype)
    return (data_type, tuple(array.shape), _digest(np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()))


def constant_key(node: Node) -> tuple | None:
    if node.op_type != "Constant" or node.domain not in ("", "ai.onnx"):
        return None
    value = constant_node_value(node)
    return None if value is None else array_key(value)


def canonical(value: Any) -> Any:
    """A hashable, name-independent form of an attribute value (subgraphs are hashed apart)."""
    if isinstance(value, TensorProto):
        return ("tensor", *tensor_key(value))
    if isinstance(value, AttributeProto):  # a function body's reference to a caller attribute
        return ("ref", value.ref_attr_name, value.type)
    if isinstance(value, (list, tuple)):
        return tuple(canonical(v) for v in value)
    if isinstance(value, float):
        return ("nan",) if math.isnan(value) else value
    if isinstance(value, (int, str, bytes)) or value is None:
        return value
    if hasattr(value, "SerializeToString"):
        return (type(value).__name__, value.SerializeToString(deterministic=True))
    return repr(value)


def format_value(value: Any, limit: int = 80) -> str:
    """A short human form of an attribute value."""
    if isinstance(value, Graph):
        text = f"<graph {value.name}>"
    elif isinstance(value, bytes):
        text = value.decode("utf-8", "replace")
    elif isinstance(value, TensorProto):
        text = f"tensor {dtype_name(value.data_type)} {list(value.dims)}"
        if math.prod(value.dims) <= 8:
            text += " " + np.array2string(numpy_helper.to_array(value).ravel(), separator=",")
    elif isinstance(value, float):
        text = f"{value:g}"
    elif isinstance(value, list):
        text = "[" + ", ".join(format_value(v, limit) for v in value) + "]"
    elif isinstance(value, AttributeProto):
        text = f"@{value.ref_attr_name}"
    else:
        text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _json_number(x: float) -> float | str:
    return x if math.isfinite(x) else str(x)


def value_change(old: np.ndarray, new: np.ndarray) -> dict[str, Any]:
    """Shape, dtype and largest absolute difference of two constant values."""
    out: dict[str, Any] = {
        "shape_old": list(old.shape),
        "shape_new": list(new.shape),
        "dtype_old": str(old.dtype),
        "dtype_new": str(new.dtype),
        "max_abs_diff": None,
    }
    numeric = all(np.issubdtype(x.dtype, np.number) or x.dtype == np.bool_ for x in (old, new))
    if numeric and old.shape == new.shape and old.size:
        diff = np.abs(old.astype(np.float64) - new.astype(np.float64))
        out["max_abs_diff"] = _json_number(float(np.nanmax(diff)) if not np.isnan(diff).all() else math.nan)
    return out


def type_string(graph: Graph, value: str) -> str:
    dtype = graph.dtype(value)
    shape = graph.declared_shape(value)
    text = dtype_name(dtype) if dtype else "?"
    if shape is not None:
        text += "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"
    return text


def same_array(x: np.ndarray, y: np.ndarray) -> bool:
    return x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y, equal_nan=x.dtype.kind in "fc")


def qualified(node: Node) -> str:
    return f"{node.domain}::{node.op_type}" if node.domain not in ("", "ai.onnx") else node.op_type


# ---------------------------------------------------------------------------------- text
# One line per change detail; graphtool.diff.text builds the report from them (and the groups of
# graphtool.diff.summary), graphtool.render.dot labels pictures with them.


def detail_text(d: dict[str, Any]) -> str:
    what = d["what"]
    if what in ("initializer", "constant"):
        shape = "x".join(map(str, d["shape_new"])) or "scalar"
        if d["shape_old"] != d["shape_new"]:
            shape = ("x".join(map(str, d["shape_old"])) or "scalar") + " -> " + shape
        delta = f", max |diff| {d['max_abs_diff']:.4g}" if isinstance(d["max_abs_diff"], float) else ""
        return f"{what} in slot {d['slot']} ({d['new']}) values changed: {shape}{delta}"
    if what == "input":
        return f"input {d['slot']}: {d['old'] or '(none)'} -> {d['new'] or '(none)'}"
    if what == "attribute":
        text = f"{d['name']}: {d['old'] if d['old'] is not None else '(unset)'} -> {d['new'] if d['new'] is not None else '(unset)'}"
        if d.get("max_abs_diff") is not None:
            text += f" (max |diff| {d['max_abs_diff']})"
        return text
    if what in ("op_type", "outputs"):
        return f"{what}: {d['old']} -> {d['new']}"
    return ", ".join(f"{k}={v}" for k, v in d.items())


def change_text(d: dict[str, Any]) -> str:
    """One line for a graph- or model-level change."""
    what = d["what"]
    rest = {k: v for k, v in d.items() if k != "what"}
    if "old" in rest and "new" in rest:
        label = rest.get("name") or rest.get("key") or rest.get("domain") or ""
        label = f" {label}" if label else ""
        return f"{what}{label}: {rest['old']} -> {rest['new']}"
    return what + " " + " ".join(str(v) for v in rest.values())
