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
