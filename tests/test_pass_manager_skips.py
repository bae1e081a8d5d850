"""The fixed-point runner skips what cannot change (graphtool.pass_manager), and the IR keeps its
load order valid through merges (ir.edit ``_keeps_order``): both on real onnx-wheel models."""

from __future__ import annotations

import glob
import os

import onnx.backend.test
from onnx import helper

from graphtool import io
from graphtool.ir.model import Model
from graphtool.pass_manager import Pass, PassContext, PassManager, PassResult
from tests.passes.helpers import F, make_proto, vi

LIGHT = sorted(glob.glob(os.path.join(os.path.dirname(onnx.backend.test.__file__), "data", "light", "*.onnx")))


def _kahn(graph) -> list[int]:
    """Kahn's algorithm as the IR runs it once its load order is no longer known to hold."""
    graph._in_order = False
    try:
        return graph.topological_ids()
    finally:
        graph._in_order = True


def test_merging_into_an_earlier_value_keeps_the_load_order():
    # the edit CSE makes: readers of a later duplicate read the earlier value
    for path in LIGHT[:4]:
        g = io.load(path).graph
        ops = g.topological_order()
        first = next(n for n in ops if n.outputs and g.consumers(n.outputs[0]))
        later = next(n for n in ops[ops.index(first) + 1:] if n.outputs and g.consumers(n.outputs[0])
                     and all(c.id > first.id for c in g.consumers(n.outputs[0])))
        g.replace_all_uses(later.outputs[0], first.outputs[0])
        assert g._in_order, path
        assert g.topological_ids() == _kahn(g), path


def test_reading_a_value_made_later_clears_the_load_order():
    proto = make_proto([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["x"], ["b"]),
                        helper.make_node("Add", ["a", "b"], ["y"])], [vi("x", [2])], [vi("y", [2])])
    g = io.load_proto(proto).graph
    relu, neg = g.producer("a"), g.producer("b")
    g.set_input(relu, 0, "b")  # Relu (first in the file) now reads Neg's output
    assert not g._in_order
    order = g.topological_order()
    assert order.index(neg) < order.index(relu)


class _Counting(Pass):
    """Counts its runs; changes the graph (by the test's script) on the runs listed."""

    changes_on: tuple[int, ...] = ()

    def __init__(self) -> None:
        self.calls = 0

    def run(self, graph, ctx: PassContext) -> PassResult:
        self.calls += 1
        return PassResult(self.calls in self.changes_on)


def _manager(model: Model, *classes: type[Pass]) -> tuple[PassManager, list[Pass]]:
    made: list[Pass] = []

    def factory(cls: type[Pass]) -> type[Pass]:
        def build() -> Pass:
            p = cls()
            made.append(p)
            return p
        return build  # type: ignore[return-value]

    return PassManager([factory(c) for c in classes]), made


def _model() -> Model:
    return io.load(LIGHT[0])


def test_a_pass_that_found_nothing_is_not_rerun_on_the_same_graph():
    class Changer(_Counting):
        name, changes_on = "changer", (1,)

    class Idle(_Counting):
        name = "idle"

    class After(_Counting):
        name = "after"

    m = _model()
    manager, made = _manager(m, Changer, Idle, After)
    report = manager.run(m, PassContext(m))
    changer, idle, after = made
    # round 1: all three, Idle and After seeing the graph as Changer left it; round 2: only
    # Changer (the graph changed since it ran), which changes nothing, so the run ends
    assert (changer.calls, idle.calls, after.calls) == (2, 1, 1)
    assert report.iterations == 2 and report.passes["idle"].runs == report.passes["after"].runs == 1


def test_an_idempotent_pass_is_not_rerun_after_its_own_change_on_one_graph():
    class Once(_Counting):
        name, changes_on, idempotent = "once", (1,), True

    class Plain(_Counting):
        name, changes_on = "plain", (1,)

    for cls, calls in ((Once, 1), (Plain, 2)):
        m = _model()
        manager, made = _manager(m, cls)
        manager.run(m, PassContext(m))
        assert made[0].calls == calls, cls.name


def test_an_idempotent_pass_reruns_when_the_model_has_subgraphs():
    class Once(_Counting):
        name, changes_on, idempotent = "once", (1, 2), True

    path = os.path.join(os.path.dirname(__file__), "..", "fixtures", "if_subgraph.onnx")
    m = io.load(path)
    assert sum(1 for _ in m.graphs()) > 1
    manager, made = _manager(m, Once)
    manager.run(m, PassContext(m))
    graphs = sum(1 for _ in m.graphs())
    # every graph of the model is a call; the pass ran a second round because a subgraph
    # runs before its owner and could have been given new work
    assert made[0].calls > graphs
