"""fold-if: an If whose condition is constant becomes the branch that runs (outputs proven in ORT)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from graphtool.ir.graph import Graph
from tests.passes.helpers import const, model, runner, vi

PASS = "fold-if"
run = runner([PASS])


def _branch(name: str, nodes, out: str, shape=("n",)) -> helper.GraphProto:
    return helper.make_graph(nodes, name, [], [vi(out, list(shape))])


def _squeeze_if(cond_value: bool) -> object:
    """torch's squeeze(-1) export: If(dim == 1) then Squeeze else Identity, here on a constant cond."""
    then = _branch("then", [helper.make_node("Mul", ["x", "two"], ["t_y"])], "t_y")
    other = _branch("else", [helper.make_node("Neg", ["x"], ["e_y"])], "e_y")
    return model(
        [helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other),
         helper.make_node("Relu", ["y"], ["z"])],
        [vi("x", ["n"])], [vi("z", ["n"])],
        [const("cond", np.array(cond_value)), const("two", np.array(2.0, np.float32))])


def _ops(graph: Graph) -> list[str]:
    return [n.op_type for n in graph.topological_order()]


def test_constant_true_and_false_take_the_right_branch():
    for value, expected in ((True, ["Mul", "Relu"]), (False, ["Neg", "Relu"])):
        out, report = run(_squeeze_if(value))
        assert _ops(out.graph) == expected
        assert report.passes[PASS].stats == {"inlined": 1}


def test_branch_output_that_is_a_graph_output_keeps_its_name():
    then = _branch("then", [helper.make_node("Abs", ["x"], ["t_y"])], "t_y")
    other = _branch("else", [helper.make_node("Neg", ["x"], ["e_y"])], "e_y")
    m = model([helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other)],
              [vi("x", ["n"])], [vi("y", ["n"])], [const("cond", np.array([True]))])
    out, _ = run(m)
    assert list(out.graph.outputs) == ["y"] and _ops(out.graph) == ["Abs"]


def test_nested_if_moves_up_and_still_reads_the_outer_scope():
    inner = helper.make_node("If", ["flag"], ["i_y"],
                             then_branch=_branch("it", [helper.make_node("Sin", ["x"], ["it_y"])], "it_y"),
                             else_branch=_branch("ie", [helper.make_node("Cos", ["x"], ["ie_y"])], "ie_y"))
    then = helper.make_graph([inner, helper.make_node("Identity", ["x"], ["x_copy"])], "then", [],
                             [vi("i_y", ["n"]), vi("x_copy", ["n"])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e_y"]), helper.make_node("Abs", ["x"], ["e_z"])],
                              "else", [], [vi("e_y", ["n"]), vi("e_z", ["n"])])
    m = model([helper.make_node("If", ["cond"], ["y", "w"], then_branch=then, else_branch=other),
               helper.make_node("Add", ["y", "w"], ["z"])],
              [vi("x", ["n"]), vi("flag", [], TensorProto.BOOL)], [vi("z", ["n"])], [const("cond", np.array(True))])
    feeds = [{"x": np.arange(3, dtype=np.float32), "flag": np.array(v)} for v in (True, False)]
    for f in feeds:
        out, _ = run(m, feeds=f)
    assert sorted(_ops(out.graph)) == ["Add", "Identity", "If"]


def test_names_that_would_shadow_a_sibling_subgraph_are_renamed():
    then = _branch("then", [helper.make_node("Abs", ["x"], ["dup"])], "dup")
    other = _branch("else", [helper.make_node("Neg", ["x"], ["e_y"])], "e_y")
    sibling = helper.make_node("If", ["flag"], ["s"],
                               then_branch=_branch("st", [helper.make_node("Sin", ["x"], ["dup"])], "dup"),
                               else_branch=_branch("se", [helper.make_node("Cos", ["x"], ["se_y"])], "se_y"))
    m = model([helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other), sibling,
               helper.make_node("Add", ["y", "s"], ["z"])],
              [vi("x", ["n"]), vi("flag", [], TensorProto.BOOL)], [vi("z", ["n"])], [const("cond", np.array(True))])
    out, _ = run(m, feeds={"x": np.arange(3, dtype=np.float32), "flag": np.array(True)})
    assert "dup" not in out.graph.nx  # the inlined Abs got a fresh name; the sibling keeps "dup"


def test_condition_not_constant_is_left_alone():
    then = _branch("then", [helper.make_node("Abs", ["x"], ["t_y"])], "t_y")
    other = _branch("else", [helper.make_node("Neg", ["x"], ["e_y"])], "e_y")
    m = model([helper.make_node("If", ["flag"], ["y"], then_branch=then, else_branch=other)],
              [vi("x", ["n"]), vi("flag", [], TensorProto.BOOL)], [vi("y", ["n"])])
    out, report = run(m)
    assert _ops(out.graph) == ["If"] and report.passes[PASS].changed_runs == 0
