"""The graph-editing verbs (graphtool/ir/surgery.py) and the graphsurgeon-style session of
docs/graph-editing.md: find, insert, cut, export — and the exported model runs in onnxruntime."""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import graphtool as gt
from tests.conftest import FIXTURES, light_model

RESNET = light_model("resnet50")  # the onnx wheel's ResNet-50 (caffe2 export, IR 3, no value_info)


def _run(path: str, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)


def test_shape_answers_for_a_conv_output_once_the_input_is_fixed():
    """Why it was None: ``shape`` read only what the file declares, and exporters declare the
    inputs and outputs, not the Conv outputs. Now it asks ONNX shape inference (cached until an edit)."""
    m = gt.load(os.path.join(FIXTURES, "torch", "cnn_ts.onnx"))
    g = m.graph
    conv = g.find(op_type="Conv")[0]
    assert g.declared_shape(conv.outputs[0]) is None
    assert g.shape(conv.outputs[0]) == ["batch", 16, 32, 32]
    g.set_shape("pixel_values", [1, 3, 224, 224])  # fix the input
    assert g.shape(conv.outputs[0]) == [1, 16, 224, 224]
    r = gt.load(RESNET).graph
    assert r.shape(r.find(op_type="Conv")[0].outputs[0]) == [1, 64, 112, 112]


def test_the_graphsurgeon_session(tmp_path):
    # --- as in docs/graph-editing.md
    m = gt.load(RESNET)
    g = m.graph
    data = "gpu_0/data_0"
    first_conv = g.find(op_type="Conv")[0]
    assert g.find(name=first_conv.name) == [first_conv]
    assert g.shape(first_conv.outputs[0]) == [1, 64, 112, 112]
    # insert: clamp what the first Conv makes; every reader now reads the Clip
    clip = g.insert_after(first_conv.outputs[0], "Clip", attrs={"min": -6.0, "max": 6.0}, name="clamp")  # opset 9
    assert [n.op_type for n in g.consumers(clip.outputs[0])] == ["BatchNormalization"]
    assert g.consumers(first_conv.outputs[0]) == [clip]
    # cut: from the input to the end of the first residual block
    block_end = g.find(op_type="Relu")[3].outputs[0]
    head = m.extract([data], [block_end])
    assert list(head.graph.inputs)[0] == data and list(head.graph.outputs) == [block_end]
    assert len(head.graph) < len(g) and head.graph.find(name="clamp")
    assert head.graph.shape(block_end) == [1, 256, 56, 56]
    # export, and run
    path = str(tmp_path / "head.onnx")
    gt.save(head, path)
    onnx.checker.check_model(path)
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    feeds = {data: x}
    (out,) = _run(path, feeds)
    assert out.shape == (1, 256, 56, 56)
    # the same tensor read out of the whole edited model agrees
    whole = m.copy()
    whole.graph.set_graph_outputs([block_end])
    whole_path = str(tmp_path / "whole.onnx")
    gt.save(whole, whole_path)
    full_feeds = {n: feeds[n] for n in feeds}
    (ref,) = _run(whole_path, full_feeds)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    # the original model is untouched by the cut
    assert list(m.graph.outputs) == ["gpu_0/softmax_1"]


def test_bypass_replace_and_cleanup(tmp_path):
    m = gt.load(os.path.join(FIXTURES, "torch", "cnn_ts.onnx"))
    g = m.graph
    relu = g.find(op_type="Relu")[0]
    name, outputs = relu.name, relu.outputs
    leaky = g.replace_node(relu, "LeakyRelu", attrs={"alpha": 0.1})
    assert leaky.outputs == outputs and leaky.name == name and not g.has_node(relu)
    n = len(g)
    g.bypass(leaky)
    assert len(g) == n - 1 and not g.find(op_type="LeakyRelu")
    # choose an inner value as the only output: cleanup drops everything after it
    inner = g.find(op_type="Add")[0].outputs[0]
    g.set_graph_outputs([inner])
    assert g.cleanup().toposort() is g
    assert all(n.op_type != "Gemm" for n in g.nodes()) and list(g.outputs) == [inner]
    assert g.outputs[inner].type.tensor_type.elem_type == onnx.TensorProto.FLOAT  # type inferred
    path = str(tmp_path / "cut.onnx")
    gt.save(m, path)
    onnx.checker.check_model(path, full_check=True)
    (out,) = _run(path, {"pixel_values": np.ones((2, 3, 32, 32), np.float32)})
    assert list(out.shape) == [2 if d == "batch" else d for d in g.shape(inner)]


def test_bypass_keeps_a_graph_output_name_and_extract_names_a_missing_input():
    m = gt.load(os.path.join(FIXTURES, "torch", "cnn_ts.onnx"))
    g = m.graph
    last = g.producer("logits").name
    ident = g.insert_after("logits", "Identity")
    assert list(g.outputs) == ["logits"] and g.producer("logits") == ident  # the output kept its name
    g.bypass(ident)
    assert list(g.outputs) == ["logits"] and g.producer("logits").name == last
    add = g.find(op_type="Add")[0]
    with pytest.raises(ValueError, match="also reads"):
        m.extract([add.inputs[0]], [add.outputs[0]])  # the residual's other operand is missing
    assert m.extract(add.inputs, [add.outputs[0]]).graph.find(op_type="Add")


def test_reprs_are_short_and_say_something():
    m = gt.load(RESNET)
    assert repr(m).startswith("<Model (onnx-caffe2; IR 3; opset ai.onnx 9) <Graph 'resnet50': 415 ops (")
    assert "Conv ×53" in repr(m.graph) and len(repr(m.graph)) < 300
    node = m.graph.find(op_type="Conv")[0]
    assert repr(node).startswith("<Conv #") and "gpu_0/conv1_w_0" in repr(node)
    m2, report = gt.optimize(m, level=1)
    assert repr(report).startswith("<PassReport nodes 415 -> ")
    d = gt.diff(m, m2)
    assert len(str(d)) < 300 and "Conv+BatchNormalization → Conv ×53" in str(d)
    summary = d.summary()
    assert summary.count("\n") < 40 and "Conv+BatchNormalization → Conv ×53" in summary
    assert isinstance(d, gt.DiffResult) and isinstance(node, gt.Node) and isinstance(report, gt.PassReport)
