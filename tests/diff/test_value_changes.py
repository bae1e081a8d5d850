"""A node is "changed" only for what changed on it (issue 36): an input read by the same name on
both sides whose maker changed — a new producer, a constant of the same name — is said once, on
the value, not once per reader; real model / level-2 pairs have no changed node left whose only
change is such an input, and the summary's groups still hold every node change exactly once."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphtool import io
from graphtool.diff import CHANGED, diff, summarize
from graphtool.diff.text import format_diff
from graphtool.optimize import optimize
from tests.conftest import FIXTURES


def _model(nodes, inits=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [4]),
                               helper.make_tensor_value_info("w", TensorProto.FLOAT, [4])], list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_new_producer_of_a_same_named_value_is_said_once_on_the_value():
    # A: y = Sigmoid(x) * x, read by two ops; B: y = one op of its own (the same name): its readers
    # read the same value, they did not change
    a = _model([helper.make_node("Sigmoid", ["x"], ["s"], name="sig"),
                helper.make_node("Mul", ["x", "s"], ["y"], name="mul"),
                helper.make_node("Relu", ["y"], ["z"], name="relu"),
                helper.make_node("Neg", ["y"], ["w"], name="neg")])
    b = _model([helper.make_node("HardSwish", ["x"], ["y"], name="fused"),
                helper.make_node("Relu", ["y"], ["z"], name="relu"),
                helper.make_node("Neg", ["y"], ["w"], name="neg")])
    result = diff(io.load_proto(a), io.load_proto(b))
    changed = [nd for nd in result.node_diffs() if nd.change == CHANGED]
    assert all(nd.node.op_type not in ("Relu", "Neg") for nd in changed), [nd.details for nd in changed]
    assert result.counts["unchanged"] >= 2
    notes = result.graphs[0].value_changes
    assert notes == [{"what": "new producer", "value": "y", "old": "Mul mul", "new": "HardSwish fused"}]
    assert "1 new producer" in format_diff(result)


def test_a_value_that_became_a_constant_of_the_same_name_is_not_a_change_of_its_reader():
    const = helper.make_node("Constant", [], ["c"], name="k", value=numpy_helper.from_array(np.ones(4, np.float32)))
    a = _model([helper.make_node("Identity", ["k0"], ["c"], name="id"),
                helper.make_node("Add", ["x", "c"], ["z"], name="add"),
                helper.make_node("Neg", ["x"], ["w"], name="neg")],
               [numpy_helper.from_array(np.ones(4, np.float32), "k0")])
    b = _model([const, helper.make_node("Add", ["x", "c"], ["z"], name="add"),
                helper.make_node("Neg", ["x"], ["w"], name="neg")])
    result = diff(io.load_proto(a), io.load_proto(b))
    assert not any(nd.node.op_type == "Add" for nd in result.node_diffs()), [nd.details for nd in result.node_diffs()]
    assert [v["what"] for v in result.graphs[0].value_changes] == ["became a constant"]


@pytest.mark.parametrize("name", ["torch/mobilenet_ts", "hf/gpt2_sdpa_dynamo", "hf/vit_eager_ts"])
def test_real_level2_pairs_have_no_same_named_input_only_changes(name):
    path = f"{FIXTURES}/{name}.onnx"
    optimized, _, _ = optimize(io.load(path), level=2)
    result = diff(io.load(path), optimized)
    doc = result.as_dict()
    changed = [n for g in doc["graphs"] for n in g["nodes"] if n["change"] == CHANGED]
    same_only = [n for n in changed if all(d["what"] == "input" and d["old"] == d["new"] for d in n["details"])]
    assert same_only == []
    c = result.counts
    groups = summarize(result)
    held = [id(nd) for g in groups for nd in g.nodes]
    assert len(held) == len(set(held)) == c["added"] + c["removed"] + c["changed"]
    assert c["removed"] + c["changed"] + c["unchanged"] == result.a.node_count()
