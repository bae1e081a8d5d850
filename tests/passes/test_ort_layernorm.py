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


def inputs_model(norm="LayerNormalization", bias=None, skip_first=False):
    """onnxscript's skip_normalization_unit_test shapes: gamma, beta and bias are graph inputs;
    the bias is added before the residual sum ("pre") or after it ("post")."""
    names = ["x", "skip", "gamma"] + (["beta"] if norm == "LayerNormalization" else []) + (["bias"] if bias else [])
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 5, H] if n in ("x", "skip") else [H])
              for n in names]
    pair = ["skip", "x"] if skip_first else ["x", "skip"]
    if bias == "pre":
        nodes = [helper.make_node("Add", ["x", "bias"], ["xb"]), helper.make_node("Add", ["xb", "skip"], ["s"])]
    elif bias == "post":
        nodes = [helper.make_node("Add", pair, ["xs"]), helper.make_node("Add", ["xs", "bias"], ["s"])]
    else:
        nodes = [helper.make_node("Add", pair, ["s"])]
    extra = {"domain": ""} if norm == "LayerNormalization" else {}
    nodes.append(helper.make_node(norm, ["s", "gamma"] + (["beta"] if norm == "LayerNormalization" else []), ["y"],
                                  epsilon=1e-6, **extra))
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def input_feeds(proto):
    rng = np.random.default_rng(5)
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in proto.graph.input}


def test_gamma_beta_and_bias_may_be_inputs_and_the_bias_added_after_the_sum():
    for norm, fused_op in (("LayerNormalization", "SkipLayerNormalization"),
                           ("SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization")):
        for bias, skip_first in ((None, False), (None, True), ("pre", False), ("post", False), ("post", True)):
            proto = inputs_model(norm, bias, skip_first)
            original, fused, _ = run(proto, ["ort-skip-layer-norm"])
            assert ops(fused) == {f"com.microsoft:{fused_op}": 1}, (norm, bias, skip_first)
            node = fused.graph.nodes(fused_op)[0]
            assert (node.inputs[-1] == "bias") == bool(bias)
            assert_same_outputs(original, fused, input_feeds(proto))


def test_a_bias_that_is_not_one_vector_of_the_hidden_size_stays_an_add():
    proto = inputs_model(bias="post")
    proto.graph.input[-1].type.tensor_type.shape.dim[0].dim_value = 1  # [1]: broadcasts, not a [H] bias
    _, fused, _ = run(proto, ["ort-skip-layer-norm"])
    assert "com.microsoft:SkipLayerNormalization" not in ops(fused)
