"""load/save: lossless round-trip, external data, atomic writes, path safety."""

from __future__ import annotations

import hashlib
import os
import shutil

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from graphtool import io
from graphtool.errors import BadModel, UnsafePath
from tests.conftest import FIXTURES


@pytest.mark.parametrize("name", ["conv_bn", "dead_branch", "constant_chain", "if_subgraph", "local_function"])
def test_fixture_round_trip_is_byte_identical(tmp_path, name):
    src = f"{FIXTURES}/{name}.onnx"
    out = tmp_path / "out.onnx"
    io.save(io.load(src), out)
    assert out.read_bytes() == onnx.load(src).SerializeToString()


def _sha(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_external_data_round_trip_keeps_every_weight(tmp_path):
    src = f"{FIXTURES}/external_data.onnx"
    out = tmp_path / "copy.onnx"
    io.save(io.load(src), out)
    assert os.path.exists(str(out) + ".data")
    a = {t.name: onnx.numpy_helper.to_array(t, FIXTURES) for t in onnx.load(src).graph.initializer}
    b = {t.name: onnx.numpy_helper.to_array(t, str(tmp_path)) for t in onnx.load(str(out)).graph.initializer}
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].tobytes() == b[k].tobytes()
    x = np.random.default_rng(0).standard_normal((3, 64)).astype(np.float32)
    ya = ort.InferenceSession(src).run(None, {"x": x})[0]
    yb = ort.InferenceSession(str(out)).run(None, {"x": x})[0]
    assert np.array_equal(ya, yb)


def _external_model(tmp_path, location: str) -> str:
    model = onnx.load(f"{FIXTURES}/external_data.onnx", load_external_data=False)
    for t in model.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = location
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    return str(path)


@pytest.mark.parametrize("location", ["../secret.bin", "/etc/passwd", "sub/../../x.bin"])
def test_external_path_leaving_folder_is_refused(tmp_path, location):
    (tmp_path.parent / "secret.bin").write_bytes(b"\0" * 100000)
    with pytest.raises(UnsafePath):
        io.load(_external_model(tmp_path, location))


def test_symlink_leaving_folder_is_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "w.bin").write_bytes(open(f"{FIXTURES}/external_data.onnx.data", "rb").read())
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    os.symlink(outside / "w.bin", model_dir / "w.bin")
    with pytest.raises(UnsafePath):
        io.load(_external_model(model_dir, "w.bin"))


def test_external_range_past_eof_is_refused(tmp_path):
    shutil.copy(f"{FIXTURES}/external_data.onnx.data", tmp_path / "w.bin")
    with open(tmp_path / "w.bin", "r+b") as f:
        f.truncate(1000)
    with pytest.raises(BadModel, match="past the end"):
        io.load(_external_model(tmp_path, "w.bin"))


def test_failed_save_leaves_no_file(tmp_path, monkeypatch):
    model = io.load(f"{FIXTURES}/conv_bn.onnx")
    target = tmp_path / "out.onnx"

    def boom(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr(io, "write_model", boom)  # the inline save fails after its temp file exists
    with pytest.raises(RuntimeError):
        io.save(model, target)
    assert os.listdir(tmp_path) == []


def test_graphsurgeon_bridge_round_trips():
    from graphtool.ir.gs import from_gs, to_gs

    model = io.load(f"{FIXTURES}/conv_bn.onnx")
    graph = to_gs(model)
    assert len(graph.nodes) == 6
    back = from_gs(graph.cleanup().toposort(), like=model)
    assert [n.op_type for n in back.graph.topological_order()] == [n.op_type for n in model.graph.topological_order()]
    assert back.proto_shell.metadata_props == model.proto_shell.metadata_props
