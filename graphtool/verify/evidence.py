"""Evidence in a model's graph about the inputs it expects: the constants integer inputs are
compared with (both sides of an ``sr == 16000`` If), the row counts of the tables id inputs index,
and the image sizes an exporter wrote down. Read by input discovery (graphtool.verify.discover)."""

from __future__ import annotations

import ast
from typing import Any, Iterable

import numpy as np
import onnx
from onnx import numpy_helper

from graphtool.verify.dims import InputSpec

_PASS_THROUGH = {"Cast", "Squeeze", "Unsqueeze", "Reshape", "Identity", "Flatten", "CastLike"}
_COMPARISONS = {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"}


def _graphs(graph: onnx.GraphProto) -> Iterable[onnx.GraphProto]:
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from _graphs(g)


def _constants(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Small constants by value name (initializers and Constant nodes, in every scope)."""
    consts: dict[str, np.ndarray] = {}
    for g in _graphs(model.graph):
        for init in g.initializer:
            if np.prod(init.dims, dtype=np.int64) <= 16 and not init.data_location:
                consts[init.name] = numpy_helper.to_array(init)
        for node in g.node:
            if node.op_type == "Constant" and node.output:
                for attr in node.attribute:
                    if attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR and \
                            np.prod(attr.t.dims, dtype=np.int64) <= 16 and not attr.t.data_location:
                        consts[node.output[0]] = numpy_helper.to_array(attr.t)
                    elif attr.name in ("value_int", "value_ints"):
                        consts[node.output[0]] = np.array(onnx.helper.get_attribute_value(attr))
    return consts


def _sources(model: onnx.ModelProto, names: set[str]) -> dict[str, str]:
    """value name → the graph input it is (a pass-through chain of) , for values reached from inputs."""
    origin = {n: n for n in names}
    for g in _graphs(model.graph):
        for node in g.node:  # nodes are topologically ordered within a graph
            if node.op_type in _PASS_THROUGH and node.input and node.input[0] in origin:
                for out in node.output[:1]:
                    origin[out] = origin[node.input[0]]
    return origin


def compared_values(model: onnx.ModelProto, inputs: list[InputSpec]) -> dict[str, list[Any]]:
    """Integer/bool inputs → the constants the graph compares them with (the branch values)."""
    wanted = {s.name for s in inputs if _is_int(s.ort_type) or s.ort_type == "tensor(bool)"}
    if not wanted:
        return {}
    origin, consts = _sources(model, wanted), _constants(model)
    found: dict[str, list[Any]] = {}
    unequal: dict[str, list[Any]] = {}
    for g in _graphs(model.graph):
        for node in g.node:
            if node.op_type in _COMPARISONS and len(node.input) == 2:
                for mine, other in ((0, 1), (1, 0)):
                    src = origin.get(node.input[mine])
                    if src and node.input[other] in consts:
                        for v in np.unique(consts[node.input[other]]).tolist()[:4]:
                            if v not in found.setdefault(src, []):
                                found[src].append(v)
                            if node.op_type == "Equal":
                                unequal.setdefault(src, []).append(v)
            elif node.op_type in ("If", "Where") and node.input and origin.get(node.input[0]):
                src = origin[node.input[0]]
                if _bool(inputs, src):
                    found[src] = [True, False]
    for src, equals in unequal.items():  # the "not equal" side of `x == c` needs a value too
        if len(found[src]) == 1 and isinstance(equals[0], (int, float)) and not isinstance(equals[0], bool):
            c = equals[0]
            found[src].append(c // 2 if isinstance(c, int) and c > 1 else c + 1)  # 16000 -> 8000
    return found


def id_bounds(model: onnx.ModelProto, inputs: list[InputSpec]) -> dict[str, int]:
    """Integer inputs used as Gather indices into a constant table → the table's row count."""
    wanted = {s.name for s in inputs if _is_int(s.ort_type)}
    if not wanted:
        return {}
    origin = _sources(model, wanted)
    rows: dict[str, int] = {}
    init_dims = {t.name: list(t.dims) for g in _graphs(model.graph) for t in g.initializer}
    for g in _graphs(model.graph):
        for node in g.node:
            if node.op_type == "Gather" and len(node.input) == 2 and origin.get(node.input[1]):
                dims = init_dims.get(node.input[0])
                axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                if dims and -len(dims) <= axis < len(dims):
                    src = origin[node.input[1]]
                    rows[src] = min(rows.get(src, dims[axis]), dims[axis])
    return rows


def metadata_sizes(model: onnx.ModelProto) -> list[int]:
    """Image sizes the exporter wrote down (ultralytics: ``imgsz`` = "[320, 320]")."""
    for prop in model.metadata_props:
        if prop.key.lower() in ("imgsz", "image_size", "img_size", "input_size"):
            try:
                value = ast.literal_eval(prop.value)
            except (ValueError, SyntaxError):
                continue
            values = value if isinstance(value, (list, tuple)) else [value]
            sizes = [int(v) for v in values if isinstance(v, (int, float)) and 0 < v <= 8192]
            if sizes:
                return sorted(set(sizes))
    return []


def _is_int(ort_type: str) -> bool:
    return ort_type.startswith("tensor(int") or ort_type.startswith("tensor(uint")


def _bool(inputs: list[InputSpec], name: str) -> bool:
    return any(s.name == name and s.ort_type == "tensor(bool)" for s in inputs)
