"""TypeOnly value_info entries (graphtool.ir.value_infos): shared types, real bytes."""

from __future__ import annotations

import onnx
from onnx import GraphProto, TensorProto, ValueInfoProto, helper

from graphtool import io
from graphtool.ir.value_infos import TypeOnly, as_proto, records
from tests.passes.helpers import model


def _mixed() -> list:
    shared = helper.make_tensor_type_proto(TensorProto.FLOAT, [2, "N", 3])
    return [TypeOnly("a", shared), helper.make_tensor_value_info("b", TensorProto.INT64, [4]),
            TypeOnly("c" * 200, shared), TypeOnly("d", helper.make_tensor_type_proto(TensorProto.BOOL, []))]


def test_records_are_the_bytes_upb_writes():
    infos = _mixed()
    expected = GraphProto(value_info=[as_proto(i) for i in infos]).SerializeToString()
    assert records(infos) == expected
    assert GraphProto.FromString(records(infos)).value_info[2].name == "c" * 200


def test_a_graph_with_type_only_entries_saves_copies_and_renames():
    m = model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["y"])],
              inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
              outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    shared = helper.make_tensor_type_proto(TensorProto.FLOAT, [2, 3])
    m.graph.value_info["r"] = TypeOnly("r", shared)
    saved = io.to_bytes(m)
    reloaded = io.load_proto(onnx.load_from_string(saved))
    info = reloaded.graph.value_info["r"]
    assert isinstance(info, ValueInfoProto) and info.type == shared
    copy = m.copy()
    assert copy.graph.value_info["r"] is m.graph.value_info["r"]  # shared: nothing edits it
    assert io.to_bytes(copy) == saved
    copy.graph.rename_value("r", "r2")
    assert copy.graph.value_info["r2"].name == "r2" and m.graph.value_info["r"].name == "r"
    assert copy.graph.declared_shape("r2") == [2, 3]


def test_check_looks_at_attributes_without_keeping_them_parsed(tmp_path):
    """A whole-graph reader that only looks (the schema check, the spec rules) leaves each op's
    template serialized: on a million-op graph keeping them parsed cost ~350 MB."""
    from graphtool.check import check

    m = model([helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]), helper.make_node("Relu", ["t"], ["y"])],
              inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
              outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])])
    io.save(m, str(tmp_path / "m.onnx"))
    m = io.load(str(tmp_path / "m.onnx"))  # loaded from a file: templates stay bytes
    transpose = m.graph.nodes("Transpose")[0]
    assert isinstance(transpose._data.template, bytes)
    assert check(m).summary() == "0 errors, 0 warnings"
    assert isinstance(transpose._data.template, bytes) and transpose._data._attrs is None
    assert transpose.attr("perm") == [1, 0]  # a pass that needs them still parses them
