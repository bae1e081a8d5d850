"""common-subexpression-elimination: equal ops and equal constants become one."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from graphtool.optimize import optimize
from graphtool.runtime import make_session
from tests.passes.helpers import const, model, ops, runner, vi

PASS = "common-subexpression-elimination"
run = runner([PASS])


def test_equal_ops_merge_and_the_merge_cascades_downstream():
    m = model(
        [helper.make_node("Relu", ["x"], ["r1"]), helper.make_node("Relu", ["x"], ["r2"]),
         helper.make_node("Exp", ["r1"], ["e1"]), helper.make_node("Exp", ["r2"], ["e2"]),
         helper.make_node("Add", ["e1", "e2"], ["y"])],
        [vi("x", [3])], [vi("y", [3])])
    out, report = run(m)
    assert ops(out) == ["Relu", "Exp", "Add"]
    assert out.graph.producer("y").inputs == ["e1", "e1"]
    assert report.passes[PASS].stats["ops"] == 2
    assert report.passes[PASS].changed_runs == 1  # one run found both


def test_different_attributes_or_inputs_do_not_merge():
    m = model(
        [helper.make_node("LeakyRelu", ["x"], ["a"], alpha=0.1), helper.make_node("LeakyRelu", ["x"], ["b"], alpha=0.2),
         helper.make_node("Sub", ["x", "z"], ["c"]), helper.make_node("Sub", ["z", "x"], ["d"])],
        [vi("x", [3]), vi("z", [3])], [vi("a", [3]), vi("b", [3]), vi("c", [3]), vi("d", [3])])
    out, report = optimize(m, passes=[PASS])[:2]
    assert ops(out) == ["LeakyRelu", "LeakyRelu", "Sub", "Sub"]
    assert not report.passes[PASS].changed_runs


def test_random_ops_never_merge():
    m = model(
        [helper.make_node("RandomNormalLike", ["x"], ["a"], seed=1.0),
         helper.make_node("RandomNormalLike", ["x"], ["b"], seed=1.0),
         helper.make_node("Add", ["a", "b"], ["y"])],
        [vi("x", [3])], [vi("y", [3])])
    out, report = optimize(m, passes=[PASS])[:2]
    assert ops(out) == ["RandomNormalLike", "RandomNormalLike", "Add"]
    assert not report.passes[PASS].changed_runs


def test_equal_constants_merge_across_initializers_and_constant_ops():
    two = np.full((2, 3), 2.0, np.float32)
    m = model(
        [helper.make_node("Constant", [], ["c1"], value=const("t1", two)),
         helper.make_node("Constant", [], ["c2"], value=const("other_name", two)),
         helper.make_node("Constant", [], ["c3"], value=const("t3", two + 1)),
         helper.make_node("Mul", ["x", "w1"], ["a"]), helper.make_node("Mul", ["x", "w2"], ["b"]),
         helper.make_node("Mul", ["x", "c1"], ["c"]), helper.make_node("Mul", ["x", "c2"], ["d"]),
         helper.make_node("Mul", ["x", "c3"], ["e"]), helper.make_node("Sum", ["a", "b", "c", "d", "e"], ["y"])],
        [vi("x", [2, 3])], [vi("y", [2, 3])],
        [const("w1", two), const("w2", two), const("w3", two.astype(np.float64))])
    out, report = run(m)
    stats = report.passes[PASS].stats
    assert stats["initializers"] == 1 and stats["constants"] == 2
    assert ops(out) == ["Constant", "Mul", "Mul", "Sum"]  # every Mul(x, 2) is one now; Mul(x, c3=3) stays
    assert out.graph.producer("y").inputs[:4] == ["a", "a", "a", "a"]
    assert sorted(out.graph.initializers) == ["w1", "w3"]  # w3 differs in dtype


def test_duplicate_that_is_a_graph_output_keeps_its_name():
    m = model(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Relu", ["x"], ["y"]),
         helper.make_node("Neg", ["r"], ["z"])],
        [vi("x", [3])], [vi("y", [3]), vi("z", [3])])
    out, _ = run(m)
    assert ops(out) == ["Relu", "Neg"]
    assert out.graph.producer("z").inputs == ["y"]
    assert list(out.graph.outputs) == ["y", "z"]


def test_two_graph_outputs_of_equal_ops_both_stay():
    m = model([helper.make_node("Relu", ["x"], ["y1"]), helper.make_node("Relu", ["x"], ["y2"])],
              [vi("x", [3])], [vi("y1", [3]), vi("y2", [3])])
    out, report = run(m)
    assert ops(out) == ["Relu", "Relu"]
    assert not report.passes[PASS].changed_runs


def test_overridable_initializers_are_not_constants():
    m = model([helper.make_node("Add", ["w1", "w2"], ["y"])], [vi("w1", [2]), vi("w2", [2])], [vi("y", [2])],
              [const("w1", np.ones(2, np.float32)), const("w2", np.ones(2, np.float32))])
    out, report = run(m)
    assert sorted(out.graph.initializers) == ["w1", "w2"]
    assert not report.passes[PASS].changed_runs
    feeds = {"w1": np.array([1, 2], np.float32), "w2": np.array([5, 7], np.float32)}
    got = make_session(out).run(None, feeds)[0]  # overriding both defaults still works
    np.testing.assert_array_equal(got, [6, 9])


def test_ops_with_subgraphs_are_not_merged():
    def branch(name, op):
        return helper.make_graph([helper.make_node(op, ["x"], [name])], name, [], [vi(name, [2])])

    m = model(
        [helper.make_node("If", ["c"], ["a"], then_branch=branch("t1", "Neg"), else_branch=branch("e1", "Abs")),
         helper.make_node("If", ["c"], ["b"], then_branch=branch("t2", "Neg"), else_branch=branch("e2", "Abs")),
         helper.make_node("Add", ["a", "b"], ["y"])],
        [vi("x", [2]), vi("c", [], TensorProto.BOOL)], [vi("y", [2])])
    out, _ = run(m)
    assert ops(out) == ["If", "If", "Add"]


def test_constant_that_is_a_graph_output_takes_over_and_later_copies_follow():
    """c1 is renamed to the output name c2; c3, seen after, must read the new name."""
    v = np.arange(3, dtype=np.float32)
    m = model(
        [helper.make_node("Constant", [], ["c1"], value=const("t1", v)),
         helper.make_node("Mul", ["x", "c1"], ["a"]),
         helper.make_node("Constant", [], ["c2"], value=const("t2", v)),
         helper.make_node("Constant", [], ["c3"], value=const("t3", v)),
         helper.make_node("Add", ["a", "c3"], ["y"])],
        [vi("x", [3])], [vi("y", [3]), vi("c2", [3])])
    out, report = run(m)
    assert report.passes[PASS].stats["constants"] == 2
    assert ops(out) == ["Constant", "Mul", "Add"]
    assert out.graph.producer("y").inputs == ["a", "c2"] and out.graph.producer("a").inputs == ["x", "c2"]


def _order_holds(graph) -> bool:
    """The graph's answer for its topological order equals Kahn's on a copy that may not trust the
    load order: a graph claiming ``_in_order`` must be right to."""
    kahn = graph.copy()
    kahn._in_order = False
    return graph.topological_ids() == kahn.topological_ids()


def test_a_chain_of_merges_is_found_in_one_sweep_and_keeps_the_load_order():
    m = model(
        [helper.make_node("Relu", ["x"], ["a1"]), helper.make_node("Neg", ["a1"], ["b1"]),
         helper.make_node("Relu", ["x"], ["a2"]), helper.make_node("Mul", ["b1", "x"], ["c1"]),
         helper.make_node("Neg", ["a2"], ["b2"]), helper.make_node("Mul", ["b2", "x"], ["c2"]),
         helper.make_node("Add", ["c1", "c2"], ["y"])],
        [vi("x", [3])], [vi("y", [3])])
    out, report = run(m)
    assert ops(out) == ["Relu", "Neg", "Mul", "Add"]
    assert out.graph.producer("y").inputs == ["c1", "c1"]
    assert report.passes[PASS].stats["ops"] == 3 and report.passes[PASS].changed_runs == 1
    assert out.graph._in_order and _order_holds(out.graph)


def test_a_kept_value_renamed_to_an_output_exposes_merges_downstream():
    """r takes the output name y; both Negs then read y and merge in the same sweep."""
    m = model(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Relu", ["x"], ["y"]),
         helper.make_node("Neg", ["r"], ["n1"]), helper.make_node("Neg", ["y"], ["n2"]),
         helper.make_node("Add", ["n1", "n2"], ["z"])],
        [vi("x", [3])], [vi("y", [3]), vi("z", [3])])
    out, report = run(m)
    g = out.graph
    assert ops(out) == ["Relu", "Neg", "Add"]
    assert g.producer("y").op_type == "Relu" and not g.has_value("r")
    assert g.producer("n1").inputs == ["y"] and g.producer("z").inputs == ["n1", "n1"]
    assert list(g.outputs) == ["y", "z"]
    assert report.passes[PASS].changed_runs == 1
    assert g._in_order and _order_holds(g)


def test_of_two_duplicates_that_are_outputs_one_stays():
    """r takes the name y1; it cannot take y2 too, so the second duplicate stays."""
    m = model(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Relu", ["x"], ["y1"]),
         helper.make_node("Relu", ["x"], ["y2"]), helper.make_node("Add", ["r", "y2"], ["z"])],
        [vi("x", [3])], [vi("y1", [3]), vi("y2", [3]), vi("z", [3])])
    out, report = run(m)
    g = out.graph
    assert ops(out) == ["Relu", "Relu", "Add"]
    assert report.passes[PASS].stats["ops"] == 1
    assert g.producer("y1").op_type == g.producer("y2").op_type == "Relu"
    assert g.producer("y1") != g.producer("y2")
    assert g.producer("z").inputs == ["y1", "y2"] and not g.has_value("r")
    assert _order_holds(g)


def test_subgraphs_reading_a_merged_value_read_the_kept_one():
    """The If branch and the Loop body read b, a duplicate of a: their capture edges and the
    names inside the bodies follow the merge."""
    then_g = helper.make_graph([helper.make_node("Neg", ["b"], ["t"])], "then", [], [vi("t", [3])])
    else_g = helper.make_graph([helper.make_node("Abs", ["a"], ["e"])], "else", [], [vi("e", [3])])
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Add", ["v_in", "b"], ["v_out"])],
        "body", [vi("i", [], TensorProto.INT64), vi("cond_in", [], TensorProto.BOOL), vi("v_in", [3])],
        [vi("cond_out", [], TensorProto.BOOL), vi("v_out", [3])])
    m = model(
        [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["x"], ["b"]),
         helper.make_node("If", ["c"], ["f"], then_branch=then_g, else_branch=else_g),
         helper.make_node("Loop", ["n", "c", "a"], ["l"], body=body),
         helper.make_node("Add", ["f", "l"], ["y"])],
        [vi("x", [3]), vi("c", [], TensorProto.BOOL)], [vi("y", [3])],
        [const("n", np.array(2, np.int64))])
    feeds = {"x": np.array([-1.0, 0.5, 2.0], np.float32), "c": np.array(True)}
    out, _ = run(m, feeds=feeds)
    g = out.graph
    assert ops(out) == ["Relu", "If", "Loop", "Add"] and not g.has_value("b")
    for op_type in ("If", "Loop"):
        owner = g.nodes(op_type)[0]
        assert owner in g.consumers("a")
        assert all(sub.free_values() == ["a"] for sub in owner.subgraphs())
    assert g.nodes("If")[0].attrs["then_branch"].producer("t").inputs == ["a"]
    assert g._in_order and _order_holds(g)
