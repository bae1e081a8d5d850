"""infer-shapes: static inferred shapes become value_info, so shape-proving passes can fire."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from graphtool import io
from graphtool.optimize import optimize
from graphtool.verify import verify


def _mlp(batch) -> object:
    """x[batch,8] → Softmax → MatMul(W) → Add(b): no value_info, only the input's declared shape
    (Softmax: an op whose output rank passes/_types does not walk through)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    nodes = [helper.make_node("Softmax", ["x"], ["r"]), helper.make_node("MatMul", ["r", "w"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w, b])
    return io.load_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def _ops(model) -> list[str]:
    return [n.op_type for n in model.graph.topological_order()]


def test_static_shapes_let_matmul_add_become_gemm():
    original = _mlp(3)
    without, _, _ = optimize(original, skip=["infer-shapes"])
    # fuse-matmul-add asks the shape oracle itself (issue 34): rank 2 without recorded value_info too
    assert _ops(without) == ["Softmax", "Gemm"]
    assert verify(original, without).ok
    optimized, report, _ = optimize(original)
    assert _ops(optimized) == ["Softmax", "Gemm"]
    assert report.passes["infer-shapes"].stats["recorded"] >= 1
    assert optimized.graph.declared_shape("r") == [3, 8]
    assert verify(original, optimized).ok


def test_symbolic_batch_still_becomes_gemm():
    original = _mlp("N")  # nothing recorded, but the oracle proves 'r' is [N, 8]
    optimized, _, _ = optimize(original)
    assert _ops(optimized) == ["Softmax", "Gemm"]
    assert verify(original, optimized).ok


def test_symbolic_shapes_are_not_recorded():
    original = _mlp("N")
    optimized, report, _ = optimize(original, passes=["infer-shapes"])
    assert optimized.graph.declared_shape("r") is None and "recorded" not in report.passes["infer-shapes"].stats
