"""eliminate-no-ops: each numbered case of the pass on the smallest graph that shows it."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from graphtool import io
from graphtool.optimize import optimize
from graphtool.runtime import make_session
from graphtool.verify import verify
from tests.conftest import FIXTURES
from tests.passes.helpers import F, const, model, ops, runner, vi

PASS = "eliminate-no-ops"
run = runner([PASS])


# 1. Identity ------------------------------------------------------------------------------------


def test_identity_chain_removed_and_output_name_kept():
    m = model(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Identity", ["r"], ["i1"]),
         helper.make_node("Identity", ["i1"], ["y"])],
        [vi("x", [2, 3])], [vi("y", [2, 3])])
    out, report = run(m)
    assert ops(out) == ["Relu"]
    assert out.graph.producer("y").op_type == "Relu" and list(out.graph.outputs) == ["y"]
    assert report.passes[PASS].stats["Identity"] == 2


def test_identity_from_graph_input_to_graph_output_is_kept():
    """Case 12: both names are interface; the op must stay."""
    m = model([helper.make_node("Identity", ["x"], ["y"])], [vi("x", [2])], [vi("y", [2])])
    out, report = run(m)
    assert ops(out) == ["Identity"]
    assert not report.passes[PASS].changed_runs


def test_identity_of_initializer_or_other_output_into_output_is_kept():
    m = model(
        [helper.make_node("Identity", ["w"], ["y"]), helper.make_node("Relu", ["x"], ["r"]),
         helper.make_node("Identity", ["r"], ["z"])],
        [vi("x", [2])], [vi("y", [2]), vi("r", [2]), vi("z", [2])], [const("w", np.ones(2, np.float32))])
    out, _ = run(m)
    assert ops(out) == ["Identity", "Relu", "Identity"]


def test_identity_with_several_readers_inside_the_graph():
    m = model(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Identity", ["r"], ["i"]),
         helper.make_node("Add", ["i", "i"], ["a"]), helper.make_node("Mul", ["i", "a"], ["y"])],
        [vi("x", [3])], [vi("y", [3])])
    out, _ = run(m)
    assert ops(out) == ["Relu", "Add", "Mul"]
    assert out.graph.producer("y").inputs == ["r", "a"]


def test_identity_inside_if_branch_fixture():
    m = io.load(f"{FIXTURES}/if_subgraph.onnx")
    out, _ = run(m)
    then_branch = out.graph.nodes("If")[0].attr("then_branch")
    assert [n.op_type for n in then_branch.topological_order()] == ["Add"]
    assert then_branch.producer("then_out").inputs == ["x_scaled", "bias"]


def test_identity_inside_function_body_fixture():
    m = io.load(f"{FIXTURES}/local_function.onnx")
    out, _ = run(m)
    body = out.functions[0].body
    assert "Identity" not in [n.op_type for n in body.nodes()]
    assert body.producer("std").inputs == ["var"]
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    got = make_session(out).run(None, {"x": x})[0]
    ref = make_session(m).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, ref, rtol=1e-6)


# 2. Dropout ------------------------------------------------------------------------------------


def test_inference_dropout_removed():
    m = model([helper.make_node("Dropout", ["x", "ratio"], ["d"]), helper.make_node("Relu", ["d"], ["y"])],
              [vi("x", [4])], [vi("y", [4])], [const("ratio", np.float32(0.5))], opset=13)
    out, _ = run(m)
    assert ops(out) == ["Relu"]


def test_dropout_in_training_mode_or_with_read_mask_is_kept():
    training = model(
        [helper.make_node("Dropout", ["x", "ratio", "train"], ["d"]), helper.make_node("Relu", ["d"], ["y"])],
        [vi("x", [4])], [vi("y", [4])], [const("ratio", np.float32(0.0)), const("train", np.bool_(True))], opset=13)
    out, _, _ = optimize(training, passes=[PASS])
    assert ops(out) == ["Dropout", "Relu"]
    mask = model([helper.make_node("Dropout", ["x"], ["d", "mask"]), helper.make_node("Relu", ["d"], ["y"])],
                 [vi("x", [4])], [vi("y", [4]), vi("mask", [4], TensorProto.BOOL)], opset=13)
    out, _ = run(mask)
    assert ops(out) == ["Dropout", "Relu"]


# 3. Cast ---------------------------------------------------------------------------------------


def test_cast_to_same_type_removed_and_unknown_dtype_kept():
    m = model(
        [helper.make_node("Cast", ["x"], ["c"], to=F), helper.make_node("Hardmax", ["c"], ["r"]),
         helper.make_node("Cast", ["r"], ["c2"], to=F),  # r: no value_info, and Hardmax is not walked through
         helper.make_node("Cast", ["c2"], ["y"], to=TensorProto.DOUBLE)],
        [vi("x", [3])], [vi("y", [3], TensorProto.DOUBLE)])
    out, report = run(m)
    assert ops(out) == ["Hardmax", "Cast", "Cast"]
    assert out.graph.producer("r").inputs == ["x"]
    assert report.passes[PASS].stats == {"Cast": 1}


def test_cast_whose_input_type_is_proven_through_producers_removed():
    # oww melspectrogram: Cast(Sub(ReduceMax(x), w), to=FLOAT), x and w float, no value_info between
    m = model(
        [helper.make_node("ReduceMax", ["x"], ["m"], keepdims=1), helper.make_node("Sub", ["m", "w"], ["d"]),
         helper.make_node("Cast", ["d"], ["c"], to=F), helper.make_node("Relu", ["c"], ["y"])],
        [vi("x", ["n", 3])], [vi("y", ["n", 1])], [const("w", np.array([0.5], np.float32))])
    out, report = run(m)
    assert ops(out) == ["ReduceMax", "Sub", "Relu"]
    assert report.passes[PASS].stats == {"Cast": 1}


# 4. Reshape ------------------------------------------------------------------------------------


def test_reshape_to_own_static_shape_removed():
    m = model(
        [helper.make_node("Reshape", ["x", "s"], ["r"]), helper.make_node("Relu", ["r"], ["y"])],
        [vi("x", [2, 3, 4])], [vi("y", [2, 3, 4])], [const("s", np.array([0, 3, -1], np.int64))])
    out, _ = run(m)
    assert ops(out) == ["Relu"]


def test_reshape_to_shape_of_itself_removed_even_when_dynamic():
    m = model(
        [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Reshape", ["x", "s"], ["r"]),
         helper.make_node("Relu", ["r"], ["y"])],
        [vi("x", ["N", 3])], [vi("y", ["N", 3])])
    out, _ = run(m)
    assert "Reshape" not in ops(out)


def test_reshape_with_dynamic_or_different_shape_is_kept():
    m = model(
        [helper.make_node("Reshape", ["x", "s"], ["r"]), helper.make_node("Relu", ["r"], ["y"]),
         helper.make_node("Reshape", ["x", "t"], ["z"])],
        [vi("x", [2, 3]), vi("s", [2], TensorProto.INT64)], [vi("y", ["a", "b"]), vi("z", [3, 2])],
        [const("t", np.array([3, 2], np.int64))])
    out, _, _ = optimize(m, passes=[PASS])
    assert ops(out) == ["Reshape", "Relu", "Reshape"]
    feeds = {"x": np.ones((2, 3), np.float32), "s": np.array([2, 3], np.int64)}
    assert verify(m, out, feeds=feeds).ok


# 5.-9. Expand, Transpose, Pad, Slice, Concat ---------------------------------------------------


def test_layout_no_ops_removed():
    m = model(
        [
            helper.make_node("Expand", ["x", "e"], ["a"]),
            helper.make_node("Transpose", ["a"], ["b"], perm=[0, 1]),
            helper.make_node("Pad", ["b", "pads"], ["c"], mode="reflect"),
            helper.make_node("Slice", ["c", "starts", "ends", "axes"], ["d"]),
            helper.make_node("Concat", ["d"], ["e2"], axis=0),
            helper.make_node("Relu", ["e2"], ["y"]),
        ],
        [vi("x", [2, 3])], [vi("y", [2, 3])],
        [const("e", np.array([1, 3], np.int64)), const("pads", np.zeros(4, np.int64)),
         const("starts", np.array([0, -5], np.int64)), const("ends", np.array([2**63 - 1, 3], np.int64)),
         const("axes", np.array([0, 1], np.int64))])
    out, report = run(m)
    assert ops(out) == ["Relu"]
    assert report.passes[PASS].stats == {"Expand": 1, "Transpose": 1, "Pad": 1, "Slice": 1, "Concat": 1}


def test_pad_and_slice_attribute_forms_of_old_opsets():
    m = model(
        [helper.make_node("Pad", ["x"], ["p"], pads=[0, 0, 0, 0]),
         helper.make_node("Slice", ["p"], ["s"], starts=[0], ends=[100], axes=[1]),
         helper.make_node("Relu", ["s"], ["y"])],
        [vi("x", [2, 3])], [vi("y", [2, 3])], opset=9)
    out, _ = run(m)
    assert ops(out) == ["Relu"]


def test_layout_ops_that_change_the_tensor_are_kept():
    m = model(
        [
            helper.make_node("Expand", ["x", "e"], ["a"]),  # broadcasts [2,3] to [4,2,3]
            helper.make_node("Transpose", ["x"], ["b"], perm=[1, 0]),
            helper.make_node("Pad", ["x", "pads"], ["c"]),
            helper.make_node("Slice", ["x", "starts", "ends"], ["d"]),  # drops a row
            helper.make_node("Slice", ["x", "m1", "minbig", "axes1", "steps"], ["f"]),  # reverses
            helper.make_node("Concat", ["x", "x"], ["g"], axis=0),
            helper.make_node("Reshape", ["x", "hs"], ["h"]),
            helper.make_node("Transpose", ["h"], ["t"]),  # no perm, rank of h unknown
        ],
        [vi("x", [2, 3]), vi("hs", [2], TensorProto.INT64)],
        [vi("a", [4, 2, 3]), vi("b", [3, 2]), vi("c", [2, 5]), vi("d", [1, 3]), vi("f", [2, 3]),
         vi("g", [4, 3]), vi("t", ["p", "q"])],
        [const("e", np.array([4, 1, 1], np.int64)), const("pads", np.array([0, 1, 0, 1], np.int64)),
         const("starts", np.array([1], np.int64)), const("ends", np.array([2], np.int64)),
         const("m1", np.array([-1], np.int64)), const("minbig", np.array([-(2**63)], np.int64)),
         const("axes1", np.array([1], np.int64)),
         const("steps", np.array([-1], np.int64))])
    out, report = optimize(m, passes=[PASS])[:2]
    assert ops(out) == ops(m)
    assert not report.passes[PASS].changed_runs


# 10. Squeeze/Unsqueeze pairs -------------------------------------------------------------------


@pytest.mark.parametrize("opset", [11, 13])
def test_unsqueeze_then_squeeze_same_axes_removed(opset):
    if opset >= 13:
        nodes = [helper.make_node("Unsqueeze", ["x", "ax"], ["u"]), helper.make_node("Squeeze", ["u", "ax2"], ["s"])]
        inits = [const("ax", np.array([0, -1], np.int64)), const("ax2", np.array([3, 0], np.int64))]
    else:
        nodes = [helper.make_node("Unsqueeze", ["x"], ["u"], axes=[0, -1]), helper.make_node("Squeeze", ["u"], ["s"], axes=[3, 0])]
        inits = []
    m = model(nodes + [helper.make_node("Relu", ["s"], ["y"])], [vi("x", [2, 3])], [vi("y", [2, 3])], inits, opset=opset)
    out, _ = run(m, passes=[PASS, "dead-code-elimination"])
    assert ops(out) == ["Relu"]


def test_squeeze_then_unsqueeze_same_axes_removed_other_axes_kept():
    m = model(
        [helper.make_node("Squeeze", ["x", "a1"], ["s"]), helper.make_node("Unsqueeze", ["s", "a1"], ["u"]),
         helper.make_node("Relu", ["u"], ["y"]), helper.make_node("Unsqueeze", ["s", "a0"], ["z"])],
        [vi("x", [2, 1, 3])], [vi("y", [2, 1, 3]), vi("z", [1, 2, 3])],
        [const("a1", np.array([1], np.int64)), const("a0", np.array([0], np.int64))])
    out, _ = run(m)
    assert ops(out) == ["Squeeze", "Relu", "Unsqueeze"]
    assert out.graph.producer("y").inputs == ["x"]


# 11. Neutral arithmetic ------------------------------------------------------------------------


def test_neutral_arithmetic_removed():
    m = model(
        [helper.make_node("Mul", ["one", "x"], ["a"]), helper.make_node("Add", ["a", "zeros_row"], ["b"]),
         helper.make_node("Sub", ["b", "zero"], ["c"]), helper.make_node("Div", ["c", "one"], ["d"]),
         helper.make_node("Relu", ["d"], ["y"])],
        [vi("x", [2, 3])], [vi("y", [2, 3])],
        [const("one", np.float32(1)), const("zero", np.float32(0)), const("zeros_row", np.zeros((1, 3), np.float32))])
    out, report = run(m)
    assert ops(out) == ["Relu"]
    assert report.passes[PASS].stats == {"Mul": 1, "Add": 1, "Sub": 1, "Div": 1}


def test_neutral_logic_removed_and_the_rest_kept():
    """dynamo's attention mask: And(True, ge); Or(x, False) likewise; And(x, False) is not x."""
    B = TensorProto.BOOL
    m = model(
        [helper.make_node("And", ["t", "x"], ["a"]), helper.make_node("Or", ["a", "f_row"], ["b"]),
         helper.make_node("And", ["b", "f"], ["c"]), helper.make_node("Or", ["x", "t_2x3"], ["d"]),
         helper.make_node("Xor", ["c", "d"], ["y"])],
        [vi("x", [3], B)], [vi("y", [2, 3], B)],
        [const("t", np.bool_(True)), const("f", np.bool_(False)), const("f_row", np.zeros(3, bool)),
         const("t_2x3", np.ones((2, 3), bool))])
    out, report = run(m, feeds={"x": np.array([True, False, True])})
    assert sorted(ops(out)) == ["And", "Or", "Xor"]  # x And False, and the Or that broadcasts [3] to [2, 3], stay
    assert report.passes[PASS].stats == {"And": 1, "Or": 1}


def test_neutral_arithmetic_that_broadcasts_or_is_not_neutral_is_kept():
    m = model(
        [helper.make_node("Add", ["x", "zeros_2x3"], ["a"]),  # [3] + [2,3] -> [2,3]
         helper.make_node("Sub", ["zero", "x"], ["b"]),  # 0 - x is not x
         helper.make_node("Reshape", ["x", "hs"], ["h"]),
         helper.make_node("Mul", ["h", "ones_1"], ["c"]),  # rank of h unknown: [1] could add a dim
         helper.make_node("Div", ["x", "two"], ["d"])],
        [vi("x", [3]), vi("hs", ["k"], TensorProto.INT64)],  # a shape of unknown length: h's rank unknown
        [vi("a", [2, 3]), vi("b", [3]), vi("c", ["n"]), vi("d", [3])],
        [const("zeros_2x3", np.zeros((2, 3), np.float32)), const("zero", np.float32(0)),
         const("ones_1", np.ones(1, np.float32)), const("two", np.float32(2))])
    out, report = optimize(m, passes=[PASS])[:2]
    assert ops(out) == ["Add", "Sub", "Reshape", "Mul", "Div"]
    assert not report.passes[PASS].changed_runs


def test_neutral_arithmetic_on_an_undeclared_value_uses_inferred_static_dims():
    """A random-init export's zero bias and MobileBERT's NoNorm (x * ones + zeros) on a MatMul output nothing
    declares: inference proves [n, 4, 3], so + zeros[3] and * ones[1, 3] keep it; + zeros[2, 1, 3] would broadcast
    n up to 2 and + zeros[4] does not fit the last dim: both stay."""
    m = model(
        [helper.make_node("MatMul", ["x", "w"], ["mm"]), helper.make_node("Add", ["mm", "zeros_3"], ["a"]),
         helper.make_node("Mul", ["a", "ones_1x3"], ["b"]), helper.make_node("Relu", ["b"], ["y"]),
         helper.make_node("Add", ["mm", "zeros_2x1x3"], ["z"])],
        [vi("x", ["n", 4, 5])], [vi("y", ["n", 4, 3]), vi("z", [2, 4, 3])],
        [const("w", np.ones((5, 3), np.float32)), const("zeros_3", np.zeros(3, np.float32)),
         const("ones_1x3", np.ones((1, 3), np.float32)), const("zeros_2x1x3", np.zeros((2, 1, 3), np.float32))])
    assert "mm" not in m.graph.value_info
    out, report = run(m, feeds={"x": np.random.default_rng(0).standard_normal((1, 4, 5)).astype(np.float32)})
    assert ops(out) == ["MatMul", "Relu", "Add"]
    assert out.graph.producer("y").inputs == ["mm"] and report.passes[PASS].stats == {"Add": 1, "Mul": 1}
