"""Bias Adds and a query scaling Mul in front of com.microsoft MultiHeadAttention → its bias input and scale."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.passes.ort_helpers import assert_same_outputs, ops, run

B, S, D, N = 2, 5, 16, 4


def mha_model(biases=("q", "k", "v"), const_bias=False, scale=None, scale_attr=None, existing_bias=False):
    """onnxscript's mha_bias_test / mha_scale_test shapes: projections as graph inputs [B, S, D]."""
    rng = np.random.default_rng(0)
    f = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info(f"{t}_in", f, ["B", "S", D]) for t in "qkv"]
    inits, nodes, names = [], [], []
    for t in "qkv":
        name = f"{t}_in"
        if t in biases:
            if const_bias:
                inits.append(numpy_helper.from_array(rng.standard_normal(D).astype(np.float32), f"{t}_bias"))
            else:
                inputs.append(helper.make_tensor_value_info(f"{t}_bias", f, [D]))
            nodes.append(helper.make_node("Add", [name, f"{t}_bias"], [f"{t}_b"]))
            name = f"{t}_b"
        names.append(name)
    if scale is not None:
        inits.append(numpy_helper.from_array(np.array([scale], np.float32), "c"))
        nodes.append(helper.make_node("Mul", [names[0], "c"], ["q_scaled"]))
        names[0] = "q_scaled"
    if existing_bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(3 * D).astype(np.float32), "qkv_bias"))
        names.append("qkv_bias")
    attrs = {"num_heads": N} | ({"scale": scale_attr} if scale_attr else {})
    nodes.append(helper.make_node("MultiHeadAttention", names, ["y"], domain="com.microsoft", **attrs))
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", f, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])


def feeds(proto):
    rng = np.random.default_rng(1)
    out = {}
    for i in proto.graph.input:
        shape = [B if d.dim_param == "B" else S if d.dim_param == "S" else d.dim_value for d in i.type.tensor_type.shape.dim]
        out[i.name] = rng.standard_normal(shape).astype(np.float32)
    return out


@pytest.mark.parametrize("biases,const_bias", [("qkv", False), ("q", False), ("v", False), ("qk", True), ("kv", True)])
def test_bias_adds_go_into_the_bias_input(biases, const_bias):
    proto = mha_model(biases, const_bias)
    original, fused, _ = run(proto, ["ort-mha-inputs", "dead-code-elimination"])
    counts = ops(fused)
    assert counts["com.microsoft:MultiHeadAttention"] == 1 and "Add" not in counts
    assert ("Concat" in counts) == (not const_bias)  # constant biases become one [3D] initializer
    mha = fused.graph.nodes("MultiHeadAttention")[0]
    assert mha.inputs[:3] == ["q_in", "k_in", "v_in"] and mha.inputs[3]
    assert_same_outputs(original, fused, feeds(proto))


@pytest.mark.parametrize("scale,scale_attr", [(0.25, None), (2.0, None), (0.3, 0.1)])
def test_query_scaling_goes_into_the_scale(scale, scale_attr):
    proto = mha_model(biases=(), scale=scale, scale_attr=scale_attr)
    original, fused, _ = run(proto, ["ort-mha-inputs"])
    assert ops(fused) == {"com.microsoft:MultiHeadAttention": 1}
    expected = scale * (scale_attr or 1 / np.sqrt(D // N))
    assert fused.graph.nodes("MultiHeadAttention")[0].attr("scale") == pytest.approx(expected, rel=1e-6)
    assert_same_outputs(original, fused, feeds(proto))


def test_scaling_before_an_op_that_adds_its_own_bias_is_refused():
    """MHA adds its bias input to the (already scaled) query: c·q + b is not c·(q + b)."""
    _, fused, _ = run(mha_model(biases=(), scale=0.5, existing_bias=True), ["ort-mha-inputs"])
    assert ops(fused)["Mul"] == 1
