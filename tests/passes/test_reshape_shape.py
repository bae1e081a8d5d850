"""reshape-from-input-shape: computed Reshape targets become constants with 0 = keep dim."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from graphtool import io
from graphtool.optimize import optimize
from graphtool.verify import verify

PASS = ["reshape-from-input-shape"]


def _heads_model(shape_of: str = "x", allowzero: int = 0, other_shape=None) -> onnx.ModelProto:
    """x[B,S,8] → Reshape(x, [Shape(src)[0], Shape(src)[1], 2, 4]) like a torch .view export."""
    c = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    nodes = [
        helper.make_node("Shape", [shape_of], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["d0"], axis=0),
        helper.make_node("Gather", ["s", "i1"], ["d1"], axis=0),
        helper.make_node("Unsqueeze", ["d0", "ax"], ["u0"]),
        helper.make_node("Unsqueeze", ["d1", "ax"], ["u1"]),
        helper.make_node("Concat", ["u0", "u1", "heads", "hd"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"], allowzero=allowzero),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "S", 8])]
    if shape_of != "x":
        inputs.append(helper.make_tensor_value_info(shape_of, TensorProto.FLOAT, other_shape))
    graph = helper.make_graph(
        nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [c("i0", 0), c("i1", 1), c("ax", [0]), c("heads", [2]), c("hd", [4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _target(model) -> list[int] | None:
    reshape = model.graph.nodes("Reshape")[0]
    value = model.graph.const(reshape.inputs[1])
    return None if value is None else value.tolist()


def test_shape_of_own_input_becomes_zero_dims():
    original = io.load_proto(_heads_model())
    optimized, report, _ = optimize(original, passes=PASS)
    assert _target(optimized) == [0, 0, 2, 4]
    shapes = {"x": [3, 5, 8]}
    assert verify(original, optimized, input_shapes=shapes).ok


def test_same_symbolic_dim_of_another_tensor_counts():
    original = io.load_proto(_heads_model("other", other_shape=["B", "S", 3]))
    optimized, _, _ = optimize(original, passes=PASS)
    assert _target(optimized) == [0, 0, 2, 4]
    assert verify(original, optimized, input_shapes={"x": [3, 5, 8], "other": [3, 5, 3]}).ok


def test_unknown_dims_of_another_tensor_are_refused():
    original = io.load_proto(_heads_model("other", other_shape=["P", "Q", 3]))
    optimized, _, _ = optimize(original, passes=PASS)
    assert _target(optimized) is None  # two pieces unknown: cannot prove, left alone


def test_allowzero_is_refused():
    optimized, _, _ = optimize(io.load_proto(_heads_model(allowzero=1)), passes=PASS)
    assert _target(optimized) is None


def test_torchscript_bert_reshapes_resolve_and_outputs_stay():
    from tests.conftest import FIXTURES

    path = f"{FIXTURES}/torch/bert_ts.onnx"
    original = io.load(path)
    optimized, report, _ = optimize(original, passes=PASS)
    assert report.passes["reshape-from-input-shape"].stats["rewritten"] == 8
    feeds = dict(np.load(f"{FIXTURES}/torch/bert_ts.inputs.npz"))
    assert verify(original, optimized, feeds=feeds).ok
