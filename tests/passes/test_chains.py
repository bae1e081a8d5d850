"""merge-chains: consecutive Transpose / Reshape / Flatten / Squeeze / Unsqueeze pairs."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from graphtool import io
from graphtool.optimize import optimize
from graphtool.runtime import make_session
from graphtool.verify import verify
from tests.passes.helpers import const, model, ops, runner, vi

PASS = "merge-chains"
WITH_DCE = [PASS, "dead-code-elimination"]
run = runner(WITH_DCE)


# 1. Transpose ----------------------------------------------------------------------------------


def test_transpose_pair_becomes_one_composed_transpose():
    m = model([helper.make_node("Transpose", ["x"], ["t"], perm=[1, 2, 0]),
               helper.make_node("Transpose", ["t"], ["y"], perm=[0, 2, 1])],
              [vi("x", [2, 3, 4])], [vi("y", [3, 2, 4])])
    out, _ = run(m)
    assert ops(out.graph) == ["Transpose"]
    node = out.graph.producer("y")
    assert node.inputs == ["x"] and node.attr("perm") == [1, 0, 2]


def test_inverse_transposes_vanish_and_output_name_is_kept():
    m = model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Transpose", ["r"], ["t"], perm=[2, 0, 1]),
               helper.make_node("Transpose", ["t"], ["y"], perm=[1, 2, 0])],
              [vi("x", [2, 3, 4])], [vi("y", [2, 3, 4])])
    out, _ = run(m)
    assert ops(out.graph) == ["Relu"] and out.graph.producer("y").op_type == "Relu"


def test_default_perms_use_the_known_rank():
    m = model([helper.make_node("Transpose", ["x"], ["t"]), helper.make_node("Transpose", ["t"], ["u"]),
               helper.make_node("Relu", ["u"], ["y"])],  # reversed twice
              [vi("x", [2, 3, 4])], [vi("y", [2, 3, 4])])
    out, _ = run(m)
    assert ops(out.graph) == ["Relu"] and out.graph.producer("y").inputs == ["x"]


def test_transpose_chain_with_shared_first_keeps_the_first():
    m = model([helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]),
               helper.make_node("Transpose", ["t"], ["u"], perm=[1, 0]),
               helper.make_node("Add", ["u", "x"], ["y"])],
              [vi("x", [2, 2])], [vi("y", [2, 2]), vi("t", [2, 2])])
    out, _ = run(m)
    assert ops(out.graph) == ["Transpose", "Add"]
    assert out.graph.producer("y").inputs == ["x", "x"]


def test_transpose_without_perms_and_unknown_rank_is_kept():
    m = model([helper.make_node("Reshape", ["x", "s"], ["h"]), helper.make_node("Transpose", ["h"], ["t"]),
               helper.make_node("Transpose", ["t"], ["y"])],
              [vi("x", [6]), vi("s", [2], TensorProto.INT64)], [vi("y", ["a", "b"])])
    out, report = optimize(m, passes=[PASS])[:2]
    assert ops(out.graph) == ["Reshape", "Transpose", "Transpose"]
    assert not report.passes[PASS].changed_runs


# 2. Reshape / Flatten --------------------------------------------------------------------------


def test_reshape_pair_skips_the_intermediate_and_resolves_copy_dims():
    m = model([helper.make_node("Reshape", ["x", "s1"], ["r"]), helper.make_node("Reshape", ["r", "s2"], ["y"])],
              [vi("x", ["N", 6])], [vi("y", ["N", 3, 2])],
              [const("s1", np.array([0, 3, 2], np.int64)), const("s2", np.array([0, 0, -1], np.int64))])
    out, _ = run(m)
    assert ops(out.graph) == ["Reshape"]
    node = out.graph.producer("y")
    assert node.inputs[0] == "x"
    np.testing.assert_array_equal(out.graph.const(node.inputs[1]), [0, 3, -1])  # 0 copied from s1, 3 resolved


def test_reshape_after_flatten_and_flatten_after_reshape():
    m = model([helper.make_node("Flatten", ["x"], ["f"], axis=2), helper.make_node("Reshape", ["f", "s"], ["r"]),
               helper.make_node("Reshape", ["r", "s3"], ["q"]), helper.make_node("Flatten", ["q"], ["y"], axis=2)],
              [vi("x", [2, 3, 4])], [vi("y", [6, 4])],
              [const("s", np.array([4, -1], np.int64)), const("s3", np.array([2, 3, 4], np.int64))])
    out, _ = run(m)
    assert ops(out.graph) == ["Reshape"]
    node = out.graph.producer("y")
    assert node.inputs[0] == "x"
    np.testing.assert_array_equal(out.graph.const(node.inputs[1]), [6, -1])


def test_reshape_after_unsqueeze_and_squeeze_skips_them():
    """tf2onnx's Conv1D: Reshape → Unsqueeze → Reshape (basic-pitch has 37 of them)."""
    m = model([helper.make_node("Reshape", ["x", "s1"], ["r"]), helper.make_node("Unsqueeze", ["r", "ax"], ["u"]),
               helper.make_node("Reshape", ["u", "s2"], ["a"]),
               helper.make_node("Squeeze", ["x", "ax0"], ["q"]), helper.make_node("Reshape", ["q", "s3"], ["b"])],
              [vi("x", [1, 6, 4])], [vi("a", [2, 1, 1, 12]), vi("b", [6, 2, 2])],
              [const("s1", np.array([-1, 12, 1], np.int64)), const("ax", np.array([-3], np.int64)),
               const("s2", np.array([-1, 1, 1, 12], np.int64)), const("ax0", np.array([0], np.int64)),
               const("s3", np.array([0, 2, -1], np.int64))], opset=13)
    out, _ = run(m)  # b's 0 copies a dim of the Squeeze's output: unknown without shapes, so that pair stays
    assert ops(out.graph) == ["Reshape", "Squeeze", "Reshape"] and out.graph.producer("a").inputs[0] == "x"
    out, _ = optimize(m, passes=["infer-shapes", *WITH_DCE])[:2]
    assert ops(out.graph) == ["Reshape", "Reshape"]
    assert out.graph.producer("a").inputs[0] == "x" and out.graph.producer("b").inputs[0] == "x"
    np.testing.assert_array_equal(out.graph.const(out.graph.producer("b").inputs[1]), [6, 2, -1])  # 0: q's dim 0
    assert verify(m, out, feeds={"x": np.arange(24, dtype=np.float32).reshape(1, 6, 4)}).ok


def test_reshape_pair_with_dynamic_or_unresolvable_shape_is_kept():
    m = model([helper.make_node("Reshape", ["x", "s1"], ["r"]), helper.make_node("Reshape", ["r", "dyn"], ["a"]),
               helper.make_node("Reshape", ["x", "s1"], ["r2"]), helper.make_node("Reshape", ["r2", "s0"], ["b"])],
              [vi("x", ["N", 6]), vi("dyn", [2], TensorProto.INT64)], [vi("a", ["p", "q"]), vi("b", ["p", "q", "r"])],
              # s0's leading 0 copies r2's dim 0, which s1 inferred (-1): unknown without shapes
              [const("s1", np.array([-1, 3], np.int64)), const("s0", np.array([0, 3, 1], np.int64))])
    out, report = optimize(m, passes=[PASS])[:2]
    assert ops(out.graph) == ops(m.graph)
    assert not report.passes[PASS].changed_runs
    feeds = {"x": np.ones((2, 6), np.float32), "dyn": np.array([3, 4], np.int64)}
    assert verify(m, out, feeds=feeds).ok


# 4. Squeeze / Unsqueeze ------------------------------------------------------------------------


@pytest.mark.parametrize("opset", [11, 13])
def test_unsqueeze_chain_combines_axes(opset):
    if opset >= 13:
        nodes = [helper.make_node("Unsqueeze", ["x", "a1"], ["u"]), helper.make_node("Unsqueeze", ["u", "a2"], ["y"])]
        inits = [const("a1", np.array([0, -1], np.int64)), const("a2", np.array([1], np.int64))]
    else:
        nodes = [helper.make_node("Unsqueeze", ["x"], ["u"], axes=[0, -1]), helper.make_node("Unsqueeze", ["u"], ["y"], axes=[1])]
        inits = []
    m = model(nodes, [vi("x", [2, 3])], [vi("y", [1, 1, 2, 3, 1])], inits, opset=opset)
    out, _ = run(m)
    assert ops(out.graph) == ["Unsqueeze"]
    node = out.graph.producer("y")
    axes = node.attr("axes") if opset < 13 else list(out.graph.const(node.inputs[1]))
    assert node.inputs[0] == "x" and list(axes) == [0, 1, 4]


def test_squeeze_chain_combines_axes():
    m = model([helper.make_node("Squeeze", ["x", "a1"], ["s"]), helper.make_node("Squeeze", ["s", "a2"], ["y"])],
              [vi("x", [1, 2, 1, 3, 1])], [vi("y", [2, 3])],
              [const("a1", np.array([2], np.int64)), const("a2", np.array([0, -1], np.int64))])
    out, _ = run(m)
    assert ops(out.graph) == ["Squeeze"]
    assert list(out.graph.const(out.graph.producer("y").inputs[1])) == [0, 2, 4]


def test_squeeze_without_axes_is_kept():
    m = model([helper.make_node("Squeeze", ["x", "a"], ["s"]), helper.make_node("Squeeze", ["s"], ["y"])],
              [vi("x", [1, 2, 1])], [vi("y", [2])], [const("a", np.array([0], np.int64))])
    out, _, _ = optimize(m, passes=[PASS])
    assert ops(out.graph) == ["Squeeze", "Squeeze"]


def test_merge_inside_a_function_body_adds_a_constant_op_not_an_initializer():
    fn = helper.make_function(
        "custom", "Twist", ["X"], ["Y"],
        [helper.make_node("Constant", [], ["s1"], value=const("s1v", np.array([3, 2], np.int64))),
         helper.make_node("Constant", [], ["s2"], value=const("s2v", np.array([0, 0], np.int64))),
         helper.make_node("Reshape", ["X", "s1"], ["r"]), helper.make_node("Reshape", ["r", "s2"], ["Y"])],
        opset_imports=[helper.make_opsetid("", 17)])
    graph = helper.make_graph([helper.make_node("Twist", ["x"], ["y"], domain="custom")], "g",
                              [vi("x", [2, 3])], [vi("y", [3, 2])])
    p = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("custom", 1)],
                          functions=[fn])
    p.ir_version = 8
    m = io.load_proto(p)
    out, _ = run(m)
    body = out.functions[0].body
    assert ops(body) == ["Constant", "Reshape"] and body.initializers == {}
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(make_session(out).run(None, {"x": x})[0], x.reshape(3, 2))


def test_merge_in_an_ir3_model_lists_the_new_initializer_as_an_input():
    """IR < 4 wants every initializer listed as a graph input (and Constant-1 is float-only)."""
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "s1"], ["r"]), helper.make_node("Reshape", ["r", "s2"], ["y"])], "g",
        [vi("x", [2, 6]), vi("s1", [3], TensorProto.INT64), vi("s2", [2], TensorProto.INT64)], [vi("y", [2, 6])],
        [const("s1", np.array([2, 3, 2], np.int64)), const("s2", np.array([0, -1], np.int64))])
    p = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 8)])
    p.ir_version = 3
    m = io.load_proto(p)
    out, _ = run(m)
    assert ops(out.graph) == ["Reshape"]
    node = out.graph.producer("y")
    assert node.inputs[0] == "x" and list(out.graph.const(node.inputs[1])) == [2, -1]
    assert set(out.graph.initializers) <= set(out.graph.inputs)


# 5. Slice pairs ------------------------------------------------------------------------------


def _slice(x, out, starts, ends, axes, steps, prefix):
    inits = [const(f"{prefix}_{k}", np.array(v, np.int64)) for k, v in
             (("s", starts), ("e", ends), ("a", axes), ("p", steps))]
    node = helper.make_node("Slice", [x, *(i.name for i in inits)], [out])
    return node, inits


def test_slices_on_disjoint_axes_merge_into_one():
    # the STFT of torch exports: channels [0, 129), then every other frame from 1
    n1, i1 = _slice("x", "a", [0], [129], [1], [1], "one")
    n2, i2 = _slice("a", "b", [1], [2**63 - 1], [2], [2], "two")
    m = model([n1, n2, helper.make_node("Relu", ["b"], ["y"])], [vi("x", [1, 258, "t"])], [vi("y", [1, 129, "u"])],
              i1 + i2)
    out, report = run(m, feeds={"x": np.random.default_rng(0).standard_normal((1, 258, 9)).astype(np.float32)})
    assert ops(out) == ["Slice", "Relu"]
    assert report.passes[PASS].stats == {"Slice": 1}


def test_slices_on_the_same_axis_stay():
    n1, i1 = _slice("x", "a", [0], [6], [0], [1], "one")
    n2, i2 = _slice("a", "b", [1], [4], [-2], [1], "two")  # axis -2 of a rank-2 x is axis 0: shared
    m = model([n1, n2], [vi("x", [8, 3])], [vi("b", [3, 3])], i1 + i2)
    out, report = run(m)
    assert ops(out) == ["Slice", "Slice"] and report.passes[PASS].changed_runs == 0


def test_unsqueeze_or_squeeze_after_a_constant_reshape_becomes_one_reshape():
    """tf2onnx: Reshape → ExpandDims (Unsqueeze) before a Concat; a 0 in the target refuses."""
    m = model([helper.make_node("Reshape", ["x", "s"], ["r"]), helper.make_node("Unsqueeze", ["r", "ax"], ["a"]),
               helper.make_node("Reshape", ["x", "s1"], ["r1"]), helper.make_node("Squeeze", ["r1", "ax1"], ["b"]),
               helper.make_node("Reshape", ["x", "s0"], ["r0"]), helper.make_node("Unsqueeze", ["r0", "ax"], ["c"])],
              [vi("x", [2, 3, 4])], [vi("a", [2, 12, 1]), vi("b", [6, 4]), vi("c", [2, 12, 1])],
              [const("s", np.array([-1, 12], np.int64)), const("ax", np.array([-1], np.int64)),
               const("s1", np.array([6, 1, -1], np.int64)), const("ax1", np.array([1], np.int64)),
               const("s0", np.array([0, -1], np.int64))], opset=13)
    out, _ = run(m)
    assert ops(out.graph) == ["Reshape", "Reshape", "Reshape", "Unsqueeze"]
    np.testing.assert_array_equal(out.graph.const(out.graph.producer("a").inputs[1]), [-1, 12, 1])
    np.testing.assert_array_equal(out.graph.const(out.graph.producer("b").inputs[1]), [6, -1])
    assert out.graph.producer("c").op_type == "Unsqueeze"
    assert verify(m, out, feeds={"x": np.arange(24, dtype=np.float32).reshape(2, 3, 4)}).ok


def test_nested_concats_on_one_axis_become_one():
    m = model([helper.make_node("Concat", ["x", "x"], ["c1"], axis=2), helper.make_node("Concat", ["c1", "x"], ["c2"], axis=-1),
               helper.make_node("Concat", ["x", "c2"], ["y"], axis=2),
               helper.make_node("Concat", ["x", "x"], ["d1"], axis=1), helper.make_node("Concat", ["d1", "d1"], ["z"], axis=1)],
              [vi("x", [2, 3, 4])], [vi("y", [2, 3, 16]), vi("z", [2, 12, 4])])
    out, _ = run(m)
    assert ops(out.graph) == ["Concat", "Concat", "Concat"]  # d1 has two readers (z reads it twice): kept
    assert out.graph.producer("y").inputs == ["x", "x", "x", "x"]
    assert verify(m, out, feeds={"x": np.arange(24, dtype=np.float32).reshape(2, 3, 4)}).ok
