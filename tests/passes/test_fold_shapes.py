"""fold-shapes: shape arithmetic over static dims folds; equal symbolic shape values merge."""

from __future__ import annotations

import functools
import os

import numpy as np
import pytest
from onnx import TensorProto, helper

from graphtool import io
from graphtool.errors import BadModel
from graphtool.runtime import make_session
from graphtool.optimize import optimize
from graphtool.verify import verify
from tests.conftest import FIXTURES
from tests.passes import helpers
from tests.passes.helpers import const as _c
from tests.passes.helpers import ops as _ops
from tests.passes.helpers import vi as _vi

SHAPES = ["fold-shapes"]
BOTH = ["fold-constants", "fold-shapes"]
TORCH = os.path.join(FIXTURES, "torch")
_model = functools.partial(helpers.model, check=False)


def _feeds(**shapes):
    rng = np.random.default_rng(0)
    return {k: rng.standard_normal(v).astype(np.float32) for k, v in shapes.items()}


def test_shape_of_a_static_input_folds():
    m = _model([helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Reshape", ["x", "s"], ["y"])],
               [_vi("x", [2, 3])], [_vi("y", [2, 3])])
    out, report, _ = optimize(m, passes=SHAPES)
    assert _ops(out) == ["Reshape"]
    np.testing.assert_array_equal(out.graph.const("s"), np.array([2, 3], np.int64))
    assert report.passes["fold-shapes"].stats["folded"] == 1
    assert verify(m, out).ok


def test_size_and_shape_slices_of_a_static_input_fold():
    m = _model([helper.make_node("Size", ["x"], ["n"]),
                helper.make_node("Shape", ["x"], ["tail"], start=-2),
                helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT),
                helper.make_node("Mul", ["x", "nf"], ["y"]),
                helper.make_node("Reshape", ["y", "tail"], ["z"])],
               [_vi("x", [1, 2, 3])], [_vi("z", [2, 3])])
    out, _, _ = optimize(m, passes=SHAPES)
    assert _ops(out) == ["Cast", "Mul", "Reshape"]
    assert out.graph.const("n") == 6
    np.testing.assert_array_equal(out.graph.const("tail"), [2, 3])
    assert verify(m, out).ok


def _static_dim_model():
    """x: [N, 3, H]; Gather(Shape(x), 1) is 3 whatever N and H are; Gather(.., 0) is not static."""
    return _model(
        [helper.make_node("Shape", ["x"], ["s"]),
         helper.make_node("Gather", ["s", "one"], ["c"]),
         helper.make_node("Gather", ["s", "zero"], ["n"]),
         helper.make_node("Unsqueeze", ["c", "axes"], ["c1"]),
         helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
         helper.make_node("Concat", ["n1", "c1", "minus1"], ["target"], axis=0),
         helper.make_node("Reshape", ["x", "target"], ["y"])],
        [_vi("x", ["N", 3, "H"])], [_vi("y", ["N", 3, "H"])],
        [_c("one", np.array(1, np.int64)), _c("zero", np.array(0, np.int64)), _c("axes", np.array([0], np.int64)),
         _c("minus1", np.array([-1], np.int64))])


def test_gather_of_the_static_dim_of_a_symbolic_shape_folds():
    m = _static_dim_model()
    out, report, _ = optimize(m, passes=SHAPES)
    assert report.passes["fold-shapes"].stats["folded"] == 2  # Gather(s, 1) and its Unsqueeze
    np.testing.assert_array_equal(out.graph.const("c1"), [3])
    assert out.graph.is_initializer("c1")
    for n, h in [(2, 5), (1, 1), (4, 7)]:
        assert verify(m, out, feeds=_feeds(x=(n, 3, h))).ok


def test_reshape_target_reading_its_own_input_dims_becomes_constant():
    m = _static_dim_model()
    out, report, _ = optimize(m, passes=SHAPES)
    assert report.passes["fold-shapes"].stats["reshape_zeros"] == 1
    reshape = out.graph.nodes("Reshape")[0]
    np.testing.assert_array_equal(out.graph.const(reshape.inputs[1]), [0, 3, -1])
    assert _ops(out) == ["Reshape"]  # the Shape/Gather/Concat chain died with it
    for n, h in [(2, 5), (3, 1)]:
        assert verify(m, out, feeds=_feeds(x=(n, 3, h))).ok


def test_shapes_come_from_inference_where_value_info_is_missing():
    m = _model([helper.make_node("MatMul", ["x", "w"], ["h"]),
                helper.make_node("Shape", ["h"], ["s"]),
                helper.make_node("Gather", ["s", "last"], ["d"]),
                helper.make_node("Cast", ["d"], ["df"], to=TensorProto.FLOAT),
                helper.make_node("Div", ["h", "df"], ["y"])],
               [_vi("x", ["N", 4])], [_vi("y", ["N", 8])],
               [_c("w", np.ones((4, 8), np.float32)), _c("last", np.array(-1, np.int64))])
    out, _, _ = optimize(m, passes=SHAPES)
    assert _ops(out) == ["MatMul", "Cast", "Div"]
    assert out.graph.const("d") == 8
    assert verify(m, out, feeds=_feeds(x=(5, 4))).ok


def test_pinned_input_shapes_fold_the_symbolic_dims_too():
    m = _model([helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Expand", ["x", "s"], ["y"])],
               [_vi("x", ["N", "M"])], [_vi("y", ["N", "M"])])
    out, _, _ = optimize(m, passes=SHAPES)
    assert _ops(out) == ["Shape", "Expand"]  # nothing static without the user's shapes
    pinned, _, _ = optimize(m, passes=SHAPES, input_shapes={"x": [2, 5]})
    assert _ops(pinned) == ["Expand"]
    np.testing.assert_array_equal(pinned.graph.const("s"), [2, 5])
    assert pinned.graph.declared_shape("x") == [2, 5]
    assert verify(m, pinned, feeds=_feeds(x=(2, 5))).ok


def _two_readers(shape_a, shape_b, index_b=0):
    """Two tensors whose dims are read separately; Mul(a_dim, b_dim) keeps both reads alive."""
    return _model(
        [helper.make_node("Shape", ["a"], ["sa"]), helper.make_node("Gather", ["sa", "i0"], ["da"]),
         helper.make_node("Shape", ["b"], ["sb"]), helper.make_node("Gather", ["sb", "ib"], ["db"]),
         helper.make_node("Mul", ["da", "db"], ["p"]),
         helper.make_node("Cast", ["p"], ["pf"], to=TensorProto.FLOAT),
         helper.make_node("Mul", ["b", "pf"], ["y"])],
        [_vi("a", ["batch", "seq"]), _vi("b", ["batch", 4, "seq"])], [_vi("y", ["batch", 4, "seq"])],
        [_c("i0", np.array(0, np.int64)), _c("ib", np.array(index_b, np.int64))])


def test_equal_symbolic_dims_are_read_once():
    m = _two_readers(["batch", "seq"], ["batch", 4, "seq"], index_b=0)
    out, report, _ = optimize(m, passes=SHAPES)
    assert report.passes["fold-shapes"].stats["merged"] == 1
    assert _ops(out).count("Shape") == 1 and _ops(out).count("Gather") == 1
    mul = out.graph.nodes("Mul")[0]
    assert mul.inputs[0] == mul.inputs[1] == "da"
    for b, s in [(2, 3), (5, 1)]:
        assert verify(m, out, feeds=_feeds(a=(b, s), b=(b, 4, s))).ok


def test_different_symbolic_dims_are_not_merged():
    m = _two_readers(["batch", "seq"], ["batch", 4, "seq"], index_b=2)  # batch vs seq
    out, _, _ = optimize(m, passes=SHAPES)
    mul = out.graph.nodes("Mul")[0]
    assert mul.inputs[0] != mul.inputs[1]
    assert _ops(out).count("Gather") == 2 and _ops(out).count("Shape") == 1  # both read from input a
    for b, s in [(2, 3), (4, 1)]:
        assert verify(m, out, feeds=_feeds(a=(b, s), b=(b, 4, s))).ok


def test_unknown_rank_refuses():
    m = _model([helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Reshape", ["x", "s"], ["y"])],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)], [_vi("y", None)])
    out, report, _ = optimize(m, passes=SHAPES)
    assert _ops(out) == ["Shape", "Reshape"]
    assert report.passes["fold-shapes"].changed_runs == 0


def test_sub_of_equal_dims_is_zero():
    m = _model([helper.make_node("Shape", ["x"], ["s"]),
                helper.make_node("Gather", ["s", "i0"], ["n"]),
                helper.make_node("Shape", ["x"], ["s2"]),
                helper.make_node("Gather", ["s2", "i0"], ["n2"]),
                helper.make_node("Sub", ["n", "n2"], ["zero"]),
                helper.make_node("Cast", ["zero"], ["zf"], to=TensorProto.FLOAT),
                helper.make_node("Add", ["x", "zf"], ["y"])],
               [_vi("x", ["N", 2])], [_vi("y", ["N", 2])], [_c("i0", np.array(0, np.int64))])
    out, _, _ = optimize(m, passes=SHAPES)
    assert _ops(out) == ["Cast", "Add"]
    assert out.graph.const("zero") == 0
    assert verify(m, out, feeds=_feeds(x=(3, 2))).ok


def test_where_equal_minus_one_chain_is_rebuilt_from_existing_pieces():
    """torch's ``expand(x.size(0), -1, -1)``: Where(Equal(t, -1), 1, t) with t = [N, -1, -1] is
    [N, 1, 1]: a dim never equals -1, so Equal is static and the chain becomes Concat([N], [1, 1])."""
    m = _model(
        [helper.make_node("Shape", ["x"], ["s"]),
         helper.make_node("Gather", ["s", "i0"], ["n"]),
         helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
         helper.make_node("Concat", ["n1", "m1", "m1"], ["t"], axis=0),
         helper.make_node("Reshape", ["t", "flat"], ["t2"]),
         helper.make_node("Equal", ["t2", "m111"], ["eq"]),
         helper.make_node("Where", ["eq", "ones", "t2"], ["shape"]),
         helper.make_node("Expand", ["cls", "shape"], ["y"])],
        [_vi("x", ["N", 4])], [_vi("y", ["N", 1, 4])],
        [_c("i0", np.array(0, np.int64)), _c("axes", np.array([0], np.int64)), _c("m1", np.array([-1], np.int64)),
         _c("flat", np.array([-1], np.int64)), _c("m111", np.array([-1, -1, -1], np.int64)),
         _c("ones", np.array([1, 1, 1], np.int64)), _c("cls", np.ones((1, 1, 4), np.float32))])
    out, report, _ = optimize(m, passes=SHAPES)
    assert report.passes["fold-shapes"].stats["rebuilt"] == 1
    assert sorted(_ops(out)) == ["Concat", "Expand", "Gather", "Shape", "Unsqueeze"]
    concat = out.graph.nodes("Concat")[0]
    assert concat.inputs[0] == "n1"
    np.testing.assert_array_equal(out.graph.const(concat.inputs[1]), [1, 1])
    for n in (1, 3):
        assert verify(m, out, feeds=_feeds(x=(n, 4))).ok


def test_constant_chain_fixture():
    """All constant and shape arithmetic folds: only the live Reshape and Add are left, and the
    Reshape's target is a constant (whether the Reshape is then a no-op is eliminate-no-ops' call)."""
    m = io.load(os.path.join(FIXTURES, "constant_chain.onnx"))
    out, _, _ = optimize(m, passes=BOTH)
    assert _ops(out) == ["Reshape", "Add"]
    assert out.graph.is_initializer(out.graph.nodes("Reshape")[0].inputs[1])
    try:
        make_session(m)
    except BadModel:
        return  # an earlier version of the fixture did not run in onnxruntime at all
    assert verify(m, out).ok


# Node counts after fold-constants + fold-shapes alone (other passes take them further).
TORCH_LIMITS = {"bert_ts": 140, "gpt2_ts": 150, "vit_ts": 90}


@pytest.mark.parametrize("name", sorted(TORCH_LIMITS))
def test_torch_exports_fold_and_keep_outputs_for_other_input_sizes(name):
    path = os.path.join(TORCH, f"{name}.onnx")
    m = io.load(path)
    out, _, _ = optimize(m, passes=BOTH)
    assert out.node_count() <= TORCH_LIMITS[name]
    sample = dict(np.load(path.replace(".onnx", ".inputs.npz")))
    expected = dict(np.load(path.replace(".onnx", ".expected.npz")))
    assert verify(m, out, feeds=sample).ok
    got = make_session(out).run(None, sample)
    for ref, value in zip(expected.values(), got):
        np.testing.assert_allclose(value, ref, rtol=1e-3, atol=1e-4)
    rng = np.random.default_rng(1)
    for batch, seq in [(3, 7), (1, 5)]:
        feeds = {}
        for key, value in sample.items():
            if value.dtype.kind in "iu":
                feeds[key] = rng.integers(0, 2 if "mask" in key else 50, size=(batch, seq)).astype(value.dtype)
            else:
                feeds[key] = rng.standard_normal((batch,) + value.shape[1:]).astype(value.dtype)
        assert verify(m, out, feeds=feeds).ok, (batch, seq)


def test_reshape_target_with_one_foreign_dim_gets_minus_one_there():
    """YOLOv8's DFL head: Reshape(x[b, 64, a], [b, 4, 16, a]) — b copies x's dim 0, a (x's dim 2,
    at position 3) is what the element count leaves: [0, 4, 16, -1]."""
    m = _model([helper.make_node("Shape", ["x"], ["s"]),
                helper.make_node("Gather", ["s", "zero"], ["b"]), helper.make_node("Gather", ["s", "two"], ["a"]),
                helper.make_node("Unsqueeze", ["b", "axes"], ["b1"]), helper.make_node("Unsqueeze", ["a", "axes"], ["a1"]),
                helper.make_node("Concat", ["b1", "four16", "a1"], ["t"], axis=0),
                helper.make_node("Reshape", ["x", "t"], ["y"])],
               [_vi("x", ["B", 64, "A"])], [_vi("y", ["B", 4, 16, "A"])],
               [_c("zero", np.array(0, np.int64)), _c("two", np.array(2, np.int64)), _c("axes", np.array([0], np.int64)),
                _c("four16", np.array([4, 16], np.int64))])
    out, report, _ = optimize(m, passes=SHAPES)
    assert report.passes["fold-shapes"].stats["reshape_zeros"] == 1
    np.testing.assert_array_equal(out.graph.const(out.graph.nodes("Reshape")[0].inputs[1]), [0, 4, 16, -1])
    assert _ops(out) == ["Reshape"]
    for b, a in [(1, 2100), (3, 7)]:
        assert verify(m, out, feeds=_feeds(x=(b, 64, a))).ok


def test_reshape_target_with_two_foreign_dims_is_left_alone():
    m = _model([helper.make_node("Shape", ["x"], ["s"]),
                helper.make_node("Gather", ["s", "zero"], ["b"]), helper.make_node("Gather", ["s", "two"], ["a"]),
                helper.make_node("Unsqueeze", ["b", "axes"], ["b1"]), helper.make_node("Unsqueeze", ["a", "axes"], ["a1"]),
                helper.make_node("Concat", ["a1", "four16", "b1"], ["t"], axis=0),  # a and b swapped: neither copies
                helper.make_node("Reshape", ["x", "t"], ["y"])],
               [_vi("x", ["B", 64, "A"])], [_vi("y", ["A", 4, 16, "B"])],
               [_c("zero", np.array(0, np.int64)), _c("two", np.array(2, np.int64)), _c("axes", np.array([0], np.int64)),
                _c("four16", np.array([4, 16], np.int64))])
    out, report, _ = optimize(m, passes=SHAPES)
    assert "Concat" in _ops(out) and not report.passes["fold-shapes"].stats.get("reshape_zeros")


def test_a_dim_already_read_off_the_input_is_not_read_again():
    """dynamo's sym_size: Squeeze(Shape(x, 0, 1)) reads the batch dim straight off the input; the
    merge rule keeps it rather than adding Shape(x) → Gather (which cost a node per dim)."""
    m = _model([helper.make_node("Shape", ["x"], ["s0"], start=0, end=1), helper.make_node("Squeeze", ["s0"], ["b"]),
                helper.make_node("Range", ["zero", "b", "one"], ["r"]),
                helper.make_node("Concat", ["s0", "minus1"], ["t"], axis=0), helper.make_node("Reshape", ["x", "t"], ["y"])],
               [_vi("x", ["B", 4, 8])], [_vi("r", ["B"], TensorProto.INT64), _vi("y", ["B", 32])],
               [_c("zero", np.array(0, np.int64)), _c("one", np.array(1, np.int64)), _c("minus1", np.array([-1], np.int64))])
    out, _, _ = optimize(m, passes=SHAPES)
    assert _ops(out).count("Shape") <= 1 and "Gather" not in _ops(out)
    assert verify(m, out, feeds=_feeds(x=(3, 4, 8))).ok
