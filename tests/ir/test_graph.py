"""The editing vocabulary of the IR on small real graphs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from graphtool import io
from graphtool.ir.graph import CAPTURE
from graphtool.ir.to_onnx import to_onnx
from tests.conftest import FIXTURES


def _load(name: str):
    return io.load(f"{FIXTURES}/{name}.onnx")


def test_producer_consumers_and_slots():
    m = _load("dead_branch")
    g = m.graph
    mm = g.producer("mm")
    assert mm.op_type == "MatMul" and mm.inputs == ["x", "w"] and mm.outputs == ["mm"]
    assert sorted(n.name for n in g.consumers("mm")) == ["dead_sigmoid", "identity1"]
    assert g.producer("x") is None and g.is_input("x") and g.is_output("y")
    assert g.const("w") is not None and g.const("x") is None


def test_parallel_edges_keep_both_slots():
    node = helper.make_node("Mul", ["x", "x"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    m = io.load_proto(helper.make_model(graph))
    mul = m.graph.nodes("Mul")[0]
    assert mul.inputs == ["x", "x"]
    assert [slot for _, slot in m.graph.uses("x")] == [0, 1]


def test_omitted_optional_inputs_are_gaps():
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest")
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")])
    model = helper.make_model(graph)
    m = io.load_proto(model)
    assert m.graph.nodes("Resize")[0].inputs == ["x", "", "scales"]
    assert to_onnx(m).SerializeToString() == model.SerializeToString()


def test_replace_all_uses_and_remove_keep_graph_valid():
    m = _load("dead_branch")
    g = m.graph
    for ident in g.nodes("Identity"):
        g.replace_all_uses(ident.outputs[0], ident.inputs[0])
        g.remove_nodes([ident])
    assert [n.op_type for n in g.topological_order()] == ["MatMul", "Relu", "Sigmoid", "Tanh"]
    assert g.producer("y").inputs == ["mm"]
    assert not g.has_value("id1") and not g.has_value("id2")
    onnx.checker.check_model(to_onnx(m), full_check=True)


def _graph(nodes, outputs=("y",)):
    """A one-graph model of float [2] values read from x (and bool c), loaded."""
    def infos(names, dtype=TensorProto.FLOAT, shape=(2,)):
        return [helper.make_tensor_value_info(n, dtype, list(shape)) for n in names]

    graph = helper.make_graph(nodes, "g", infos(["x"]) + infos(["c"], TensorProto.BOOL, ()), infos(outputs))
    return io.load_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])).graph


def test_replace_all_uses_moves_every_slot_and_keeps_the_order_of_edges():
    """What one slot at a time would leave: a reader keeps its place among the new value's
    readers and its slots in order; the new value joins the reader's inputs last."""
    g = _graph([helper.make_node("Relu", ["x"], ["old"]), helper.make_node("Abs", ["x"], ["new"]),
                helper.make_node("Sum", ["new", "old", "old"], ["s"]), helper.make_node("Add", ["old", "x"], ["t"]),
                helper.make_node("Add", ["s", "t"], ["y"])])
    total, add = g.producer("s"), g.producer("t")
    g.replace_all_uses("old", "new")
    assert total.inputs == ["new", "new", "new"] and add.inputs == ["new", "x"]
    assert g.uses("new") == [(total, 0), (total, 1), (total, 2), (add, 0)] and g.uses("old") == []
    assert list(g.nx.pred[add.id]) == ["x", "new"] and list(g.nx.pred[total.id]) == ["new"]
    assert g._in_order  # Abs, which makes "new", comes before every reader


def test_replace_all_uses_with_a_value_made_later_clears_the_load_order():
    g = _graph([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["n"]),
                helper.make_node("Abs", ["x"], ["b"]), helper.make_node("Add", ["n", "b"], ["y"])])
    g.replace_all_uses("a", "b")  # Neg, second in the file, now reads what the third op makes
    assert not g._in_order
    order = [n.op_type for n in g.topological_order()]
    assert order.index("Abs") < order.index("Neg")


def test_replace_all_uses_follows_into_subgraphs_that_read_both_values():
    then_g = helper.make_graph([helper.make_node("Neg", ["old"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])])
    else_g = helper.make_graph([helper.make_node("Add", ["old", "new"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2])])
    g = _graph([helper.make_node("Relu", ["x"], ["old"]), helper.make_node("Abs", ["x"], ["new"]),
                helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)])
    branch = g.nodes("If")[0]
    g.replace_all_uses("old", "new")
    assert [(v, k) for v, _, k in g.nx.in_edges(branch.id, keys=True)] == [("c", 0), ("new", CAPTURE)]
    assert [sub.free_values() for sub in branch.subgraphs()] == [["new"], ["new"]]
    assert branch.attrs["else_branch"].producer("e").inputs == ["new", "new"]


def test_add_node_lands_near_its_anchor_in_saved_order():
    m = _load("dead_branch")
    g = m.graph
    relu = g.nodes("Relu")[0]
    neg = g.add_node("Neg", [relu.inputs[0]], 1, near=relu)
    g.set_input(relu, 0, neg.outputs[0])
    order = [n.op_type for n in g.topological_order()]
    assert order.index("Neg") == order.index("Relu") - 1
    onnx.checker.check_model(to_onnx(m), full_check=True)


def test_topological_order_keeps_file_order_and_detects_cycles():
    m = _load("conv_bn")
    assert [n.name for n in m.graph.topological_order()] == [n.name for n in m.graph.nodes()]
    nodes = [helper.make_node("Relu", ["b"], ["a"]), helper.make_node("Relu", ["a"], ["b"])]
    graph = helper.make_graph(nodes, "cyc", [], [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1])])
    with pytest.raises(Exception, match="cycle"):
        io.load_proto(helper.make_model(graph))


def test_subgraph_reads_outer_values_through_capture_edges():
    m = _load("if_subgraph")
    g = m.graph
    branch = g.nodes("If")[0]
    captured = {v for v, _, k in g.nx.in_edges(branch.id, keys=True) if k == CAPTURE}
    assert captured == {"x_scaled", "bias"}
    assert branch in g.consumers("x_scaled")
    then_g = branch.attrs["then_branch"]
    assert then_g.parent is g and then_g.is_free("bias")
    assert then_g.const("bias") is not None  # resolved through the enclosing scope
    # renaming the outer value follows into the subgraphs
    g.rename_value("x_scaled", "xs")
    assert then_g.has_value("xs") and not then_g.has_value("x_scaled")
    onnx.checker.check_model(to_onnx(m), full_check=True)


def test_local_function_bodies_are_graphs():
    m = _load("local_function")
    assert [f.name for f in m.functions] == ["Standardize"]
    body = m.functions[0].body
    assert list(body.inputs) == ["X"] and list(body.outputs) == ["Y"]
    assert len(body) == 7
    scopes = [scope for scope, _ in m.graphs()]
    assert scopes == ["main", "function custom:Standardize"]


def test_dangling_value_is_bad_model():
    nodes = [helper.make_node("Relu", ["nowhere"], ["y"])]
    graph = helper.make_graph(nodes, "g", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    with pytest.raises(Exception, match="never defined"):
        io.load_proto(helper.make_model(graph))


def test_lazy_external_tensor_reads_nothing_until_asked(tmp_path):
    m = io.load(f"{FIXTURES}/external_data.onnx")
    w1 = m.graph.initializers["w1"]
    assert w1.external is not None and w1._array is None
    assert w1.nbytes == 64 * 64 * 4 and w1.dims == (64, 64)
    assert w1.numpy().shape == (64, 64)


# ------------------------------------------------------------------ the compact records (issue 19)


def _chain_model(n: int, ops: tuple[str, ...] = ("Relu",)):
    nodes = [helper.make_node(ops[i % len(ops)], [f"v{i}"], [f"v{i + 1}"], name=f"n{i}") for i in range(n)]
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(nodes, "chain", [vi("v0", TensorProto.FLOAT, [2])], [vi(f"v{n}", TensorProto.FLOAT, [2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_networkx_dicts_shared_by_many_refuse_writes():
    """Key dicts, edge data and value attributes are shared: NetworkX's writers must fail loudly."""
    g = io.load_proto(_chain_model(3)).graph
    relu = g.nodes()[0]
    with pytest.raises(TypeError, match="shared"):
        g.nx.add_edge("v0", relu.id, key=0, weight=1)
    with pytest.raises(TypeError):
        g.nx.nodes["v1"]["color"] = "red"
    # the reading API sees an ordinary MultiDiGraph
    assert list(g.nx.in_edges(relu.id, keys=True)) == [("v0", relu.id, 0)]
    assert g.nx.has_edge(relu.id, "v1", key=0) and g.nx.nodes[relu.id]["op_type"] == "Relu"


def test_copy_is_independent_and_serializes_the_same():
    m = _load("if_subgraph")
    copy = m.copy()
    assert io.to_bytes(copy) == io.to_bytes(m)
    branch = copy.graph.nodes("If")[0]
    then_g = branch.attrs["then_branch"]
    assert then_g.parent is copy.graph and then_g is not m.graph.nodes("If")[0].attrs["then_branch"]
    before = io.to_bytes(m)
    g = copy.graph
    first = g.topological_order()[0]
    g.set_input(first, 0, first.inputs[0])  # no-op
    neg = g.add_node("Neg", [first.outputs[0]], 1, near=first)
    g.replace_all_uses(first.outputs[0], neg.outputs[0])
    g.set_input(neg, 0, first.outputs[0])
    for info in g.value_info.values():
        info.doc_string = "edited"
    assert io.to_bytes(m) == before  # nothing reached the original
    assert io.to_bytes(copy) != before


def test_edges_only_edit_reuses_the_template_bytes():
    """An op whose inputs changed is written by splicing its template (``to_onnx._with_io``): the
    same bytes as building the NodeProto field by field."""
    from graphtool.ir.graph import EDITED
    from graphtool.ir.to_onnx import _node_bytes, node_to_proto

    m = _load("conv_bn")
    g = m.graph
    conv = g.nodes("Conv")[0]
    g.set_input(conv, 0, conv.inputs[0])  # unchanged: not even marked
    assert not conv._data.dirty
    other = g.add_node("Identity", [conv.inputs[0]], 1)
    g.set_input(conv, 0, other.outputs[0])
    assert conv._data.dirty and conv._data.dirty != EDITED
    spliced = _node_bytes(conv, lambda t: t.proto)
    assert spliced == node_to_proto(conv).SerializeToString()
    assert onnx.NodeProto.FromString(spliced).input[0] == other.outputs[0]
    conv.attrs  # parsed template: the same splice from the parsed form
    assert _node_bytes(conv, lambda t: t.proto) == spliced


def test_huge_graphs_load_from_node_chunks(monkeypatch, tmp_path):
    """io.load builds a big main graph from chunks of its node records (the parse of all nodes
    is never alive beside the IR); the result is the same IR, byte for byte, wherever the node
    records sit in the file (here: split by the graph's name and doc string)."""
    model = _chain_model(11, ("Relu", "Neg", "Abs"))
    model.graph.doc_string = "d"
    g = model.graph
    nodes = [n.SerializeToString() for n in g.node]
    head = onnx.GraphProto()
    head.CopyFrom(g)
    del head.node[:]
    from graphtool.ir.protos import key, varint

    def rec(field, body):
        return key(field) + varint(len(body)) + body

    graph_bytes = (b"".join(rec(1, b) for b in nodes[:4]) + rec(2, b"chain") + b"".join(rec(1, b) for b in nodes[4:9])
                   + rec(10, b"d") + b"".join(rec(1, b) for b in nodes[9:]) + head.SerializeToString())
    shell = onnx.ModelProto()
    shell.CopyFrom(model)
    shell.ClearField("graph")
    path = tmp_path / "m.onnx"
    path.write_bytes(shell.SerializeToString() + rec(7, graph_bytes))
    expected = onnx.load(str(path)).SerializeToString()
    whole = io.load(path)
    monkeypatch.setattr(io, "BATCH_NODES", 2)
    monkeypatch.setattr(io, "NODES_PER_CHUNK", 3)
    chunks = []
    real = io._chunked_nodes
    monkeypatch.setattr(io, "_chunked_nodes", lambda parts: (chunks.extend(parts), real(list(parts)))[1])
    chunked = io.load(path)
    assert len(chunks) == 5  # 3+1 | 3+2 | 1 records: a chunk ends where another field interrupts
    assert io.to_bytes(chunked) == io.to_bytes(whole) == expected
    assert [n.name for n in chunked.graph.topological_order()] == [f"n{i}" for i in range(11)]


def test_file_order_that_is_not_topological_is_sorted_and_cycles_found():
    model = _chain_model(4)
    model.graph.node.reverse()  # every op read before it is produced
    m = io.load_proto(model)
    assert not m.graph._in_order
    assert [n.name for n in m.graph.topological_order()] == ["n0", "n1", "n2", "n3"]
    assert not m.pristine()  # copied through serialization (renumbered), not structurally
