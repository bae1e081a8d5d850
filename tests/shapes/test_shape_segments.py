"""Shape inference in segments (graphtool.shapes.segments) answers exactly what one inference does."""

from __future__ import annotations

import glob
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import graphtool.shapes.segments as segments
from graphtool import io
from graphtool.shapes import ShapeOracle, dims_of

BACKEND_DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = sorted(glob.glob(os.path.join(BACKEND_DATA, "light", "*.onnx"))) + sorted(
    glob.glob(os.path.join(HERE, "fixtures", "torch", "*.onnx")) + glob.glob(os.path.join(HERE, "fixtures", "hf", "*.onnx")))


def _canonical(table) -> dict:
    """Types with made-up symbols renamed by first appearance: equal iff the same facts hold."""
    names: dict[str, str] = {}
    out = {}
    for value, t in table.items():
        dims = dims_of(t)
        if dims is not None:
            dims = tuple(names.setdefault(d, f"s{len(names)}") if isinstance(d, str) and "@" in d else d
                         for d in dims)
        out[value] = (t.WhichOneof("value"), t.tensor_type.elem_type if t.HasField("tensor_type") else None, dims)
    return out


def _tables(model, monkeypatch, segment_nodes: int):
    monkeypatch.setattr(segments, "MIN_NODES", 10**9)
    whole = ShapeOracle(model)
    whole_table = whole.table(model.graph)
    monkeypatch.setattr(segments, "MIN_NODES", 0)
    monkeypatch.setattr(segments, "SEGMENT_NODES", segment_nodes)
    calls = []
    real = segments.infer_in_segments

    def spy(*args, **kwargs):
        calls.append(real(*args, **kwargs))
        return calls[-1]

    monkeypatch.setattr("graphtool.shapes.oracle.infer_in_segments", spy)
    cut = ShapeOracle(model)
    return whole_table, cut.table(model.graph), calls


@pytest.mark.parametrize("size", [3, 25])
def test_every_model_cut_into_small_segments_infers_as_a_whole(monkeypatch, size):
    segmented = 0
    for path in MODELS:
        model = io.load(path)
        if model.ir_version < 4 or any(True for _ in model.graph.subgraphs()):
            continue  # never segmented
        whole, cut, calls = _tables(model, monkeypatch, segment_nodes=size)
        if calls and calls[0] is not None:
            print("segmented", path)
            segmented += 1
            assert list(cut) == list(whole), path  # same values, same order
        assert _canonical(cut) == _canonical(whole), path
        monkeypatch.undo()
    assert segmented >= 5  # the CNN and ViT exports cut cleanly; a transformer's int masks and shapes cross cuts


def _graph(nodes, inputs, outputs, inits=()) -> object:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return io.load_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def test_a_computed_int_crossing_a_cut_falls_back_to_one_inference(monkeypatch):
    """Shape(x) → ... → Reshape: onnx propagates the shape as data; a cut there would lose it."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Relu", ["x"], ["r1"]),
             helper.make_node("Relu", ["r1"], ["r2"]), helper.make_node("Relu", ["r2"], ["r3"]),
             helper.make_node("Reshape", ["r3", "s"], ["y"])]
    model = _graph(nodes, [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    whole, cut, calls = _tables(model, monkeypatch, segment_nodes=2)
    assert calls == [None]  # refused
    assert dims_of(cut["y"]) == [2, 3, 4] == dims_of(whole["y"])


def test_a_cut_never_separates_a_constant_from_its_reader(monkeypatch):
    """Reshape's shape from a Constant op: onnx reads its value; the cut moves past the reader."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 12])
    shape = numpy_helper.from_array(np.array([2, 3, 4], np.int64))
    nodes = [helper.make_node("Relu", ["x"], ["r0"]), helper.make_node("Constant", [], ["c"], value=shape),
             helper.make_node("Relu", ["r0"], ["r1"]), helper.make_node("Relu", ["r1"], ["r2"]),
             helper.make_node("Reshape", ["r2", "c"], ["r3"]), helper.make_node("Relu", ["r3"], ["r4"]),
             helper.make_node("Relu", ["r4"], ["r5"]), helper.make_node("Relu", ["r5"], ["y"])]
    model = _graph(nodes, [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    order = model.graph.topological_ids()
    cuts = segments._cuts(model.graph, order, 2)
    assert cuts is not None and not any(2 <= c <= 4 for c in cuts)  # not between Constant (1) and Reshape (4)
    whole, cut, calls = _tables(model, monkeypatch, segment_nodes=2)
    assert calls and calls[0] is not None
    assert dims_of(cut["y"]) == [2, 3, 4] == dims_of(whole["y"])


def test_symbols_made_up_in_two_segments_never_compare_equal(monkeypatch):
    """Two NonZero-free ops that invent sizes: each segment's unk__0 is its own symbol."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 5])
    k = numpy_helper.from_array(np.array([1], np.int64), "k")
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("Compress", ["a", "m1"], ["b"], axis=0),
             helper.make_node("Relu", ["b"], ["c"]), helper.make_node("Relu", ["c"], ["d"]),
             helper.make_node("Compress", ["d", "m2"], ["e"], axis=0), helper.make_node("Relu", ["e"], ["y"])]
    masks = [helper.make_tensor_value_info(m, TensorProto.BOOL, [4]) for m in ("m1", "m2")]
    model = _graph(nodes, [x, *masks], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [k])
    whole, cut, calls = _tables(model, monkeypatch, segment_nodes=3)
    assert calls and calls[0] is not None
    b, e = dims_of(cut["b"])[0], dims_of(cut["e"])[0]
    assert isinstance(b, str) and isinstance(e, str) and b != e
    assert _canonical(cut) == _canonical(whole)
