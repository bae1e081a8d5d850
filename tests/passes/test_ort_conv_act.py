"""Conv (+ same-shaped Add) (+ activation) → com.microsoft FusedConv."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphtool import io
from graphtool.optimize import optimize
from tests.passes.ort_helpers import assert_same_outputs, ops, run

ACTS = {
    "Relu": {}, "Sigmoid": {}, "Tanh": {}, "HardSwish": {}, "LeakyRelu": {"alpha": 0.2},
    "HardSigmoid": {"alpha": 0.3, "beta": 0.4},
}


def conv_model(act="Relu", residual=False, z_shape=(1, 4, 6, 6), bias=True, clip=None, opset=17, extra_reader=False):
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "W")]
    conv_in = ["x", "W"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "B"))
        conv_in.append("B")
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])]
    nodes = [helper.make_node("Conv", conv_in, ["c"], pads=[0, 0, 0, 0])]
    last = "c"
    if residual:
        inputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, list(z_shape)))
        nodes.append(helper.make_node("Add", ["z", "c"], ["s"]))
        last = "s"
    if clip is not None:
        inits += [numpy_helper.from_array(np.array(clip[0], np.float32), "lo"),
                  numpy_helper.from_array(np.array(clip[1], np.float32), "hi")]
        nodes.append(helper.make_node("Clip", [last, "lo", "hi"], ["y"]))
    elif act:
        nodes.append(helper.make_node(act, [last], ["y"], **ACTS[act]))
    else:
        nodes.append(helper.make_node("Identity", [last], ["y"]))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if extra_reader:
        outputs.append(helper.make_tensor_value_info("c", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("act", sorted(ACTS))
def test_conv_activation(act):
    original, fused, _ = run(conv_model(act), ["ort-fused-conv"])
    assert ops(fused) == {"com.microsoft:FusedConv": 1}
    assert fused.graph.nodes("FusedConv")[0].attr("activation") == act
    assert_same_outputs(original, fused)


def test_relu6_clip_with_constant_bounds():
    original, fused, _ = run(conv_model(clip=(0.0, 6.0)), ["ort-fused-conv"])
    node = fused.graph.nodes("FusedConv")[0]
    assert node.attr("activation") == "Clip" and list(node.attr("activation_params")) == [0.0, 6.0]
    assert_same_outputs(original, fused)


@pytest.mark.parametrize("bias", [True, False])
def test_residual_add_and_relu_go_in_as_z(bias):
    original, fused, _ = run(conv_model(residual=True, bias=bias), ["ort-fused-conv"])
    assert ops(fused) == {"com.microsoft:FusedConv": 1}
    node = fused.graph.nodes("FusedConv")[0]
    assert node.inputs[3] == "z" and (node.inputs[2] == "B") == bias
    assert_same_outputs(original, fused)


def test_broadcast_add_is_not_z():
    """z of shape [1, 4, 1, 1] broadcasts: it is a bias, not FusedConv's same-shaped Z."""
    original, fused, _ = run(conv_model(residual=True, z_shape=(1, 4, 1, 1)), ["ort-fused-conv"])
    assert ops(fused) == {"Conv": 1, "Add": 1, "Relu": 1}


def test_conv_read_elsewhere_or_unsupported_activation_stays():
    original, fused, _ = run(conv_model(extra_reader=True), ["ort-fused-conv"])
    assert ops(fused) == ops(original)
    original, fused, _ = run(conv_model(act=None), ["ort-fused-conv"])
    assert ops(fused) == ops(original)


def test_residual_add_without_activation_goes_in_as_z():
    original, fused, _ = run(conv_model(act=None, residual=True), ["ort-fused-conv"])
    assert ops(fused) == {"com.microsoft:FusedConv": 1, "Identity": 1}
    node = fused.graph.nodes("FusedConv")[0]
    assert node.inputs[3] == "z" and node.attr("activation") is None
    assert_same_outputs(original, fused)


def test_sum_is_a_residual_too():
    proto = conv_model(residual=True)
    proto.graph.node[1].op_type = "Sum"
    original, fused, _ = run(proto, ["ort-fused-conv"])
    assert ops(fused) == {"com.microsoft:FusedConv": 1}
    assert_same_outputs(original, fused)


def test_clip_with_omitted_min_fuses_and_is_given_back_when_it_does_not():
    proto = conv_model(clip=(0.0, 6.0))
    proto.graph.node[-1].input[1] = ""
    original, fused, _ = run(proto, ["ort-fused-conv"])
    node = fused.graph.nodes("FusedConv")[0]
    assert list(node.attr("activation_params")) == [-np.finfo(np.float32).max, 6.0]
    assert set(fused.graph.initializers) == {"W", "B", "lo"}  # 'lo' is unread from the start: DCE's
    assert_same_outputs(original, fused)
    proto.graph.output.append(helper.make_tensor_value_info("c", TensorProto.FLOAT, None))  # c read elsewhere
    original, fused, _ = run(proto, ["ort-fused-conv"])
    assert ops(fused) == ops(original) and fused.graph.nodes("Clip")[0].inputs == ["c", "", "hi"]
    assert set(fused.graph.initializers) == {"W", "B", "lo", "hi"}


def test_clip_with_a_runtime_bound_leaves_the_clip_but_takes_the_residual():
    proto = conv_model(residual=True, clip=(0.0, 6.0))
    proto.graph.initializer.pop()  # 'hi' becomes a graph input
    proto.graph.input.append(helper.make_tensor_value_info("hi", TensorProto.FLOAT, []))
    original, fused, _ = run(proto, ["ort-fused-conv"])
    assert ops(fused) == {"com.microsoft:FusedConv": 1, "Clip": 1}
    assert fused.graph.nodes("FusedConv")[0].inputs[3] == "z"
    assert_same_outputs(original, fused, {"x": np.ones((1, 3, 8, 8), np.float32),
                                          "z": np.ones((1, 4, 6, 6), np.float32), "hi": np.array(2.0, np.float32)})


def test_conv_added_to_itself_or_read_by_a_shape_stays():
    proto = conv_model(residual=True)
    proto.graph.node[1].input[0] = "c"  # Add(c, c)
    original, fused, _ = run(proto, ["ort-fused-conv"])
    assert ops(fused) == ops(original)
    proto = conv_model()
    proto.graph.node.append(helper.make_node("Shape", ["c"], ["c_shape"]))
    proto.graph.output.append(helper.make_tensor_value_info("c_shape", TensorProto.INT64, None))
    original, fused, _ = run(proto, ["ort-fused-conv"])
    assert ops(fused) == ops(original)


def test_explain_names_the_refusal():
    original = io.load_proto(conv_model(residual=True, z_shape=(1, 4, 1, 1)))
    _, _, ctx = optimize(original, level=2, target="ort", passes=["ort-fused-conv"], explain={"conv-activation"})
    reasons = [e["reason"] for e in ctx.explanations.values()]
    assert any("provably" in r for r in reasons), reasons
