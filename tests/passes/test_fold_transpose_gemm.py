"""fold-transpose-gemm: 2-D Transposes feeding a Gemm become its transA / transB, as onnxruntime's
basic level does; every result is run in onnxruntime beside the original and counted beside ORT basic."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from graphtool.ir.to_onnx import to_onnx
from tests.passes.helpers import const, make_proto, model, runner, vi

run = runner(["fold-transpose-gemm", "dead-code-elimination"])


def _ops(m) -> list[str]:
    return [n.op_type for n in to_onnx(m).graph.node]


def _ort_basic_count(proto: onnx.ModelProto, tmp_path) -> int:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    opts.optimized_model_filepath = str(tmp_path / "ort_basic.onnx")
    opts.log_severity_level = 3
    ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return len(onnx.load(opts.optimized_model_filepath).graph.node)


def _dense(gemm_trans_b: int):
    """x [6, 4] → Transpose → A [4, 6]; an input w → Transpose → B (a tied weight); Gemm(A, B, c)
    with ``transB=gemm_trans_b`` (w is [3, 6] for transB=0, [6, 3] for transB=1)."""
    n = helper.make_node
    nodes = [n("Transpose", ["x"], ["xt"], perm=[1, 0]), n("Transpose", ["w"], ["wt"]),
             n("Gemm", ["xt", "wt", "c"], ["y"], transB=gemm_trans_b, alpha=0.5)]
    w_shape = [6, 3] if gemm_trans_b else [3, 6]
    return make_proto(nodes, [vi("x", [6, 4]), vi("w", w_shape)], [vi("y", [4, 3])],
                      [const("c", np.arange(3, dtype=np.float32))])


def test_both_transposes_fold_and_the_count_matches_ort_basic(tmp_path):
    proto = _dense(gemm_trans_b=0)
    out, report = run(model(proto.graph.node, proto.graph.input, proto.graph.output, proto.graph.initializer))
    assert _ops(out) == ["Gemm"]
    gemm = to_onnx(out).graph.node[0]
    attrs = {a.name: helper.get_attribute_value(a) for a in gemm.attribute}
    assert attrs["transA"] == 1 and attrs["transB"] == 1 and attrs["alpha"] == 0.5
    assert report.passes["fold-transpose-gemm"].stats["folded"] == 1
    assert len(_ops(out)) <= _ort_basic_count(proto, tmp_path)


def test_a_set_trans_flag_is_cleared():
    proto = _dense(gemm_trans_b=1)  # the Gemm had transB=1 over a Transpose: the two cancel
    out, _ = run(model(proto.graph.node, proto.graph.input, proto.graph.output, proto.graph.initializer))
    attrs = {a.name: helper.get_attribute_value(a) for a in to_onnx(out).graph.node[0].attribute}
    assert attrs["transB"] == 0 and attrs["transA"] == 1


def test_refused_when_the_transpose_has_another_reader():
    n = helper.make_node
    nodes = [n("Transpose", ["x"], ["xt"], perm=[1, 0]), n("Gemm", ["xt", "w"], ["y"]), n("Relu", ["xt"], ["r"])]
    m = model(nodes, [vi("x", [6, 4]), vi("w", [6, 3])], [vi("y", [4, 3]), vi("r", [4, 6])])
    out, report = run(m)
    assert _ops(out).count("Transpose") == 1 and report.passes["fold-transpose-gemm"].stats.get("folded", 0) == 0


def test_transpose_of_a_constant_is_left_to_constant_folding():
    n = helper.make_node
    nodes = [n("Transpose", ["w"], ["wt"], perm=[1, 0]), n("Gemm", ["x", "wt"], ["y"])]
    m = model(nodes, [vi("x", [2, 4])], [vi("y", [2, 3])], [const("w", np.ones((3, 4), np.float32))])
    out, _ = run(m)
    assert "Transpose" in _ops(out)
    folded, _ = run(m, passes=["fold-transpose-gemm", "fold-constants", "dead-code-elimination"])
    assert _ops(folded) == ["Gemm"]
