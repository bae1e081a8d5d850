"""The plugin's own tests: the smallest graph showing each pattern, the structure after the
pass, and the same outputs through onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import graphtool as gt
from graphtool.io import to_bytes


def _model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Identity", ["x"], ["i"]),
        helper.make_node("Mul", ["i", "two"], ["m1"]),
        helper.make_node("Mul", ["three", "m1"], ["m2"]),
        helper.make_node("Identity", ["m2"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             numpy_helper.from_array(np.array(3.0, np.float32), "three")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _run(proto: onnx.ModelProto | bytes, x: np.ndarray) -> np.ndarray:
    data = proto if isinstance(proto, bytes) else proto.SerializeToString()
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_both_passes(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_model(), path)
    m = gt.load(path)
    out, report = gt.optimize(m, passes=["my-identity-remover", "merge-scalar-muls"])
    assert [n.op_type for n in out.graph.nodes()] == ["Mul"]
    assert list(out.graph.outputs) == ["y"]  # the output kept its name
    assert report.passes["my-identity-remover"].stats["removed"] == 2
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_allclose(_run(to_bytes(out), x), _run(_model(), x), rtol=1e-6)
    assert gt.verify(m, out).ok


def test_not_run_unless_asked(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_model(), path)
    out, report = gt.optimize(gt.load(path))  # the default level-1 pipeline: built-ins only
    assert "merge-scalar-muls" not in report.passes
    assert [n.op_type for n in out.graph.nodes()] == ["Mul", "Mul"]
    out, report = gt.optimize(gt.load(path), plugins="all")
    assert report.plugins and [n.op_type for n in out.graph.nodes()] == ["Mul"]
