"""declared-shapes: a value's shape read back from what both branches of an If declare about it,
and the If chain it settles (the TorchScript LSTM wrapper of silero VAD, rebuilt small).

The model: ``y = If(T == 1, Squeeze(x, -1), Identity(x))`` (rank 2 or 3, so ONNX inference gives
``y`` no rank), then torch's "unbatched input?" test ``If(Not(Size(Shape(y)) == 2), Unsqueeze(y, 0),
Identity(y))``, whose branches declare ``[1, N, 4]`` and ``[N, 4]``: either way ``y`` is ``[N, 4]``.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from graphtool.passes.declared_shapes import implied_input_shape
from tests.passes.helpers import const, model, ops, runner, vi

PASSES = ["declared-shapes", "fold-shapes", "fold-constants", "fold-if", "eliminate-no-ops", "dead-code-elimination"]
run = runner(PASSES)


def _rank_test_model(then_out=("one", "n", 4), else_out=("n", 4), y_defined_outside: bool = False):
    squeeze = helper.make_graph([helper.make_node("Squeeze", ["x", "minus1"], ["sq"])], "sq_then", [],
                                [vi("sq", ["n", 4])])
    keep = helper.make_graph([helper.make_node("Identity", ["x"], ["keep"])], "sq_else", [], [vi("keep", ["n", 4, "t"])])
    unsq = helper.make_graph([helper.make_node("Unsqueeze", ["y", "zero"], ["u"])], "u_then", [],
                             [vi("u", list(then_out))])
    ident = helper.make_graph([helper.make_node("Identity", ["y"], ["i"])], "u_else", [], [vi("i", list(else_out) if else_out else None)])
    nodes = [
        helper.make_node("Shape", ["x"], ["xs"]),
        helper.make_node("Gather", ["xs", "minus1_s"], ["t"], axis=0),
        helper.make_node("Equal", ["t", "one_s"], ["is_one"]),
        helper.make_node("If", ["is_one"], ["y"], then_branch=squeeze, else_branch=keep),
        helper.make_node("Shape", ["y"], ["ys"]),
        helper.make_node("Size", ["ys"], ["rank"]),
        helper.make_node("Equal", ["rank", "two_s"], ["batched"]),
        helper.make_node("Not", ["batched"], ["unbatched"]),
        helper.make_node("If", ["unbatched"], ["z"], then_branch=unsq, else_branch=ident),
        helper.make_node("Relu", ["z"], ["out"]),
    ]
    inits = [const("minus1", np.array([-1], np.int64)), const("zero", np.array([0], np.int64)),
             const("minus1_s", np.array(-1, np.int64)), const("one_s", np.array(1, np.int64)),
             const("two_s", np.array(2, np.int64))]
    if y_defined_outside:  # the rank test sits inside another If's branch: y is an outer value there
        inner = helper.make_graph(nodes[4:], "outer_then", [], [vi("out", ["n", 4])])
        other = helper.make_graph([helper.make_node("Identity", ["y"], ["y2"])], "outer_else", [], [vi("y2", ["n", 4])])
        nodes = nodes[:4] + [helper.make_node("If", ["flag"], ["out"], then_branch=inner, else_branch=other)]
        return model(nodes, [vi("x", ["n", 4, "t"]), vi("flag", [], TensorProto.BOOL)], [vi("out", ["n", 4])], inits, check=False)
    return model(nodes, [vi("x", ["n", 4, "t"])], [vi("out", ["n", 4])], inits, check=False)


FEEDS = {"x": np.random.default_rng(0).standard_normal((3, 4, 1)).astype(np.float32)}


def test_both_branches_declaring_the_rank_settle_the_unbatched_test():
    out, report = run(_rank_test_model(), feeds=FEEDS)
    assert report.passes["declared-shapes"].stats.get("recorded", 0) >= 1
    assert out.graph.shape("y") == ["n", 4]
    # the rank test and its If are gone: the Identity branch ran, the Relu reads y
    assert ops(out.graph).count("If") == 1 and "Size" not in ops(out.graph) and "Not" not in ops(out.graph)


def test_branches_disagreeing_on_the_rank_record_nothing():
    out, report = run(_rank_test_model(then_out=("one", "n", 4, "k")), feeds=FEEDS)
    assert out.graph.shape("y") is None
    assert ops(out.graph).count("If") == 2


def test_one_branch_alone_says_nothing():
    out, _ = run(_rank_test_model(else_out=None), feeds=FEEDS)  # the Identity branch declares no shape
    assert out.graph.shape("y") is None and ops(out.graph).count("If") == 2


def test_a_value_from_an_enclosing_graph_is_not_claimed_by_a_nested_if():
    """The inner If runs only when the outer branch does, so its declarations say nothing of y."""
    m = _rank_test_model(y_defined_outside=True)
    out, report = run(m, feeds={**FEEDS, "flag": np.array(True)})
    assert out.graph.shape("y") is None
    assert report.passes["declared-shapes"].stats.get("recorded", 0) == 0


def test_what_each_reader_implies():
    m = model([helper.make_node("Unsqueeze", ["a", "axes"], ["u"]), helper.make_node("Squeeze", ["b", "axes"], ["s"]),
               helper.make_node("Cast", ["c"], ["k"], to=TensorProto.FLOAT),
               helper.make_node("Transpose", ["d"], ["t"], perm=[1, 0])],
              [vi("a", None), vi("b", None), vi("c", None, TensorProto.INT64), vi("d", None)],
              [vi("u", [2, 1, 3]), vi("s", [5]), vi("k", ["n", 2]), vi("t", [3, 2])],
              [const("axes", np.array([-2], np.int64))], check=False)
    g = m.graph
    by_op = {n.op_type: n for n in g.nodes()}
    assert implied_input_shape(by_op["Unsqueeze"], g) == [2, 3]
    assert implied_input_shape(by_op["Squeeze"], g) == [1, 5]  # axis -2 of the rank-2 input
    assert implied_input_shape(by_op["Cast"], g) == ["n", 2]
    assert implied_input_shape(by_op["Transpose"], g) is None  # not read backwards
