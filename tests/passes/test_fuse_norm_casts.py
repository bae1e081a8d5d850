"""float16 norms computed in float32 between Casts → the norm in float16."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.passes.ort_helpers import assert_same_outputs, ops, run

H = 16


def fp16_norm(kind="layernorm", exact_weights=True, decomposed=False):
    """x16 → Cast(f32) → norm (f32 weights that came from f16 ones) → Cast(f16), as autocast exports it."""
    rng = np.random.default_rng(0)
    gamma = rng.standard_normal(H).astype(np.float16).astype(np.float32)
    beta = rng.standard_normal(H).astype(np.float16).astype(np.float32)
    if not exact_weights:
        gamma = gamma + np.float32(1e-4)
    inits = [numpy_helper.from_array(gamma, "g"), numpy_helper.from_array(beta, "b"),
             numpy_helper.from_array(np.array([-1], np.int64), "axes"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             numpy_helper.from_array(np.array(1e-5, np.float32), "eps")]
    nodes = [helper.make_node("Cast", ["x"], ["x32"], to=TensorProto.FLOAT)]
    opset = 17
    if kind == "layernorm" and decomposed:
        nodes += [helper.make_node("ReduceMean", ["x32", "axes"], ["mu"], keepdims=1),
                  helper.make_node("Sub", ["x32", "mu"], ["d"]), helper.make_node("Pow", ["d", "two"], ["d2"]),
                  helper.make_node("ReduceMean", ["d2", "axes"], ["var"], keepdims=1),
                  helper.make_node("Add", ["var", "eps"], ["ve"]), helper.make_node("Sqrt", ["ve"], ["sd"]),
                  helper.make_node("Div", ["d", "sd"], ["n"]), helper.make_node("Mul", ["n", "g"], ["ng"]),
                  helper.make_node("Add", ["ng", "b"], ["y32"])]
        opset = 18
    elif kind == "layernorm":
        nodes.append(helper.make_node("LayerNormalization", ["x32", "g", "b"], ["y32"], epsilon=1e-5))
    elif kind == "rms":  # LLaMA's RMSNorm in float32, gamma inside the Casts
        nodes += [helper.make_node("Pow", ["x32", "two"], ["sq"]),
                  helper.make_node("ReduceMean", ["sq", "axes"], ["ms"], keepdims=1),
                  helper.make_node("Add", ["ms", "eps"], ["mse"]), helper.make_node("Sqrt", ["mse"], ["r"]),
                  helper.make_node("Div", ["x32", "r"], ["n"]), helper.make_node("Mul", ["n", "g"], ["y32"])]
        opset = 18
    nodes.append(helper.make_node("Cast", ["y32"], ["y"], to=TensorProto.FLOAT16))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["b", "s", H])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["b", "s", H])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def feeds(seed=1):
    return {"x": (3 * np.random.default_rng(seed).standard_normal((2, 5, H))).astype(np.float16)}


@pytest.mark.parametrize("decomposed", [False, True])
def test_fp16_layernorm_between_casts_becomes_one_fp16_layernorm(decomposed):
    original, fused, _ = run(fp16_norm("layernorm", decomposed=decomposed), level=1, target="onnx")
    assert ops(fused) == {"LayerNormalization": 1}
    assert_same_outputs(original, fused, feeds(), atol=0.0)  # bit-exact on these inputs


def test_fp16_rms_norm_between_casts_becomes_fp16_simplified_layernorm():
    original, fused, _ = run(fp16_norm("rms"), level=2, target="ort")
    assert ops(fused) == {"SimplifiedLayerNormalization": 1}
    assert_same_outputs(original, fused, feeds(), atol=0.0)  # bit-exact on these inputs


def test_fp32_weights_float16_cannot_hold_keep_the_casts():
    original, result, _ = run(fp16_norm("layernorm", exact_weights=False), level=1, target="onnx")
    assert ops(result)["Cast"] == 2
