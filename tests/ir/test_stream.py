"""The streamed save writes exactly the bytes SerializeToString would."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from graphtool import io
from graphtool.ir.stream import split_at_field, varint
from tests.conftest import FIXTURES


@pytest.mark.parametrize("dtype", ["float32", "float16", "int64", "int8", "uint16", "bool", "float64"])
def test_array_backed_initializers_stream_identically(tmp_path, dtype):
    model = io.load(f"{FIXTURES}/conv_bn.onnx")
    g = model.graph
    rng = np.random.default_rng(0)
    g.add_initializer((rng.standard_normal((3, 5)) * 10).astype(dtype), "extra")
    g.add_initializer(np.broadcast_to(np.array(1, dtype=dtype), (4, 4)), "view")  # zero-stride view
    g.add_initializer(np.array(7, dtype=dtype), "scalar")
    out = tmp_path / "m.onnx"
    io.save(model, out)
    assert out.read_bytes() == io.to_bytes(model)
    onnx.checker.check_model(str(out))


def test_string_initializers_take_the_proto_path(tmp_path):
    model = io.load(f"{FIXTURES}/dead_branch.onnx")
    model.graph.add_initializer(np.array(["a", "bc"], dtype=object), "s")
    io.save(model, tmp_path / "m.onnx")
    assert (tmp_path / "m.onnx").read_bytes() == io.to_bytes(model)


def test_split_at_field_finds_the_insertion_point():
    proto = helper.make_tensor("t", TensorProto.FLOAT, [2], [1.0, 2.0])
    data = proto.SerializeToString()
    head, tail = split_at_field(data, 2)  # dims(1), data_type(2) | float_data(4), name(8)
    assert head + tail == data
    back = TensorProto()
    back.ParseFromString(head)
    assert list(back.dims) == [2] and back.data_type == TensorProto.FLOAT and not back.name
    assert varint(300) == b"\xac\x02"
