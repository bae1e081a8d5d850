"""fuse-matmul-add: 2-D MatMul + Add of a Gemm-broadcastable bias → Gemm."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphtool import io
from graphtool.optimize import optimize
from graphtool.verify import verify
from tests.passes.helpers import const, model, vi

PASS = ["fuse-matmul-add"]


def _model(
    a_shape: list | None,
    bias_shape: tuple[int, ...] | None,
    *,
    b_const: bool = True,
    bias_first: bool = False,
    extra_outputs: tuple[str, ...] = (),
    elem: int = TensorProto.FLOAT,
) -> onnx.ModelProto:
    """y = MatMul(a, b) + c, with b [4, 3] and c a constant of ``bias_shape`` (None: a graph input
    of unknown shape)."""
    r = np.random.default_rng(0)
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    inputs = [helper.make_tensor_value_info("a", elem, a_shape)]
    inits = []
    if b_const:
        inits.append(numpy_helper.from_array(r.standard_normal((4, 3)).astype(dtype), "b"))
    else:
        inputs.append(helper.make_tensor_value_info("b", elem, [4, 3]))
    if bias_shape is None:
        inputs.append(helper.make_tensor_value_info("c", elem, None))
    else:
        inits.append(numpy_helper.from_array(r.standard_normal(bias_shape).astype(dtype), "c"))
    add_inputs = ["c", "p"] if bias_first else ["p", "c"]
    nodes = [helper.make_node("MatMul", ["a", "b"], ["p"], name="/fc/MatMul"),
             helper.make_node("Add", add_inputs, ["y"], name="/fc/Add"),
             helper.make_node("Relu", ["y"], ["z"], name="relu")]
    outputs = [helper.make_tensor_value_info(o, elem, None) for o in ("z", *extra_outputs)]
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _ops(model) -> list[str]:
    return [n.op_type for n in model.graph.nodes()]


@pytest.mark.parametrize("bias_shape", [(3,), (1, 3), (5, 1), (5, 3), (), (1,), (1, 1)])
def test_2d_matmul_add_becomes_gemm(bias_shape):
    original = io.load_proto(_model([5, 4], bias_shape))
    optimized, report, ctx = optimize(original, passes=PASS)
    assert _ops(optimized) == ["Gemm", "Relu"]
    gemm = optimized.graph.nodes("Gemm")[0]
    assert gemm.inputs == ["a", "b", "c"] and gemm.outputs == ["y"] and gemm.name == "/fc/Gemm"
    assert ctx.provenance["/fc/Gemm"] == ["/fc/MatMul", "/fc/Add"]
    assert report.passes["fuse-matmul-add"].stats["fused"] == 1
    result = verify(original, optimized)
    assert result.ok, result.summary()


def test_symbolic_m_and_bias_first_and_runtime_b():
    original = io.load_proto(_model(["M", 4], (3,), b_const=False, bias_first=True))
    optimized, _, _ = optimize(original, passes=PASS)
    assert _ops(optimized) == ["Gemm", "Relu"]
    assert verify(original, optimized, input_shapes={"a": [7, 4]}).ok


def test_double_is_fused_and_the_output_name_survives_as_graph_output():
    proto = _model([5, 4], (3,), elem=TensorProto.DOUBLE)
    proto.graph.output.append(helper.make_tensor_value_info("y", TensorProto.DOUBLE, None))
    original = io.load_proto(proto)
    optimized, _, _ = optimize(original, passes=PASS)
    assert optimized.graph.producer("y").op_type == "Gemm" and "y" in optimized.graph.outputs
    assert verify(original, optimized).ok


@pytest.mark.parametrize("a_shape", [[2, 5, 4], ["B", "S", 4], [4], None])
def test_refuses_when_a_is_not_known_to_be_2d(a_shape):
    original = io.load_proto(_model(a_shape, (3,)))
    optimized, report, _ = optimize(original, passes=PASS)
    assert _ops(optimized) == ["MatMul", "Add", "Relu"]
    assert report.passes["fuse-matmul-add"].stats["fused"] == 0


@pytest.mark.parametrize("a_shape, bias_shape", [
    ([1, 4], (5, 3)),      # the Add broadcasts the product up to [5, 3]: Gemm cannot
    (["M", 4], (5, 3)),    # M unknown: cannot prove 5 == M
    ([5, 4], (2, 5, 3)),   # rank 3 bias grows the result
    ([5, 4], None),        # bias of unknown shape
])
def test_refuses_bias_that_does_not_broadcast_unidirectionally(a_shape, bias_shape):
    original = io.load_proto(_model(a_shape, bias_shape))
    optimized, _, _ = optimize(original, passes=PASS)
    assert _ops(optimized) == ["MatMul", "Add", "Relu"]


def test_refuses_when_the_product_is_also_a_graph_output():
    original = io.load_proto(_model([5, 4], (3,), extra_outputs=("p",)))
    optimized, _, _ = optimize(original, passes=PASS)
    assert _ops(optimized) == ["MatMul", "Add", "Relu"]


def test_refuses_integer_matmul():
    original = io.load_proto(_model([5, 4], (3,), elem=TensorProto.INT64))
    optimized, _, _ = optimize(original, passes=PASS)
    assert _ops(optimized) == ["MatMul", "Add", "Relu"]


def test_flatten_output_is_rank_two_without_shape_inference():
    # paddle2onnx classifiers: x[-1, C, ?, ?] → ... → Flatten → MatMul → Add, no value_info
    rng = np.random.default_rng(1)
    m = model([helper.make_node("Flatten", ["x"], ["f"], axis=1), helper.make_node("MatMul", ["f", "w"], ["p"]),
               helper.make_node("Add", ["p", "b"], ["y"])],
              [vi("x", ["n", 2, "h", "w"])], [vi("y", ["n", 3])],
              [const("w", rng.standard_normal((8, 3)).astype(np.float32)),
               const("b", rng.standard_normal(3).astype(np.float32))])
    out, _, _ = optimize(m, passes=["fuse-matmul-add"])
    assert [n.op_type for n in out.graph.topological_order()] == ["Flatten", "Gemm"]
    assert verify(m, out, input_shapes={"x": [2, 2, 2, 2]}).ok
