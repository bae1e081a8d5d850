"""The compact inner adjacencies (``graphtool.ir.adjacency``): NetworkX still sees an ordinary
MultiDiGraph, every edit leaves each inner adjacency in its one right shape, and a copy that
shares them never passes an edit back to the original."""

from __future__ import annotations

from collections.abc import Mapping

import networkx as nx
import pytest
from onnx import TensorProto, helper

from graphtool import io
from graphtool.ir.adjacency import NO_NEIGHBORS, One, drop, put
from graphtool.ir.graph import Graph


def _shapes_ok(graph: Graph) -> None:
    """Empty is the shared NO_NEIGHBORS, one neighbor a One, two or more a dict; both sides agree."""
    for outer, other in ((graph._succ, graph._pred), (graph._pred, graph._succ)):
        for n, inner in outer.items():
            if type(inner) is dict:
                assert len(inner) >= 2, (n, inner)
            elif type(inner) is One:
                pass
            else:
                assert inner is NO_NEIGHBORS, (n, inner)
            for neighbor, keys in inner.items():
                assert other[neighbor][n] is keys


def _model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r"),
             helper.make_node("Mul", ["a", "a"], ["b"], name="m"),  # one neighbor, two slots
             helper.make_node("Add", ["a", "b"], ["y"], name="s")]  # "a" read by two ops
    graph = helper.make_graph(nodes, "g", [x], [y])
    return io.load_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def test_one_reads_like_a_one_entry_dict():
    one, ref = One("v", {0: {}}), {"v": {0: {}}}
    assert isinstance(one, Mapping) and one == ref and ref == dict(one)
    assert list(one) == list(ref) and list(one.items()) == list(ref.items()) and len(one) == 1
    assert one["v"] is one.get("v") and "v" in one and "w" not in one and one.get("w", 3) == 3
    assert one.copy() == ref and type(one.copy()) is dict
    with pytest.raises(KeyError):
        one["w"]
    with pytest.raises(TypeError):
        one["w"] = {}  # read-only: the IR replaces, never edits


def test_put_and_drop_move_between_shapes():
    outer = {"n": NO_NEIGHBORS}
    put(outer, "n", 1, "k1")
    assert type(outer["n"]) is One and outer["n"] == {1: "k1"}
    put(outer, "n", 1, "k1b")  # same neighbor: replaced
    assert type(outer["n"]) is One and outer["n"][1] == "k1b"
    put(outer, "n", 2, "k2")
    assert outer["n"] == {1: "k1b", 2: "k2"} and type(outer["n"]) is dict
    drop(outer, "n", 1)
    assert type(outer["n"]) is One and outer["n"] == {2: "k2"}
    with pytest.raises(KeyError):
        drop(outer, "n", 1)
    drop(outer, "n", 2)
    assert outer["n"] is NO_NEIGHBORS


def test_networkx_views_see_every_edge():
    g = _model().graph
    _shapes_ok(g)
    mul = g.nodes("Mul")[0]
    assert sorted(k for _, _, k in g.nx.in_edges(mul.id, keys=True)) == [0, 1]
    assert g.nx.has_edge("a", mul.id, key=1) and not g.nx.has_edge("a", mul.id, key=2)
    assert set(g.nx.successors("a")) == {mul.id, g.nodes("Add")[0].id}
    assert g.nx.number_of_edges() == 8  # x->r, r->a, a->m twice, m->b, a->s, b->s, s->y
    assert nx.is_directed_acyclic_graph(g.nx)
    assert [n.op_type for n in g.topological_order()] == ["Relu", "Mul", "Add"]


def test_edits_keep_shapes_and_copies_stay_apart():
    model = _model()
    copy = model.copy()
    g = copy.graph
    relu, mul, add = g.nodes("Relu")[0], g.nodes("Mul")[0], g.nodes("Add")[0]
    g.set_input(mul, 1, "x")
    _shapes_ok(g)
    g.replace_all_uses("a", "x")
    _shapes_ok(g)
    g.remove_nodes([relu])
    _shapes_ok(g)
    neg = g.add_node("Neg", ["b"], 1, near=add)
    g.set_input(add, 1, neg.outputs[0])
    _shapes_ok(g)
    g.rename_value("b", "b2")
    _shapes_ok(g)
    assert [n.op_type for n in g.topological_order()] == ["Mul", "Neg", "Add"]
    original = model.graph
    _shapes_ok(original)
    assert [n.op_type for n in original.topological_order()] == ["Relu", "Mul", "Add"]
    assert original.nodes("Mul")[0].inputs == ["a", "a"] and original.consumers("a")
    assert io.to_bytes(model) == io.to_bytes(_model())  # the original is as loaded
