"""Gemm + activation → FusedGemm; MatMul with Transposes / scales → FusedMatMul."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.passes.ort_helpers import assert_same_outputs, ops, run


def gemm_model(act, attrs=None):
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((6, 5)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), "b")]
    nodes = [helper.make_node("Gemm", ["x", "W", "b"], ["g"]), helper.make_node(act, ["g"], ["y"], **(attrs or {}))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("act,attrs", [("Relu", {}), ("LeakyRelu", {"alpha": 0.3}), ("Elu", {"alpha": 0.7}),
                                       ("HardSigmoid", {"alpha": 0.3, "beta": 0.6}), ("Tanh", {})])
def test_gemm_activation(act, attrs):
    original, fused, _ = run(gemm_model(act, attrs), ["ort-fused-gemm"])
    assert ops(fused) == {"com.microsoft:FusedGemm": 1}
    node = fused.graph.nodes("FusedGemm")[0]
    assert node.attr("activation") == act
    for key, value in attrs.items():
        assert node.attr(f"activation_{key}") == pytest.approx(value)
    assert_same_outputs(original, fused)


def test_gemm_with_other_op_after_stays():
    original, fused, _ = run(gemm_model("Exp"), ["ort-fused-gemm"])
    assert ops(fused) == ops(original)


def matmul_model(trans_a=False, trans_b=False, out_scale=None, in_scale=None, perm_b=(0, 1, 3, 2)):
    inputs = [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3, 5, 4] if trans_a else [2, 3, 4, 5]),
              helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 3, 6, 5] if trans_b else [2, 3, 5, 6])]
    inits, nodes = [], []
    a, b = "a", "b"
    if in_scale is not None:
        inits.append(numpy_helper.from_array(np.array(in_scale, np.float32), "ia"))
        nodes.append(helper.make_node("Mul", [a, "ia"], ["as"]))
        a = "as"
    if trans_a:
        nodes.append(helper.make_node("Transpose", [a], ["at"], perm=[0, 1, 3, 2]))
        a = "at"
    if trans_b:
        nodes.append(helper.make_node("Transpose", [b], ["bt"], perm=list(perm_b)))
        b = "bt"
    out = "y" if out_scale is None else "mm"
    nodes.append(helper.make_node("MatMul", [a, b], [out]))
    if out_scale is not None:
        inits.append(numpy_helper.from_array(np.array(out_scale, np.float32), "c"))
        nodes.append(helper.make_node("Div", [out, "c"], ["y"]))
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("kwargs,alpha", [
    ({"trans_b": True}, 1.0),
    ({"trans_a": True, "out_scale": 4.0}, 0.25),
    ({"in_scale": 0.5, "trans_b": True, "out_scale": 2.0}, 0.25),
])
def test_fused_matmul(kwargs, alpha):
    original, fused, _ = run(matmul_model(**kwargs), ["ort-fused-matmul"])
    assert ops(fused) == {"com.microsoft:FusedMatMul": 1}
    node = fused.graph.nodes("FusedMatMul")[0]
    assert node.attr("alpha") == pytest.approx(alpha)
    assert node.attr("transA", 0) == int(kwargs.get("trans_a", False))
    assert node.attr("transB", 0) == int(kwargs.get("trans_b", False))
    assert_same_outputs(original, fused)


def test_transpose_of_batch_axes_is_not_trans_b():
    """perm (1, 0, 3, 2) also swaps batch axes: FusedMatMul's transB would not."""
    proto = matmul_model(trans_b=True, perm_b=(1, 0, 3, 2))
    proto.graph.input[1].CopyFrom(helper.make_tensor_value_info("b", TensorProto.FLOAT, [3, 2, 6, 5]))
    original, fused, _ = run(proto, ["ort-fused-matmul"])
    assert ops(fused) == ops(original)


def test_gemm_without_c_and_selu_defaults():
    proto = gemm_model("Selu")
    del proto.graph.node[0].input[2]
    original, fused, _ = run(proto, ["ort-fused-gemm"])
    node = fused.graph.nodes("FusedGemm")[0]
    assert len(node.inputs) == 2 and node.attr("activation_gamma") == pytest.approx(1.0507010221)
    assert_same_outputs(original, fused)


def test_gemm_read_by_a_shape_stays():
    proto = gemm_model("Relu")
    proto.graph.node.append(helper.make_node("Shape", ["g"], ["g_shape"]))
    proto.graph.output.append(helper.make_tensor_value_info("g_shape", TensorProto.INT64, None))
    original, fused, _ = run(proto, ["ort-fused-gemm"])
    assert ops(fused) == ops(original)


def test_a_batch_axes_transpose_stays_outside_but_the_scale_goes_in():
    proto = matmul_model(trans_b=True, perm_b=(1, 0, 3, 2), out_scale=2.0, in_scale=3.0)
    proto.graph.input[1].CopyFrom(helper.make_tensor_value_info("b", TensorProto.FLOAT, [3, 2, 6, 5]))
    original, fused, _ = run(proto, ["ort-fused-matmul"])
    assert ops(fused) == {"com.microsoft:FusedMatMul": 1, "Transpose": 1}
    node = fused.graph.nodes("FusedMatMul")[0]
    assert node.attr("alpha") == pytest.approx(1.5) and node.attr("transB", 0) == 0
    assert_same_outputs(original, fused)


def test_zero_divisor_leaves_the_div_but_takes_the_transpose():
    original, fused, _ = run(matmul_model(trans_a=True, out_scale=0.0), ["ort-fused-matmul"])
    assert ops(fused) == {"com.microsoft:FusedMatMul": 1, "Div": 1}
    assert fused.graph.nodes("FusedMatMul")[0].attr("transA") == 1


def test_plain_matmul_or_a_scale_too_big_to_drop_stays():
    original, fused, _ = run(matmul_model(), ["ort-fused-matmul"])
    assert ops(fused) == ops(original)
    proto = matmul_model(in_scale=np.full((1, 1, 1, 1, 1), 2.0))  # rank 5 > A's: it broadcasts A up
    original, fused, _ = run(proto, ["ort-fused-matmul"])
    assert ops(fused) == ops(original)
