"""Residual Add (+ bias) + LayerNormalization → com.microsoft SkipLayerNormalization."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from tests.passes.ort_helpers import assert_same_outputs, ops, run

H = 8


def skip_ln_model(x_shape=("batch", "seq", H), skip_shape=("batch", "seq", H), bias=True, sum_out=False):
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((H, H)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.standard_normal(H).astype(np.float32), "b"),
             numpy_helper.from_array((1 + 0.1 * rng.standard_normal(H)).astype(np.float32), "gamma"),
             numpy_helper.from_array(rng.standard_normal(H).astype(np.float32), "beta")]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["mm"])]
    last = "mm"
    if bias:
        nodes.append(helper.make_node("Add", ["mm", "b"], ["mmb"]))
        last = "mmb"
    nodes += [helper.make_node("Add", ["skip", last], ["s"]),
              helper.make_node("LayerNormalization", ["s", "gamma", "beta"], ["y"], epsilon=1e-6)]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if sum_out:
        nodes.append(helper.make_node("Relu", ["s"], ["r"]))
        outputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape)),
                                            helper.make_tensor_value_info("skip", TensorProto.FLOAT, list(skip_shape))],
                              outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_add_bias_add_layernorm_become_one_skip_layernorm():
    original, fused, _ = run(skip_ln_model(), ["ort-skip-layer-norm"])
    assert ops(fused) == {"MatMul": 1, "com.microsoft:SkipLayerNormalization": 1}
    node = fused.graph.nodes("SkipLayerNormalization")[0]
    assert node.inputs[4] == "b" and node.attr("epsilon") == np.float32(1e-6)
    assert_same_outputs(original, fused)


def test_sum_read_elsewhere_comes_out_as_output_3():
    original, fused, _ = run(skip_ln_model(sum_out=True), ["ort-skip-layer-norm"])
    node = fused.graph.nodes("SkipLayerNormalization")[0]
    assert node.outputs[3] == "s"
    assert_same_outputs(original, fused)


def test_supported_broadcast_skip_and_2d():
    original, fused, _ = run(skip_ln_model(skip_shape=(1, "seq", H)), ["ort-skip-layer-norm"])
    assert ops(fused)["com.microsoft:SkipLayerNormalization"] == 1
    assert_same_outputs(original, fused)
    original, fused, _ = run(skip_ln_model(x_shape=("n", H), skip_shape=("n", H), bias=False), ["ort-skip-layer-norm"])
    assert ops(fused)["com.microsoft:SkipLayerNormalization"] == 1
    assert_same_outputs(original, fused)


def test_refuses_unproven_shapes_and_rank_4():
    # the skip's dims are unrelated symbols: the Add might broadcast either way
    _, fused, _ = run(skip_ln_model(skip_shape=("b2", "s2", H)), ["ort-skip-layer-norm"])
    assert "com.microsoft:SkipLayerNormalization" not in ops(fused)
    # rank 4: the kernel takes rank 2 or 3 only
    _, fused, _ = run(skip_ln_model(x_shape=(2, 3, 4, H), skip_shape=(2, 3, 4, H)), ["ort-skip-layer-norm"])
    assert "com.microsoft:SkipLayerNormalization" not in ops(fused)


def test_explain_says_why():
    from graphtool import io
    from graphtool.optimize import optimize
    from graphtool.rewrite.explain import format_explanations

    _, _, ctx = optimize(io.load_proto(skip_ln_model(skip_shape=("other", "seq", H))), target="ort",
                         passes=["ort-skip-layer-norm"], explain=["ort-skip-layer-norm"])
    assert "shapes are not provably equal" in format_explanations(ctx.explanations)
