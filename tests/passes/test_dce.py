"""dead-code-elimination, and the four cleanup passes together (fixtures and the node-test corpus)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from graphtool import io
from graphtool.optimize import optimize
from tests.conftest import FIXTURES
from tests.passes.helpers import const, ops, runner, vi
from tests.passes.helpers import make_proto as proto

PASS = "dead-code-elimination"
CLEANUP = ["eliminate-no-ops", "merge-chains", "common-subexpression-elimination", "dead-code-elimination"]
run = runner([PASS])




def test_dead_branch_fixture_with_all_cleanup_passes():
    m = io.load(f"{FIXTURES}/dead_branch.onnx")
    out, report = run(m, CLEANUP)
    assert ops(out.graph) == ["MatMul", "Relu"]
    assert list(out.graph.initializers) == ["w"]
    assert report.passes[PASS].stats == {"nodes": 2, "initializers": 1}


def test_dead_nodes_removed_unused_input_kept():
    m = io.load_proto(proto(
        [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["x"], ["dead1"]),
         helper.make_node("Split", ["dead1"], ["s1", "s2"], axis=0, num_outputs=2),
         helper.make_node("Add", ["s1", "w"], ["dead2"])],
        [vi("x", [4]), vi("unused_input", [4])], [vi("y", [4])], [const("w", np.ones(2, np.float32))],
        opset=18))
    out, _ = run(m)
    assert ops(out.graph) == ["Relu"]
    assert list(out.graph.inputs) == ["x", "unused_input"]
    assert out.graph.initializers == {}


def test_overridable_initializer_input_is_kept():
    """IR ≥ 4: an initializer listed as an input is a default a caller may override: interface."""
    m = io.load_proto(proto([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2]), vi("w", [2])], [vi("y", [2])],
                            [const("w", np.ones(2, np.float32))]))
    out, report = run(m)
    assert list(out.graph.inputs) == ["x", "w"] and list(out.graph.initializers) == ["w"]
    assert not report.passes[PASS].changed_runs


def test_ir3_initializer_listed_as_input_is_removed_from_both():
    """IR < 4 lists every initializer as an input; an unused one was never a real input."""
    m = io.load_proto(proto(
        [helper.make_node("Add", ["x", "b"], ["y"])],
        [vi("x", [2]), vi("b", [2]), vi("w", [2]), vi("real_unused", [2])], [vi("y", [2])],
        [const("b", np.ones(2, np.float32)), const("w", np.ones(2, np.float32))], opset=8, ir_version=3))
    out, _ = run(m)
    assert list(out.graph.inputs) == ["x", "b", "real_unused"]
    assert list(out.graph.initializers) == ["b"]


def test_value_read_only_inside_a_subgraph_stays_and_dead_if_goes():
    then_g = helper.make_graph([helper.make_node("Add", ["h", "h"], ["t"])], "then", [], [vi("t", [2])])
    else_g = helper.make_graph([helper.make_node("Neg", ["h"], ["e"])], "else", [], [vi("e", [2])])
    dead_then = helper.make_graph([helper.make_node("Neg", ["only_dead_if"], ["dt"])], "dthen", [], [vi("dt", [2])])
    dead_else = helper.make_graph([helper.make_node("Abs", ["x"], ["de"])], "delse", [], [vi("de", [2])])
    m = io.load_proto(proto(
        [helper.make_node("Relu", ["x"], ["h"]),
         helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
         helper.make_node("Sigmoid", ["x"], ["only_dead_if"]),
         helper.make_node("If", ["c"], ["dead"], then_branch=dead_then, else_branch=dead_else)],
        [vi("x", [2]), vi("c", [], TensorProto.BOOL)], [vi("y", [2])]))
    out, report = run(m)
    assert ops(out.graph) == ["Relu", "If"]
    assert report.passes[PASS].stats["nodes"] == 2  # the dead If and the Sigmoid only it read


def test_dead_node_inside_subgraph_and_function_body():
    then_g = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["t"]), helper.make_node("Exp", ["x"], ["unused"])], "then", [], [vi("t", [2])])
    else_g = helper.make_graph([helper.make_node("Abs", ["x"], ["e"])], "else", [], [vi("e", [2])])
    fn = helper.make_function(
        "custom", "Twice", ["X"], ["Y"],
        [helper.make_node("Add", ["X", "X"], ["Y"]), helper.make_node("Mul", ["X", "X"], ["dead"])],
        opset_imports=[helper.make_opsetid("", 17)])
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["i"], then_branch=then_g, else_branch=else_g),
         helper.make_node("Twice", ["i"], ["y"], domain="custom")],
        "g", [vi("x", [2]), vi("c", [], TensorProto.BOOL)], [vi("y", [2])])
    p = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("custom", 1)],
                          functions=[fn])
    p.ir_version = 8
    m = io.load_proto(p)
    out, _ = run(m)
    then_out = out.graph.nodes("If")[0].attr("then_branch")
    assert ops(then_out) == ["Neg"]
    assert ops(out.functions[0].body) == ["Add"]


def test_if_fixture_and_function_fixture_stay_valid_with_all_cleanup_passes():
    for name in ("if_subgraph", "local_function"):
        m = io.load(f"{FIXTURES}/{name}.onnx")
        out, _ = run(m, CLEANUP)
        assert out.node_count() == m.node_count() - (0 if name == "local_function" else 1)
        assert all("Identity" not in ops(g) for _, g in out.graphs())


@pytest.mark.slow
def test_cleanup_passes_keep_every_node_test_output():
    """The four cleanup passes on all ONNX node tests: every case ORT runs still matches."""
    from tests.corpus.node_cases import load, node_testcases, original_bytes, run_case

    cases = node_testcases()
    counted, changed, failures = 0, 0, []
    for case in cases:
        if not run_case(original_bytes(case), case).ok:
            continue  # onnxruntime itself cannot run or match this case: nothing to preserve
        counted += 1
        try:
            optimized, report, _ = optimize(load(case), passes=CLEANUP)
        except Exception as err:  # a crash is a failure too, with its reason
            failures.append(f"{case.name}: optimize raised {type(err).__name__}: {err}")
            continue
        changed += report.nodes_after != report.nodes_before
        outcome = run_case(optimized, case)
        if not outcome.ok:
            failures.append(f"{case.name}: {outcome.reason}")
    print(f"{len(cases)} node tests, {counted} run in ORT, {changed} changed by cleanup, {len(failures)} broken")
    assert counted > 1000 and changed > 100
    assert failures == [], "\n".join(failures)
