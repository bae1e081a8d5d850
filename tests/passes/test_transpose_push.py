"""push-transposes: Keras-export shapes (DNSMOS' log-power head, a global max pool in NHWC), what
must stay (attention's Transpose → Mul → MatMul, a Transpose with two readers), outputs equal."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from graphtool.ir.to_onnx import to_onnx
from graphtool.optimize import optimize
from tests.passes.helpers import const, model, runner, vi

run = runner(["push-transposes", "merge-chains", "eliminate-no-ops", "dead-code-elimination"])
n = helper.make_node


def _ops(m) -> list[str]:
    return [node.op_type for node in to_onnx(m).graph.node]


def test_keras_logpow_head_keeps_one_transpose():
    """DNSMOS sig_bak_ovr: two STFT Convs → Transpose each → square, add, sqrt, pow, log → Unsqueeze → Transpose."""
    nodes = [n("Transpose", ["re"], ["tr"], perm=[0, 2, 1]), n("Transpose", ["im"], ["ti"], perm=[0, 2, 1]),
             n("Mul", ["tr", "tr"], ["r2"]), n("Mul", ["ti", "ti"], ["i2"]), n("Add", ["r2", "i2"], ["p"]),
             n("Sqrt", ["p"], ["mag"]), n("Pow", ["mag", "two"], ["pw"]), n("Max", ["floor", "pw"], ["mx"]),
             n("Log", ["mx"], ["lg"]), n("Div", ["lg", "ln10"], ["db"]), n("Unsqueeze", ["db", "ax"], ["u"]),
             n("Transpose", ["u"], ["y"], perm=[0, 3, 1, 2])]
    m = model(nodes, [vi("re", [2, 5, 7]), vi("im", [2, 5, 7])], [vi("y", [2, 1, 7, 5])],
              [const("two", np.float32(0.3)), const("floor", np.float32(1e-6)), const("ln10", np.float32(2.3)),
               const("ax", np.array([3], np.int64))], opset=13)
    out, report = run(m)
    assert _ops(out).count("Transpose") == 1
    assert report.passes["push-transposes"].stats["pushed"] >= 8


def test_transpose_into_reduce_max_with_keepdims_0_vanishes():
    nodes = [n("Relu", ["x"], ["r"]), n("Transpose", ["r"], ["t"], perm=[0, 2, 3, 1]),
             n("ReduceMax", ["t"], ["y"], axes=[1, 2], keepdims=0)]
    m = model(nodes, [vi("x", [2, 8, 5, 6])], [vi("y", [2, 8])], opset=13)
    out, _ = run(m)
    assert _ops(out) == ["Relu", "ReduceMax"]
    assert list(to_onnx(out).graph.node[1].attribute[0].ints) == [2, 3]


def test_constants_are_transposed_to_match():
    bias = np.arange(6, dtype=np.float32).reshape(1, 1, 6)  # broadcast over [N, H, C] after the Transpose
    nodes = [n("Transpose", ["x"], ["t"], perm=[0, 2, 1]), n("Add", ["t", "b"], ["a"]),
             n("Transpose", ["a"], ["y"], perm=[0, 2, 1])]
    m = model(nodes, [vi("x", [2, 6, 4])], [vi("y", [2, 6, 4])], [const("b", bias)], opset=13)
    out, _ = run(m)
    assert _ops(out) == ["Add"]


def test_reduce_keepdims_and_concat_and_slice_move_with_their_axes():
    nodes = [n("Transpose", ["x"], ["t1"], perm=[0, 2, 3, 1]), n("Transpose", ["z"], ["t2"], perm=[0, 2, 3, 1]),
             n("Concat", ["t1", "t2"], ["c"], axis=3), n("Slice", ["c", "st", "en", "axs"], ["s"]),
             n("ReduceSum", ["s", "rax"], ["rs"], keepdims=1), n("Transpose", ["rs"], ["y"], perm=[0, 3, 1, 2])]
    m = model(nodes, [vi("x", [1, 3, 4, 5]), vi("z", [1, 2, 4, 5])], [vi("y", [1, 4, 1, 5])],
              [const("st", np.array([1], np.int64)), const("en", np.array([6], np.int64)),
               const("axs", np.array([3], np.int64)), const("rax", np.array([1], np.int64))], opset=13)
    out, _ = run(m)
    assert _ops(out).count("Transpose") == 0


def test_attention_style_transpose_that_meets_no_transpose_stays():
    nodes = [n("Transpose", ["q"], ["qt"], perm=[0, 2, 1, 3]), n("Mul", ["qt", "scale"], ["qs"]),
             n("MatMul", ["qs", "k"], ["y"])]
    m = model(nodes, [vi("q", [1, 4, 2, 8]), vi("k", [1, 2, 8, 4])], [vi("y", [1, 2, 4, 4])],
              [const("scale", np.float32(0.35))], opset=13)
    out, report = optimize(m, passes=["push-transposes"])[:2]
    assert _ops(out) == ["Transpose", "Mul", "MatMul"] and report.passes["push-transposes"].stats["pushed"] == 0


def test_transpose_with_two_readers_stays():
    nodes = [n("Transpose", ["x"], ["t"], perm=[1, 0]), n("Relu", ["t"], ["r"]), n("Transpose", ["r"], ["y"], perm=[1, 0]),
             n("Identity", ["t"], ["z"])]
    m = model(nodes, [vi("x", [3, 4])], [vi("y", [3, 4]), vi("z", [4, 3])], opset=13)
    out, report = optimize(m, passes=["push-transposes"])[:2]
    assert report.passes["push-transposes"].stats["pushed"] == 0


def test_keras_dense_after_prelu_becomes_gemm():
    """MTCNN R-net: Flatten → MatMul+Add → PRelu → MatMul+Add: ranks from the shape oracle."""
    rng = np.random.default_rng(0)
    nodes = [n("Flatten", ["x"], ["f"]), n("MatMul", ["f", "w1"], ["m1"]), n("Add", ["m1", "b1"], ["a1"]),
             n("PRelu", ["a1", "slope"], ["p"]), n("MatMul", ["p", "w2"], ["m2"]), n("Add", ["m2", "b2"], ["y"])]
    m = model(nodes, [vi("x", ["N", 4, 3, 3])], [vi("y", ["N", 2])],
              [const("w1", rng.standard_normal((36, 8)).astype(np.float32)), const("b1", np.ones(8, np.float32)),
               const("slope", np.full(8, 0.25, np.float32)),
               const("w2", rng.standard_normal((8, 2)).astype(np.float32)), const("b2", np.ones(2, np.float32))],
              opset=12)
    out, _, _ = optimize(m)
    assert _ops(out) == ["Flatten", "Gemm", "PRelu", "Gemm"]


def test_no_op_casts_after_ml_classifiers_go():
    """skl2onnx's Cast(label → int64) after a TreeEnsembleClassifier whose labels are int64 already."""
    tree = n("TreeEnsembleClassifier", ["x"], ["label", "scores"], domain="ai.onnx.ml",
             classlabels_int64s=[0, 1], class_ids=[0, 1], class_nodeids=[1, 2], class_treeids=[0, 0],
             class_weights=[1.0, 1.0], nodes_falsenodeids=[2, 0, 0], nodes_featureids=[0, 0, 0],
             nodes_hitrates=[1.0, 1.0, 1.0], nodes_missing_value_tracks_true=[0, 0, 0],
             nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"], nodes_nodeids=[0, 1, 2], nodes_treeids=[0, 0, 0],
             nodes_truenodeids=[1, 0, 0], nodes_values=[0.5, 0.0, 0.0], post_transform="NONE")
    nodes = [tree, n("Cast", ["label"], ["out_label"], to=TensorProto.INT64),
             n("Cast", ["scores"], ["out_scores"], to=TensorProto.FLOAT)]
    m = model(nodes, [vi("x", ["N", 2])], [vi("out_label", ["N"], TensorProto.INT64), vi("out_scores", ["N", 2])],
              opset=15, check=False)
    m.set_opset("ai.onnx.ml", 3)
    feeds = {"x": np.array([[0.2, 1.0], [0.9, 0.0], [0.5, 3.0]], np.float32)}
    out, _ = runner(["eliminate-no-ops"])(m, feeds=feeds)
    assert _ops(out) == ["TreeEnsembleClassifier"]



def test_no_op_cast_after_array_feature_extractor_goes():
    """skl2onnx's nearest-neighbours label: ArrayFeatureExtractor(int64 class labels, ArgMax) → Cast(int64):
    ArrayFeatureExtractor picks elements of its first input, so the label is int64 already."""
    nodes = [n("ArgMax", ["x"], ["best"], axis=1, keepdims=0),
             n("ArrayFeatureExtractor", ["labels", "best"], ["picked"], domain="ai.onnx.ml"),
             n("Cast", ["picked"], ["label"], to=TensorProto.INT64),
             n("ArrayFeatureExtractor", ["x", "best"], ["value"], domain="ai.onnx.ml"),
             n("Cast", ["value"], ["value_i"], to=TensorProto.INT64)]  # float picked: the Cast converts, stays
    m = model(nodes, [vi("x", ["N", 3])], [vi("label", [1, "N"], TensorProto.INT64), vi("value_i", ["N", "N"], TensorProto.INT64)],
              [const("labels", np.array([4, 7, 9], np.int64))], opset=15, check=False)
    m.set_opset("ai.onnx.ml", 3)
    feeds = {"x": np.array([[0.2, 1.0, 0.1], [0.9, 0.0, 3.5]], np.float32)}
    out, _ = runner(["eliminate-no-ops"])(m, feeds=feeds)
    assert _ops(out) == ["ArgMax", "ArrayFeatureExtractor", "ArrayFeatureExtractor", "Cast"]

def _split_model(opset: int, second_reader: str = "Transpose"):
    """NHWC → Transpose → Split on channels (sizes 3 and 5) → Relu / Sigmoid → Transpose back (a TF
    export's channel split); ``second_reader`` MatMul: one part ends in an op a Transpose cannot cross."""
    sizes = const("sizes", np.array([3, 5], np.int64))
    split = (n("Split", ["t", "sizes"], ["a", "b"], axis=1) if opset >= 13
             else n("Split", ["t"], ["a", "b"], axis=1, split=[3, 5]))
    nodes = [n("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2]), split, n("Relu", ["a"], ["ra"]), n("Sigmoid", ["b"], ["sb"]),
             n("Transpose", ["ra"], ["ya"], perm=[0, 2, 3, 1])]
    outputs = [vi("ya", [1, 4, 6, 3])]
    if second_reader == "Transpose":
        nodes.append(n("Transpose", ["sb"], ["yb"], perm=[0, 2, 3, 1]))
        outputs.append(vi("yb", [1, 4, 6, 5]))
    else:
        nodes.append(n("MatMul", ["sb", "w"], ["yb"]))
        outputs.append(vi("yb", [1, 5, 4, 2]))
    inits = ([sizes] if opset >= 13 else []) + ([const("w", np.ones((6, 2), np.float32))] if second_reader != "Transpose" else [])
    return model(nodes, [vi("x", [1, 4, 6, 8])], outputs, inits, opset=opset)


def test_split_moves_with_its_axis_and_every_part_cancels():
    for opset in (11, 13, 18):
        out, report = run(_split_model(opset))
        assert _ops(out) == ["Split", "Relu", "Sigmoid"], opset
        split = to_onnx(out).graph.node[0]
        assert [a.i for a in split.attribute if a.name == "axis"] == [3]  # the channels, now last


def test_split_with_a_part_that_does_not_pay_stays():
    out, report = optimize(_split_model(13, second_reader="MatMul"), passes=["push-transposes"])[:2]
    assert report.passes["push-transposes"].stats["pushed"] == 0 and _ops(out).count("Transpose") == 2


def test_transposes_move_through_a_qlinear_concat_and_cancel():
    """A quantized SqueezeNet fire module in channels-last form: two branches' exit Transposes meet in a
    com.microsoft QLinearConcat (axis 1); below it, the next convolution's entry Transpose is the inverse."""
    import onnxruntime as ort

    u8 = TensorProto.UINT8
    nodes = [n("Transpose", ["a"], ["ta"], perm=[0, 3, 1, 2]), n("Transpose", ["b"], ["tb"], perm=[0, 3, 1, 2]),
             n("QLinearConcat", ["ys", "yz", "ta", "as", "az", "tb", "bs", "bz"], ["c"], axis=1, domain="com.microsoft"),
             n("Transpose", ["c"], ["y"], perm=[0, 2, 3, 1])]
    inits = [const("ys", np.float32(0.1)), const("yz", np.uint8(120)), const("as", np.float32(0.05)),
             const("az", np.uint8(128)), const("bs", np.float32(0.2)), const("bz", np.uint8(100))]
    from graphtool import io
    from tests.passes.helpers import make_proto

    m = io.load_proto(make_proto(nodes, [vi("a", [1, 5, 6, 3], u8), vi("b", [1, 5, 6, 4], u8)], [vi("y", [1, 5, 6, 7], u8)],
                                 inits, opset=13, extra_opsets=[helper.make_opsetid("com.microsoft", 1)], check=False))
    out, _ = run(m)
    assert _ops(out) == ["QLinearConcat"]
    assert next(nd for nd in to_onnx(out).graph.node).attribute[0].i == 3  # axis 1 in NCHW is 3 in NHWC
    rng = np.random.default_rng(0)
    feeds = {"a": rng.integers(0, 255, (1, 5, 6, 3), dtype=np.uint8), "b": rng.integers(0, 255, (1, 5, 6, 4), dtype=np.uint8)}
    got = [ort.InferenceSession(to_onnx(x).SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
           for x in (m, out)]
    assert np.array_equal(got[0], got[1])


def test_keras_upsampling_between_nhwc_transposes_leaves_one_resize():
    """tf2onnx's UpSampling2D: Transpose to NHWC → Resize (scales [1, 2, 2, 1], nearest) → Transpose back."""
    nodes = [n("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]), n("Resize", ["t", "", "scales"], ["r"], mode="nearest"),
             n("Transpose", ["r"], ["y"], perm=[0, 3, 1, 2])]
    m = model(nodes, [vi("x", [1, 3, 4, 5])], [vi("y", [1, 3, 8, 10])],
              [const("scales", np.array([1, 2, 2, 1], np.float32))], opset=13)
    out, _ = run(m)
    assert _ops(out) == ["Resize"]
    resize = to_onnx(out).graph
    scales = next(i for i in resize.initializer if i.name == resize.node[0].input[2])
    from onnx import numpy_helper

    assert numpy_helper.to_array(scales).tolist() == [1, 1, 2, 2]


def test_softmax_moves_with_its_axis_from_opset_13_only():
    """YOLOv8's DFL head: Transpose → Softmax(axis 1) → (the channels-last conv's entry Transpose).
    Opset 13's softmax is over one axis, which maps through the permutation; before 13 the axes from
    ``axis`` on were flattened together, which a permutation does not keep."""
    nodes = [n("Transpose", ["x"], ["t"], perm=[0, 2, 1, 3]), n("Softmax", ["t"], ["s"], axis=1),
             n("Transpose", ["s"], ["y"], perm=[0, 2, 3, 1])]
    for opset, moved in ((13, True), (11, False)):
        m = model(nodes, [vi("x", [1, 4, 16, 5])], [vi("y", [1, 4, 5, 16])], opset=opset)
        out, _ = run(m)
        ops = _ops(out)
        assert (ops == ["Softmax", "Transpose"]) is moved, (opset, ops)
        if moved:
            assert to_onnx(out).graph.node[0].attribute[0].i == 2  # axis 1 of the view is axis 2 of x
