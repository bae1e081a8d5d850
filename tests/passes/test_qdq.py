"""QDQ passes on models onnxruntime's quantizer wrote (tests/passes/qdq_models.py) and on hand-built
units for the refusals: level 1 keeps every output bit-identical, level 2 --target ort gives the
kernels onnxruntime's extended level gives, and the same outputs it gives."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from graphtool import io
from graphtool.ir.to_onnx import to_onnx
from graphtool.optimize import optimize
from graphtool.passes import ort_qdq_layout
from graphtool.verify import verify
from tests.passes import qdq_models
from tests.passes.helpers import const, make_proto, vi

U8 = TensorProto.UINT8


@pytest.fixture(scope="module")
def qdq_paths(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("qdq"))
    return {"pt": qdq_models.quantized_cnn(folder, per_channel=False),
            "pc": qdq_models.quantized_cnn(folder, per_channel=True),
            "s8": qdq_models.quantized_cnn(folder, per_channel=False, activations="int8"),
            "resnet": qdq_models.quantized_cnn(folder, per_channel=True, resnet=True)}


def _session(proto_or_path, level=ort.GraphOptimizationLevel.ORT_DISABLE_ALL, optimized: str | None = None):
    opts = ort.SessionOptions()
    opts.graph_optimization_level = level
    opts.log_severity_level = 3
    if optimized:
        opts.optimized_model_filepath = optimized
    data = proto_or_path.SerializeToString() if isinstance(proto_or_path, onnx.ModelProto) else proto_or_path
    return ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])


def _run(model_or_path, feeds, level=ort.GraphOptimizationLevel.ORT_DISABLE_ALL):
    sess = _session(to_onnx(model_or_path) if not isinstance(model_or_path, str) else model_or_path, level)
    return [sess.run(None, f)[0] for f in feeds]


def _ops(model) -> collections.Counter:
    return collections.Counter(n.op_type for n in to_onnx(model).graph.node)


@pytest.mark.parametrize("kind", ["pt", "pc"])
def test_level1_is_bit_exact_and_keeps_standard_qdq(qdq_paths, kind):
    path = qdq_paths[kind]
    original = io.load(path)
    optimized, report, _ = optimize(original, level=1)
    ops = _ops(optimized)
    assert sum(ops.values()) < len(onnx.load(path).graph.node)
    assert all(n.domain in ("", "ai.onnx") for n in to_onnx(optimized).graph.node)
    assert not any(op.startswith("QLinear") for op in ops)
    assert report.passes["qdq-drop-around"].stats["dropped"] >= 2  # MaxPool, Reshape/Transpose/Reshape
    feeds = qdq_models.feeds()
    for a, b in zip(_run(path, feeds), _run(optimized, feeds)):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("kind", ["pt", "pc"])
def test_level2_ort_gives_the_kernels_and_outputs_of_ort_extended(qdq_paths, kind, tmp_path):
    path = qdq_paths[kind]
    optimized, report, _ = optimize(io.load(path), level=2, target="ort")
    ops = _ops(optimized)
    ort_path = str(tmp_path / "ort.onnx")
    _session(path, ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, ort_path)
    ort_ops = collections.Counter(n.op_type for n in onnx.load(ort_path).graph.node)
    assert sum(ops.values()) <= sum(ort_ops.values())
    for op in ("QLinearConv", "QGemm", "QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearGlobalAveragePool",
               "QLinearAveragePool", "QLinearConcat", "QLinearSoftmax"):
        assert ops[op] == ort_ops[op] >= 1, op
    feeds = qdq_models.feeds()
    ours = _run(optimized, feeds)
    theirs = _run(path, feeds, ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED)
    reference = _run(path, feeds)
    for a, b, ref in zip(ours, theirs, reference):
        assert np.array_equal(a, b)  # the same integer kernels onnxruntime's own fusion runs
        assert np.all(np.abs(a - ref) <= 0.01 + 0.01 * np.abs(ref))  # ORT's QDQ tests' tolerance


def test_level2_keeps_nchw_where_channels_last_adds_the_entry_transpose(qdq_paths, tmp_path):
    """Level 2 mirrors ORT extended: the NCHW kernels and ORT extended's node count; the note names level 3."""
    path = qdq_paths["resnet"]
    optimized, report, ctx = optimize(io.load(path), level=2, target="ort")
    assert report.passes["ort-qdq-nhwc"].stats.get("refused") == 1
    assert any("would add 1 node" in n and "--level 3 writes it" in n for n in ctx.notes), ctx.notes
    nodes = to_onnx(optimized).graph.node
    assert all(n.domain == "" for n in nodes if n.op_type == "QLinearConv") and not _ops(optimized).get("Transpose")
    ort_path = str(tmp_path / "ort.onnx")
    _session(path, ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, ort_path)
    assert len(nodes) <= len(onnx.load(ort_path).graph.node)


def test_level3_channels_last_on_a_resnet_block_runs_what_ort_all_runs(qdq_paths):
    path = qdq_paths["resnet"]
    optimized, report, ctx = optimize(io.load(path), level=3, target="ort")
    assert report.passes["ort-layout-nhwc"].stats == {"converted": 5, "added": 1}
    assert not any("refused" in n for n in ctx.notes), ctx.notes
    nodes = to_onnx(optimized).graph.node
    convs = [n for n in nodes if n.op_type == "QLinearConv"]
    assert len(convs) == 3 and all(n.domain == "com.microsoft" for n in convs)
    assert sum(n.op_type == "NhwcMaxPool" for n in nodes) == 1
    assert sum(n.op_type == "Transpose" for n in nodes) == 1  # the entry; the exit vanished into Flatten
    feeds = qdq_models.feeds()
    for a, b in zip(_run(optimized, feeds), _run(path, feeds, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)):
        assert np.array_equal(a, b)


def test_level3_converts_a_qoperator_model_whose_shapes_onnx_cannot_infer(tmp_path):
    """QOperator (QLinearConv, com.microsoft QLinearAdd / QLinearGlobalAveragePool): onnx infers no rank or
    type past the contrib ops, so the pool's rank and the MaxPool's type are read from the ops that made
    them, and the exit Transpose of the channels-last pool still vanishes into the Flatten."""
    path = qdq_models.quantized_cnn(str(tmp_path), resnet=True, qoperator=True)
    optimized, report, _ = optimize(io.load(path), level=3, target="ort")
    assert report.passes["ort-layout-nhwc"].stats["converted"] == 5  # 3 convolutions, MaxPool, global pool
    ops = collections.Counter((n.domain, n.op_type) for n in to_onnx(optimized).graph.node)
    assert ops[("", "Transpose")] == 1 and ops[("com.microsoft", "NhwcMaxPool")] == 1
    ort_path = str(tmp_path / "ort_all.onnx")
    _session(path, ort.GraphOptimizationLevel.ORT_ENABLE_ALL, ort_path)
    assert sum(ops.values()) <= len(onnx.load(ort_path).graph.node)
    feeds = qdq_models.feeds()
    for a, b in zip(_run(optimized, feeds), _run(path, feeds, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)):
        assert np.array_equal(a, b)


def test_level3_carries_the_layout_through_float_residual_sums(tmp_path, monkeypatch):
    """Sum joins the blocks in float (DQ → Sum → Q, read by the next block's convolution and Sum) and the
    head flattens the map: the channels-last region ends only at the graph's entry and at the Reshape.
    Moving single Transposes (push-transposes) leaves one per block boundary."""
    path = qdq_models.quantized_cnn(str(tmp_path), sums=True)
    feeds = qdq_models.feeds()

    def level3() -> tuple[collections.Counter, list]:
        optimized, _, _ = optimize(io.load(path), level=3, target="ort")
        return _ops(optimized), _run(optimized, feeds)

    ops, got = level3()
    assert ops["Transpose"] == 2 and ops["Sum"] == 2
    for a, b in zip(got, _run(path, feeds, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)):
        assert np.array_equal(a, b)
    monkeypatch.setattr(ort_qdq_layout, "propagate", lambda *args: 0)
    assert level3()[0]["Transpose"] == 5


def test_level3_shuffles_channels_in_channels_last(qdq_paths):
    """The channel shuffle (Reshape/Transpose/Reshape) and a Concat between convolutions: level 2 keeps
    NCHW (the entry Transpose would be one node more than ORT extended's count); level 3 runs the shuffle
    on the channels-last tensor — one 5-D Transpose, where the NCHW form between channels-last kernels
    keeps three — and adds only the entry Transpose."""
    original = io.load(qdq_paths["pt"])
    level2, report, ctx = optimize(original, level=2, target="ort")
    assert report.passes["ort-qdq-nhwc"].stats.get("refused") == 1
    assert any("channels-last layout refused" in note for note in ctx.notes)
    assert all(n.domain == "" for n in to_onnx(level2).graph.node if n.op_type == "QLinearConv")
    level3, report, _ = optimize(original, level=3, target="ort")
    assert report.passes["ort-layout-nhwc"].stats["added"] == 1
    assert level3.node_count() == level2.node_count() + 1
    nodes = to_onnx(level3).graph.node
    assert all(n.domain == "com.microsoft" for n in nodes if n.op_type == "QLinearConv")
    perms = [list(n.attribute[0].ints) for n in nodes if n.op_type == "Transpose"]
    assert perms == [[0, 2, 3, 1], [0, 1, 2, 4, 3]]
    feeds = qdq_models.feeds()
    for a, b in zip(_run(level3, feeds), _run(level2, feeds)):
        assert np.array_equal(a, b)


def test_target_onnx_level2_keeps_qdq(qdq_paths):
    optimized, _, _ = optimize(io.load(qdq_paths["pt"]), level=2, target="onnx")
    ops = _ops(optimized)
    assert ops["Conv"] == 5 and not any(op.startswith("QLinear") or op == "QGemm" for op in ops)


def test_int8_activations_become_uint8_and_fuse_as_ort_extended_does(qdq_paths, tmp_path):
    """quantize_static's default (int8 activations): the s8 → u8 shift is bit-exact, then the units
    fuse; graphtool converts a Q with several DQ readers too, so it ends below ORT extended's count."""
    path = qdq_paths["s8"]
    original = io.load(path)
    shifted, report, _ = optimize(original, passes=["ort-qdq-s8-to-u8"], target="ort", level=2)
    assert report.passes["ort-qdq-s8-to-u8"].stats["converted"] >= 10
    feeds = qdq_models.feeds(2)
    for a, b in zip(_run(path, feeds), _run(shifted, feeds)):
        assert np.array_equal(a, b)  # the +128 shift changes no float value
    optimized, _, _ = optimize(original, level=2, target="ort")
    ops = _ops(optimized)
    assert ops["QLinearConv"] == 5 and ops["QGemm"] == 1 and ops["DequantizeLinear"] == 1
    ort_path = str(tmp_path / "ort.onnx")
    _session(path, ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, ort_path)
    assert sum(ops.values()) < len(onnx.load(ort_path).graph.node)
    assert verify(original, optimized).ok




def _matmul_unit(axis: int = 1, zeros=None, k: int = 8, n: int = 6):
    """x[2, 3, k] → Q/DQ (uint8) → MatMul with B[k, n] int8 dequantized per channel along ``axis`` → Q → DQ
    (a transformer weight quantized per output channel: axis 1, its columns)."""
    rng = np.random.default_rng(3)
    channels = n if axis == 1 else k
    zeros = np.zeros(channels, np.int8) if zeros is None else np.asarray(zeros, np.int8)
    nodes = [_qdq("q0", "x", "s", "z", "xq"), _qdq("dq0", "xq", "s", "z", "xf", q=False),
             helper.make_node("DequantizeLinear", ["b", "bs", "bz"], ["bf"], axis=axis, name="dqb"),
             helper.make_node("MatMul", ["xf", "bf"], ["mm"]), _qdq("q1", "mm", "s1", "z1", "yq"),
             _qdq("dq1", "yq", "s1", "z1", "y", q=False)]
    inits = [const("s", np.float32(0.05)), const("z", np.uint8(128)), const("s1", np.float32(0.02)),
             const("z1", np.uint8(128)), const("b", rng.integers(-127, 127, (k, n)).astype(np.int8)),
             const("bs", (rng.random(channels) * 0.01 + 0.001).astype(np.float32)), const("bz", zeros)]
    return io.load_proto(make_proto(nodes, [vi("x", [2, 3, k])], [vi("y", [2, 3, n])], inits, opset=13))


def test_qlinear_matmul_takes_a_weight_quantized_per_column(tmp_path):
    """quantize_static(per_channel=True) quantizes a transformer's MatMul weights per output channel (B's
    columns): onnxruntime's extended level fuses those units into QLinearMatMul (per-column b_scale), and so
    does graphtool now — DeiT QDQ per channel 141 → 109 nodes, ORT extended 141."""
    m = _matmul_unit()
    out, report, _ = optimize(m, level=2, target="ort")
    assert _ops(out)["QLinearMatMul"] == 1 and "MatMul" not in _ops(out)
    ort_path = str(tmp_path / "ort.onnx")
    _session(to_onnx(m), ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, ort_path)
    assert collections.Counter(n.op_type for n in onnx.load(ort_path).graph.node)["QLinearMatMul"] == 1
    feeds = [{"x": np.random.default_rng(s).standard_normal((2, 3, 8)).astype(np.float32) * 2} for s in range(3)]
    ort_ext = [_session(ort_path).run(None, f)[0] for f in feeds]
    for a, b in zip(ort_ext, _run(out, feeds)):
        assert np.array_equal(a, b)  # the same kernel on the same integers


def test_qlinear_matmul_refuses_per_row_scales_and_differing_zero_points():
    for m, why in ((_matmul_unit(axis=0), "axis 1"), (_matmul_unit(zeros=[0, 1, 0, 0, 0, 0]), "zero points differ")):
        out, _, ctx = optimize(m, level=2, target="ort", explain=["qlinear-matmul"])
        assert "QLinearMatMul" not in _ops(out)
        reasons = [e["reason"] for e in ctx.explanations.values()]
        assert any(why in r for r in reasons), reasons

def test_relu_between_equal_symmetric_params_runs_on_the_integers(tmp_path):
    """quantize_static with ActivationSymmetric (int8, zero point 0): DQ → Relu → Q with one scale is
    Max(q, 0) at level 1 (bit-identical); level 2 shifts those Maxes with the +128 (also when given the
    level-1 file), every unit fuses, and the result is below ORT extended, which keeps the float Relus."""
    path = qdq_models.quantized_cnn(str(tmp_path), activations="int8", symmetric=True)
    original = io.load(path)
    assert _ops(original)["Relu"] == 4
    feeds = qdq_models.feeds(2)
    level1, report, _ = optimize(original, level=1)
    assert _ops(level1)["Relu"] == 0 and _ops(level1)["Max"] == 4
    for a, b in zip(_run(path, feeds), _run(level1, feeds)):
        assert np.array_equal(a, b)
    ort_path = str(tmp_path / "ort.onnx")
    _session(path, ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, ort_path)
    assert collections.Counter(n.op_type for n in onnx.load(ort_path).graph.node)["Relu"] == 4
    for start in (original, level1):
        level2, _, _ = optimize(start, level=2, target="ort")
        ops = _ops(level2)
        assert ops["Max"] == 4 and ops["QLinearConv"] == 5 and ops["DequantizeLinear"] == 1, ops
        assert sum(ops.values()) < len(onnx.load(ort_path).graph.node)
        maxes = [n for n in to_onnx(level2).graph.node if n.op_type == "Max"]
        assert all(onnx.numpy_helper.to_array(i).dtype == np.uint8 for i in to_onnx(level2).graph.initializer
                   if i.name in {x for n in maxes for x in n.input})
        assert verify(original, level2).ok


def test_relu_between_different_params_stays():
    relu = [helper.make_node("Relu", ["xf"], ["r"])]
    for scale, zero, opset in ((0.1, 128, 13), (0.05, 120, 13), (0.05, 128, 11)):  # other scale, zero point; Max-11
        out, report, _ = optimize(_unit(relu, "r", scale, zero, opset=opset), passes=["qdq-drop-around"])
        assert "Relu" in _ops(out) and "Max" not in _ops(out), (scale, zero, opset)
    m = _unit(relu, "r", 0.05, 128)
    out, report, _ = optimize(m, passes=["qdq-drop-around"])
    assert _ops(out)["Max"] == 1 and "Relu" not in _ops(out)
    _check_same(m, out)

def test_int8_q_with_a_reader_that_is_not_a_dq_stays_and_its_unit_says_why():
    """An int8 Q whose output is also a graph output cannot shift (the user reads the integers)."""
    nodes = [_qdq("q0", "x", "s", "z", "xq"), _qdq("dq0", "xq", "s", "z", "xf", q=False),
             helper.make_node("Sigmoid", ["xf"], ["sg"]), _qdq("q1", "sg", "s1", "z1", "yq"),
             _qdq("dq1", "yq", "s1", "z1", "y", q=False)]
    inits = [const("s", np.float32(0.05)), const("z", np.int8(0)), const("s1", np.float32(1 / 256)),
             const("z1", np.int8(-128))]
    m = io.load_proto(make_proto(nodes, [vi("x", [1, 4, 6, 6])], [vi("y", None), vi("xq", None, TensorProto.INT8)],
                                 inits, opset=13, check=False))
    out, report, ctx = optimize(m, level=2, target="ort", explain=["qlinear-unary"])
    assert report.passes["ort-qdq-s8-to-u8"].stats["converted"] == 1  # q1 → dq1 only
    assert _ops(out)["QLinearSigmoid"] == 0
    reasons = [e["reason"] for e in ctx.explanations.values() if e["reason"].startswith("check:")]
    assert any("quantizes to int8: only uint8 activations" in r for r in reasons), reasons
    _check_same(m, out)


# ---- hand-built units: each refusal -----------------------------------------------------------------------

def _qdq(name, x, scale, zero, out=None, q=True):
    op = "QuantizeLinear" if q else "DequantizeLinear"
    return helper.make_node(op, [x, scale, zero], [out or f"{name}_out"], name=name)


def _unit(mid_nodes, mid_out, q_scale=0.05, q_zero=128, extra_inits=(), opset=13):
    """x(float) → Q(0.05, 128) → DQ → mid → Q(q_scale, q_zero) → DQ → y."""
    nodes = [_qdq("q0", "x", "s", "z", "xq"), _qdq("dq0", "xq", "s", "z", "xf", q=False), *mid_nodes,
             _qdq("q1", mid_out, "s1", "z1", "yq"), _qdq("dq1", "yq", "s1", "z1", "y", q=False)]
    inits = [const("s", np.float32(0.05)), const("z", np.uint8(128)), const("s1", np.float32(q_scale)),
             const("z1", np.uint8(q_zero)), *extra_inits]
    return io.load_proto(make_proto(nodes, [vi("x", [1, 4, 6, 6])], [vi("y", None)], inits, opset=opset, check=False))


def _check_same(original, optimized):
    feeds = [{"x": np.random.default_rng(s).standard_normal((1, 4, 6, 6)).astype(np.float32) * 3} for s in range(3)]
    for a, b in zip(_run(original, feeds), _run(optimized, feeds)):
        assert np.array_equal(a, b)


def test_drop_around_reshape_with_equal_params():
    m = _unit([helper.make_node("Reshape", ["xf", "shape"], ["r"])], "r", 0.05, 128,
              [const("shape", np.array([1, 144], np.int64))])
    out, report, _ = optimize(m, passes=["qdq-drop-around"])
    assert report.passes["qdq-drop-around"].stats["dropped"] == 1
    assert [n.op_type for n in to_onnx(out).graph.node] == ["QuantizeLinear", "Reshape", "DequantizeLinear"]
    _check_same(m, out)


def test_drop_around_refuses_a_requantization():
    m = _unit([helper.make_node("Reshape", ["xf", "shape"], ["r"])], "r", 0.1, 128,
              [const("shape", np.array([1, 144], np.int64))])
    out, report, _ = optimize(m, passes=["qdq-drop-around"])
    assert report.passes["qdq-drop-around"].stats["dropped"] == 0


def test_drop_around_maxpool_refused_below_opset_12():
    nodes = [helper.make_node("MaxPool", ["xf"], ["p"], kernel_shape=[2, 2])]
    out, report, _ = optimize(_unit(nodes, "p", opset=13), passes=["qdq-drop-around"])
    assert report.passes["qdq-drop-around"].stats["dropped"] == 1
    out, report, _ = optimize(_unit(nodes, "p", opset=11), passes=["qdq-drop-around"])
    assert report.passes["qdq-drop-around"].stats["dropped"] == 0


def test_drop_around_resize_only_in_nearest_mode():
    scales = const("scales", np.array([1, 1, 2, 2], np.float32))
    for mode, dropped in (("nearest", 1), ("linear", 0)):
        m = _unit([helper.make_node("Resize", ["xf", "", "scales"], ["r"], mode=mode)], "r", 0.05, 128, [scales])
        out, report, _ = optimize(m, passes=["qdq-drop-around"])
        assert report.passes["qdq-drop-around"].stats["dropped"] == dropped, mode
        _check_same(m, out)
    m = _unit([helper.make_node("Resize", ["xf", "", "scales"], ["r"])], "r", 0.05, 128, [scales])  # mode defaults to nearest
    out, _, _ = optimize(m, passes=["qdq-drop-around"])
    assert [n.op_type for n in to_onnx(out).graph.node] == ["QuantizeLinear", "Resize", "DequantizeLinear"]


def _split_unit(q_params):
    """x → Q → DQ → Split (2 outputs, YOLOv8's C2f) → Q(q_params[i]) → DQ → Concat → y."""
    nodes = [_qdq("q0", "x", "s", "z", "xq"), _qdq("dq0", "xq", "s", "z", "xf", q=False),
             helper.make_node("Split", ["xf", "sizes"], ["a", "b"], axis=1)]
    inits = [const("s", np.float32(0.05)), const("z", np.uint8(128)), const("sizes", np.array([2, 2], np.int64))]
    for i, (scale, zero) in enumerate(q_params):
        nodes += [_qdq(f"qa{i}", "ab"[i], f"s{i}", f"z{i}", f"q{i}"), _qdq(f"dqa{i}", f"q{i}", f"s{i}", f"z{i}", f"f{i}", q=False)]
        inits += [const(f"s{i}", np.float32(scale)), const(f"z{i}", np.uint8(zero))]
    nodes.append(helper.make_node("Concat", ["f0", "f1"], ["y"], axis=1))
    return io.load_proto(make_proto(nodes, [vi("x", [1, 4, 6, 6])], [vi("y", None)], inits, opset=13, check=False))


def test_drop_around_split_when_every_output_is_quantized_alike():
    m = _split_unit([(0.05, 128), (0.05, 128)])
    out, report, _ = optimize(m, passes=["qdq-drop-around"])
    assert report.passes["qdq-drop-around"].stats["dropped"] == 1
    ops = _ops(out)
    assert ops["QuantizeLinear"] == 1 and ops["DequantizeLinear"] == 2 and ops["Split"] == 1
    _check_same(m, out)
    m = _split_unit([(0.05, 128), (0.1, 128)])  # one output requantizes: onnxruntime keeps the unit too
    out, report, _ = optimize(m, passes=["qdq-drop-around"])
    assert report.passes["qdq-drop-around"].stats["dropped"] == 0


def test_relu_before_q_dropped_only_when_zero_point_is_the_floor():
    relu = [helper.make_node("Relu", ["xf"], ["r"])]
    m = _unit(relu, "r", 0.05, 0)
    out, report, _ = optimize(m, passes=["qdq-drop-clip"])
    assert report.passes["qdq-drop-clip"].stats["dropped"] == 1 and "Relu" not in _ops(out)
    _check_same(m, out)
    m = _unit(relu, "r", 0.05, 128)  # Q keeps negatives: the Relu matters
    out, report, _ = optimize(m, passes=["qdq-drop-clip"])
    assert "Relu" in _ops(out)


def test_clip_before_q_kept_when_narrower_than_q():
    clip = [helper.make_node("Clip", ["xf", "lo", "hi"], ["c"])]
    bounds = [const("lo", np.float32(0)), const("hi", np.float32(6))]
    m = _unit(clip, "c", 6 / 255, 0, bounds)  # ReLU6 with Q covering [0, 6]: redundant
    out, _, _ = optimize(m, passes=["qdq-drop-clip"])
    assert "Clip" not in _ops(out)
    _check_same(m, out)
    m = _unit(clip, "c", 0.05, 0, bounds)  # Q reaches 12.75: the Clip at 6 matters
    out, _, _ = optimize(m, passes=["qdq-drop-clip"])
    assert "Clip" in _ops(out)
    _check_same(m, out)


def test_max_or_min_with_a_constant_before_q_is_a_clip():
    """openWakeWord's embedding (Keras): Max(DQ(x), -0.4) → Q(0.0912, 4): Q's floor -0.365 is above -0.4."""
    m = _unit([helper.make_node("Max", ["xf", "c"], ["r"])], "r", 0.0912, 4, [const("c", np.full((1, 1, 1, 1), -0.4, np.float32))])
    out, report, _ = optimize(m, passes=["qdq-drop-clip"])
    assert report.passes["qdq-drop-clip"].stats["dropped"] == 1 and "Max" not in _ops(out)
    _check_same(m, out)
    m = _unit([helper.make_node("Max", ["c", "xf"], ["r"])], "r", 0.05, 128, [const("c", np.float32(-0.4))])
    out, _, _ = optimize(m, passes=["qdq-drop-clip"])  # Q reaches -6.4: the floor at -0.4 matters
    assert "Max" in _ops(out)
    _check_same(m, out)
    m = _unit([helper.make_node("Min", ["xf", "c"], ["r"])], "r", 0.05, 128, [const("c", np.float32(7))])
    out, _, _ = optimize(m, passes=["qdq-drop-clip"])  # Q tops out at 6.35: a ceiling at 7 changes nothing
    assert "Min" not in _ops(out)
    _check_same(m, out)


def test_dq_q_pair_with_same_params_goes_and_different_params_stay():
    m = _unit([], "xf", 0.05, 128)
    out, report, _ = optimize(m, passes=["qdq-drop-pair"])
    assert report.passes["qdq-drop-pair"].stats["dropped"] == 1
    _check_same(m, out)
    out, report, _ = optimize(_unit([], "xf", 0.07, 128), passes=["qdq-drop-pair"])
    assert report.passes["qdq-drop-pair"].stats["dropped"] == 0


def _conv_unit(bias_scale_factor=1.0, shared_dq=False):
    rng = np.random.default_rng(0)
    w = rng.integers(-50, 50, (4, 4, 3, 3)).astype(np.int8)
    b = rng.integers(-100, 100, (4,)).astype(np.int32)
    nodes = [_qdq("q0", "x", "s", "z", "xq"), _qdq("dq0", "xq", "s", "z", "xf", q=False),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"]),
             helper.make_node("DequantizeLinear", ["b", "bs", "bz"], ["bf"]),
             helper.make_node("Conv", ["xf", "wf", "bf"], ["c"], pads=[1, 1, 1, 1]),
             _qdq("q1", "c", "s1", "z1", "yq"), _qdq("dq1", "yq", "s1", "z1", "y", q=False)]
    outputs = [vi("y", None)]
    if shared_dq:
        nodes.append(helper.make_node("Relu", ["xf"], ["other"]))
        outputs.append(vi("other", None))
    inits = [const("s", np.float32(0.05)), const("z", np.uint8(128)), const("w", w), const("ws", np.float32(0.02)),
             const("wz", np.int8(0)), const("b", b), const("bs", np.float32(0.05 * 0.02 * bias_scale_factor)),
             const("bz", np.int32(0)), const("s1", np.float32(0.1)), const("z1", np.uint8(100))]
    return io.load_proto(make_proto(nodes, [vi("x", [1, 4, 6, 6])], outputs, inits, opset=13, check=False))


def test_qlinear_conv_keeps_a_shared_dq_for_its_other_reader():
    m = _conv_unit(shared_dq=True)
    out, _, _ = optimize(m, level=2, target="ort")
    ops = _ops(out)
    assert ops["QLinearConv"] == 1 and ops["Relu"] == 1 and ops["DequantizeLinear"] >= 2
    feeds = [{"x": np.random.default_rng(s).standard_normal((1, 4, 6, 6)).astype(np.float32)} for s in range(2)]
    a = _session(to_onnx(m), ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED)
    b = _session(to_onnx(out))
    for f in feeds:
        for x, y in zip(a.run(None, f), b.run(None, f)):
            assert np.array_equal(x, y)


def test_qlinear_conv_refuses_a_bias_not_scaled_by_x_times_w():
    out, _, _ = optimize(_conv_unit(bias_scale_factor=2.0), level=2, target="ort")
    assert _ops(out)["QLinearConv"] == 0 and _ops(out)["Conv"] == 1


# ---- dynamic quantization (quantize_dynamic): MatMulIntegerToFloat / DynamicQuantizeMatMul ---------------

def _ort_extended_ops(path, tmp_path):
    out = str(tmp_path / "ort_ext.onnx")
    _session(path, ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, optimized=out)
    return collections.Counter(n.op_type for n in onnx.load(out).graph.node)


def test_dynamic_matmuls_fuse_as_ort_extended_does(tmp_path):
    path = qdq_models.dynamic_mlp(str(tmp_path))
    out, report, _ = optimize(io.load(path), level=2, target="ort")
    ops = _ops(out)
    # x's DynamicQuantizeLinear feeds one MatMul: DynamicQuantizeMatMul; h's feeds two: it stays, and
    # each of its MatMuls (bias first or none) becomes MatMulIntegerToFloat
    assert ops["DynamicQuantizeMatMul"] == 1 and ops["MatMulIntegerToFloat"] == 2 and ops["DynamicQuantizeLinear"] == 1
    assert not {"MatMulInteger", "Cast", "Mul", "Add"} & set(ops)
    ext = _ort_extended_ops(path, tmp_path)
    assert sum(ops.values()) <= sum(ext.values()), (ops, ext)
    rng = np.random.default_rng(3)
    feeds = [{"x": rng.standard_normal((2, 5, 16)).astype(np.float32)} for _ in range(3)]
    ref = [_session(path).run(None, f) for f in feeds]
    got = [_session(to_onnx(out)).run(None, f) for f in feeds]
    for r, g in zip(ref, got):
        for a, b in zip(r, g):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)


def test_dynamic_matmul_refused_where_its_product_is_also_read(tmp_path):
    proto = onnx.load(qdq_models.dynamic_mlp(str(tmp_path)))
    cast = next(n for n in proto.graph.node if n.op_type == "Cast")
    proto.graph.output.append(helper.make_tensor_value_info(cast.output[0], TensorProto.FLOAT, None))
    out, report, _ = optimize(io.load_proto(proto), level=2, target="ort")
    stats = report.passes["ort-dynamic-quant-matmul"].stats
    assert stats["integer_to_float"] + stats["dynamic"] == 2  # 3 products, the one with a read Cast stays
    assert _ops(out)["MatMulInteger"] == 1 and _ops(out)["Cast"] == 1
