"""Conv (+ same-shaped Add) (+ activation) → com.microsoft FusedConv."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

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
