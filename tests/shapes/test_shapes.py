"""graphtool.shapes.oracle: the one shape oracle — lazy reruns, facts kept across runs, run-local symbols,
and the one call site of onnx.shape_inference."""

from __future__ import annotations

import os
import re

import numpy as np
from onnx import TensorProto, helper

from graphtool.shapes import ShapeOracle, declared_dims
from tests.passes.helpers import const, model, vi

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _chain():
    """x[b, 8] → Relu → MatMul(8x4) → Tanh: inference gives every value a shape."""
    return model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("MatMul", ["r", "w"], ["m"]),
                  helper.make_node("Tanh", ["m"], ["y"])],
                 [vi("x", ["b", 8])], [vi("y", ["b", 4])], [const("w", np.ones((8, 4), np.float32))])


def test_runs_once_until_invalidated():
    m = _chain()
    oracle = ShapeOracle(m)
    assert oracle.dims(m.graph, "m") == ["b", 4] and oracle.runs == 1
    oracle.dims(m.graph, "r")
    assert oracle.runs == 1  # no edit, no rerun
    oracle.invalidate()
    assert oracle.dims(m.graph, "r") == ["b", 8] and oracle.runs == 2


def test_a_later_run_that_knows_less_keeps_what_the_earlier_one_proved():
    """A com.microsoft op (no ONNX schema) stops inference; the values after it keep their dims."""
    m = _chain()
    oracle = ShapeOracle(m)
    assert oracle.dims(m.graph, "y") == ["b", 4]
    g = m.graph
    relu = g.producer("r")
    g.remove_nodes([relu])
    g.add_node("FusedThing", ["x"], ["r"], domain="com.microsoft")
    oracle.invalidate()
    assert oracle.dims(g, "y") == ["b", 4] and oracle.runs == 2


def test_made_up_symbols_are_marked_with_their_run_and_unified_across_runs():
    m = model([helper.make_node("Reshape", ["x", "s"], ["r"]), helper.make_node("Relu", ["r"], ["y"])],
              [vi("x", ["b", 8]), vi("s", [2], TensorProto.INT64)], [vi("y", None)], check=False)
    oracle = ShapeOracle(m)
    first = oracle.dims(m.graph, "r")
    assert first is not None and all(re.fullmatch(r"unk__\d+@run1", d) for d in first)
    g = m.graph
    g.add_node("Neg", ["r"], ["later"])  # a value made after run 1 gets run 2's symbols, renamed to run 1's
    oracle.invalidate()
    assert oracle.dims(g, "later") == first and oracle.runs == 2


def test_another_tools_made_up_dims_are_unknown_and_inferred_again():
    """onnxruntime's float16 converter keeps the value_info its own inference made, unk__N included:
    r declared [unk__0, unk__1] where inference now knows [b, 8]. Declared, they stood in for the dims
    (a rotary's 'rotated size unk__19 is not a static even number'); now they are unknown to passes
    (declared_dims) and to inference, which fills them. Graph inputs and outputs keep their symbols."""
    m = model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Tanh", ["r"], ["y"])],
              [vi("x", ["b", 8])], [vi("y", ["unk__7", 8])], value_info=[vi("r", ["unk__0", "unk__1"])])
    assert m.graph.declared_shape("r") == ["unk__0", "unk__1"]  # the IR keeps what the file says
    assert declared_dims(m.graph, "r") == [None, None]
    assert declared_dims(m.graph, "y") == ["unk__7", 8] and declared_dims(m.graph, "x") == ["b", 8]
    assert ShapeOracle(m).dims(m.graph, "r") == ["b", 8]


def test_subgraph_values_are_answered():
    then = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [], [vi("t", ["b", 8])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [vi("e", ["b", 8])])
    m = model([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
              [vi("x", ["b", 8]), vi("c", [], TensorProto.BOOL)], [vi("y", ["b", 8])])
    branch = m.graph.nodes("If")[0].attr("then_branch")
    assert ShapeOracle(m).dims(branch, "x") == ["b", 8]  # an outer value, seen from the branch


def test_one_call_site_of_onnx_shape_inference():
    calls = []
    for folder in ("graphtool", "passes"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, folder)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(dirpath, name)
                    text = open(path, encoding="utf-8").read()
                    calls += [os.path.relpath(path, ROOT)] * len(re.findall(r"shape_inference\.infer_shapes\(", text))
    assert calls == ["graphtool/shapes/oracle.py"], calls
