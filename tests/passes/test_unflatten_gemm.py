"""Reshape → Gemm → Reshape around a 3-D activation ⇒ MatMul + Add (standard ops)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from tests.passes.ort_helpers import assert_same_outputs, ops, run

K, N = 8, 12


def conv1d_model(back_shape_from_x=True, trans_b=0, alpha=1.0, flat=(-1, K)):
    """HF GPT-2's Conv1D: view(-1, K) → addmm → view(*x.shape[:-1], N)."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((N, K) if trans_b else (K, N)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(rng.standard_normal(N).astype(np.float32), "b"),
             numpy_helper.from_array(np.array(flat, np.int64), "flat"),
             numpy_helper.from_array(np.array([N], np.int64), "n")]
    nodes = [helper.make_node("Reshape", ["x", "flat"], ["x2"]),
             helper.make_node("Gemm", ["x2", "W", "b"], ["g"], transB=trans_b, alpha=alpha)]
    if back_shape_from_x:
        nodes += [helper.make_node("Shape", ["x"], ["lead"], start=0, end=-1),
                  helper.make_node("Concat", ["lead", "n"], ["back"], axis=0)]
    else:  # the leading dims of some other tensor
        nodes += [helper.make_node("Shape", ["other"], ["lead"], start=0, end=-1),
                  helper.make_node("Concat", ["lead", "n"], ["back"], axis=0)]
    nodes.append(helper.make_node("Reshape", ["g", "back"], ["y"]))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", K])]
    if not back_shape_from_x:
        inputs.append(helper.make_tensor_value_info("other", TensorProto.FLOAT, ["b2", "s2", K]))
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_flattened_gemm_becomes_3d_matmul_add():
    original, result, _ = run(conv1d_model(), ["unflatten-gemm", "dead-code-elimination"], target="onnx")
    assert ops(result) == {"MatMul": 1, "Add": 1}
    assert_same_outputs(original, result)


def test_trans_b_weight_is_transposed_once():
    original, result, _ = run(conv1d_model(trans_b=1), ["unflatten-gemm", "dead-code-elimination"], target="onnx")
    assert ops(result) == {"MatMul": 1, "Add": 1}
    assert_same_outputs(original, result)


def test_refuses_alpha_foreign_shape_and_partial_flatten():
    for kwargs in ({"alpha": 0.5}, {"back_shape_from_x": False}, {"flat": (6, -1)}):
        original, result, _ = run(conv1d_model(**kwargs), ["unflatten-gemm"], target="onnx")
        assert ops(result) == ops(original), kwargs
