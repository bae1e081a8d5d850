"""Rotary embedding → RotaryEmbedding (com.microsoft for --target ort; ONNX at opset 23)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphtool import io
from graphtool.optimize import optimize
from tests.passes.ort_helpers import assert_same_outputs, ops, run

N, D = 4, 8
INT64_MAX = np.iinfo(np.int64).max


def rope_model(opset=17, batch="batch", seq="seq", angles="computed", halves="slices", cut=D // 2):
    """One attention head block's q rotation, as LLaMA exports write it.

    angles: "computed" (inv_freq @ position_ids, Cos/Sin of Concat(f, f)), "cached" (Gather rows of
    constant tables by position_ids), "unequal" (Concat(f, 2f): the halves differ: must not fuse).
    """
    inv = (1.0 / (10000 ** (np.arange(0, D, 2) / D))).astype(np.float32).reshape(1, D // 2, 1)
    inits = [numpy_helper.from_array(inv, "inv_freq"),
             numpy_helper.from_array(np.array([1], np.int64), "ax1"),
             numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array([cut], np.int64), "h"),
             numpy_helper.from_array(np.array([INT64_MAX], np.int64), "end"),
             numpy_helper.from_array(np.array([-1], np.int64), "last"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two")]
    nodes = []
    pairs = halves == "pairs"
    if angles == "cached":
        table = np.arange(64, dtype=np.float32)[:, None] * inv.reshape(1, -1)
        emb = np.repeat(table, 2, axis=-1) if pairs else np.concatenate([table, table], axis=-1)
        inits += [numpy_helper.from_array(np.cos(emb), "cos_table"), numpy_helper.from_array(np.sin(emb), "sin_table")]
        nodes += [helper.make_node("Gather", ["cos_table", "position_ids"], ["cos3"]),
                  helper.make_node("Gather", ["sin_table", "position_ids"], ["sin3"])]
    else:
        nodes += [helper.make_node("Unsqueeze", ["position_ids", "ax1"], ["p3"]),
                  helper.make_node("Cast", ["p3"], ["pf"], to=TensorProto.FLOAT),
                  helper.make_node("MatMul", ["inv_freq", "pf"], ["fr"]),
                  helper.make_node("Transpose", ["fr"], ["f"], perm=[0, 2, 1])]
        second = "f"
        if angles == "unequal":
            nodes.append(helper.make_node("Mul", ["f", "two"], ["f2"]))
            second = "f2"
        if pairs and angles == "computed":  # repeat_interleave(f, 2, -1)
            inits.append(numpy_helper.from_array(np.array([0, 0, D], np.int64), "flat3"))
            nodes += [helper.make_node("Unsqueeze", ["f", "last"], ["fu"]),
                      helper.make_node("Concat", ["fu", "fu"], ["f2x"], axis=-1),
                      helper.make_node("Reshape", ["f2x", "flat3"], ["emb"])]
        else:
            nodes.append(helper.make_node("Concat", ["f", second], ["emb"], axis=-1))
        nodes += [helper.make_node("Cos", ["emb"], ["cos3"]), helper.make_node("Sin", ["emb"], ["sin3"])]
    nodes += [helper.make_node("Unsqueeze", ["cos3", "ax1"], ["cos"]),
              helper.make_node("Unsqueeze", ["sin3", "ax1"], ["sin"])]
    if pairs:
        inits += [numpy_helper.from_array(np.array([1], np.int64), "one_i"),
                  numpy_helper.from_array(np.array([2], np.int64), "step2"),
                  numpy_helper.from_array(np.array([0, 0, 0, D], np.int64), "flat4")]
        nodes += [helper.make_node("Slice", ["x", "zero", "end", "last", "step2"], ["xe"]),
                  helper.make_node("Slice", ["x", "one_i", "end", "last", "step2"], ["xo"]),
                  helper.make_node("Neg", ["xo"], ["nxo"]),
                  helper.make_node("Unsqueeze", ["nxo", "last"], ["a5"]),
                  helper.make_node("Unsqueeze", ["xe", "last"], ["b5"]),
                  helper.make_node("Concat", ["a5", "b5"], ["st"], axis=-1),
                  helper.make_node("Reshape", ["st", "flat4"], ["rot"])]
    elif halves == "split":
        nodes.append(helper.make_node("Split", ["x"], ["x1", "x2"], axis=-1, num_outputs=2) if opset >= 18
                     else helper.make_node("Split", ["x"], ["x1", "x2"], axis=-1))
    else:
        nodes += [helper.make_node("Slice", ["x", "zero", "h", "last"], ["x1"]),
                  helper.make_node("Slice", ["x", "h", "end", "last"], ["x2"])]
    if not pairs:
        nodes += [helper.make_node("Neg", ["x2"], ["nx2"]), helper.make_node("Concat", ["nx2", "x1"], ["rot"], axis=-1)]
    nodes += [helper.make_node("Mul", ["x", "cos"], ["xc"]),
              helper.make_node("Mul", ["rot", "sin"], ["rs"]),
              helper.make_node("Add", ["xc", "rs"], ["y"])]
    graph = helper.make_graph(
        nodes, "rope",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, N, seq, D]),
         helper.make_tensor_value_info("position_ids", TensorProto.INT64, [batch, seq])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, N, seq, D])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def feeds(batch=2, seq=5, start=3):
    rng = np.random.default_rng(1)
    pos = (start + np.arange(seq)[None, :] + np.arange(batch)[:, None]).astype(np.int64)  # rows differ per batch
    return {"x": rng.standard_normal((batch, N, seq, D)).astype(np.float32), "position_ids": pos}


@pytest.mark.parametrize("angles", ["computed", "cached"])
@pytest.mark.parametrize("halves", ["slices", "split"])
def test_rope_becomes_com_microsoft_rotary_embedding(angles, halves):
    original, fused, _ = run(rope_model(angles=angles, halves=halves, opset=18), ["ort-rotary-embedding"])
    assert ops(fused)["com.microsoft:RotaryEmbedding"] == 1
    assert not ops(fused)["Neg"]
    assert_same_outputs(original, fused, feeds())
    assert_same_outputs(original, fused, feeds(batch=1, seq=1, start=40))  # a decode step far along
    assert_same_outputs(original, fused)  # graphtool's own input discovery


@pytest.mark.parametrize("angles", ["computed", "cached"])
def test_interleaved_rope_becomes_rotary_embedding_interleaved(angles):
    original, fused, _ = run(rope_model(angles=angles, halves="pairs"), ["ort-rotary-embedding"])
    assert ops(fused)["com.microsoft:RotaryEmbedding"] == 1
    assert fused.graph.nodes("RotaryEmbedding")[0].attr("interleaved") == 1
    assert_same_outputs(original, fused, feeds())
    assert_same_outputs(original, fused, feeds(batch=1, seq=1, start=40))


def test_interleaved_rotation_with_half_split_angles_is_refused():
    """Pairs rotated with angles laid out as [f, f] (not [f0, f0, f1, f1, ...]): not the kernel's."""
    proto = rope_model(halves="pairs")
    for node in proto.graph.node:  # the angles of the half-split layout
        if node.op_type == "Reshape" and node.output[0] == "emb":
            node.op_type, node.input[:] = "Concat", ["f", "f"]
            node.attribute.append(helper.make_attribute("axis", -1))
    original = io.load_proto(proto)
    result, _, ctx = optimize(original, level=2, target="ort", passes=["ort-rotary-embedding"],
                              explain={"rotary-embedding-interleaved"})
    assert not ops(result)["com.microsoft:RotaryEmbedding"]
    assert any("pairs are not provably equal" in e["reason"] for e in ctx.explanations.values()), ctx.explanations


def test_static_shapes_give_constant_position_ids():
    original, fused, _ = run(rope_model(batch=2, seq=5), ["ort-rotary-embedding"])
    assert ops(fused)["com.microsoft:RotaryEmbedding"] == 1
    assert not ops(fused)["Range"] and not ops(fused)["Shape"]
    assert_same_outputs(original, fused, feeds())


def test_opset_23_standard_target_writes_onnx_rotary_embedding():
    original, fused, _ = run(rope_model(opset=23), ["fuse-rotary-embedding"], target="onnx")
    assert ops(fused)["RotaryEmbedding"] == 1 and not ops(fused)["com.microsoft:RotaryEmbedding"]
    assert_same_outputs(original, fused, feeds())
    _, below, _ = run(rope_model(opset=21), ["fuse-rotary-embedding"], target="onnx")
    assert not ops(below)["RotaryEmbedding"]


@pytest.mark.parametrize("kind,reason", [("unequal", "halves are not provably equal"),
                                         ("cut", "are not [0, 4) and [4, 8)")])
def test_refuses_what_the_kernel_would_compute_differently(kind, reason):
    proto = rope_model(angles="unequal") if kind == "unequal" else rope_model(cut=3)
    original = io.load_proto(proto)
    result, _, ctx = optimize(original, level=2, target="ort", passes=["ort-rotary-embedding"],
                              explain={"rotary-embedding"})
    assert not ops(result)["com.microsoft:RotaryEmbedding"]
    reasons = [e["reason"] for e in ctx.explanations.values() if e["rule"] == "rotary-embedding"]
    assert any(reason in r for r in reasons), reasons


def _onnxscript_case(factory):
    pytest.importorskip("onnxscript")
    import onnx_ir as ir
    from onnxscript.rewriter.models import _rotary_embedding_models as shipped

    test = getattr(shipped, factory)()
    return ir.serde.serialize_model(test.get_onnx_model()), test.get_ort_inputs()


@pytest.mark.parametrize("factory,rule", [("test_case_1", "rotary-embedding"), ("test_case_2", "rotary-embedding"),
                                          ("partial_rotary_test_case", "rotary-embedding-partial")])
def test_onnxscript_shipped_rotary_models(factory, rule):
    proto, inputs = _onnxscript_case(factory)
    original = io.load_proto(proto)
    fused, report, _ = optimize(original, level=2, target="ort")
    assert ops(fused)["com.microsoft:RotaryEmbedding"] == 1
    assert_same_outputs(original, fused, dict(inputs))
    assert_same_outputs(original, fused)


def test_onnxscript_partial_rotary_with_mismatched_parts_is_left_alone():
    pytest.importorskip("onnxscript")
    from onnxscript import FLOAT, INT64
    from onnxscript.rewriter.models import _rotary_embedding_models as shipped

    script = shipped._make_partial_rotary_script(mismatched=True)
    proto = script.to_model_proto(input_types=(INT64["B", "S"], FLOAT["B", 32, "S", 80]),
                                  output_types=(FLOAT["B", 32, "S", 79],))
    original = io.load_proto(proto)
    fused, _, _ = optimize(original, level=2, target="ort")
    assert ops(fused)["com.microsoft:RotaryEmbedding"] <= 1  # the inner full rotation may fuse on its own
    assert "rotary_embedding_dim" not in {a for n in fused.graph.nodes("RotaryEmbedding") for a in n.attrs}
    assert_same_outputs(original, fused, {"position_ids": np.arange(6, dtype=np.int64)[None],
                                          "query": np.random.default_rng(0).random((1, 32, 6, 80), np.float32)})


def test_identical_slices_do_not_break_slices_to_split():
    """Two fusions each cutting the same half of one table leave twin Slices until CSE merges them."""
    inits = [numpy_helper.from_array(np.array([0], np.int64), "z"), numpy_helper.from_array(np.array([2], np.int64), "h"),
             numpy_helper.from_array(np.array([4], np.int64), "e"), numpy_helper.from_array(np.array([-1], np.int64), "a")]
    nodes = [helper.make_node("Slice", ["x", "z", "h", "a"], ["p"]), helper.make_node("Slice", ["x", "z", "h", "a"], ["q"]),
             helper.make_node("Slice", ["x", "h", "e", "a"], ["r"]), helper.make_node("Sum", ["p", "q", "r"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])], inits)
    original, result, _ = run(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                              ["slices-to-split"], target="onnx")
    assert_same_outputs(original, result)


def gptj_model(opset=17, rd=4, table_kind="tile", cohere=False):
    """GPT-J's (and CodeGen's) query rotation as the TorchScript exporter writes it: x is [B, S, N, D]
    (rotated before the heads move forward), the first ``rd`` channels rotate in pairs and the rest
    pass through; sin/cos are rows of one table gathered by position, split, and repeat_interleave'd
    by Unsqueeze + Tile [1, 1, 1, 1, 2] + Reshape [0, 0, 1, rd]. The pair Slices cut axis 3 while the
    stacking Unsqueezes add axis -1 (two different constants); the flatten target is [0, 0, 0, -1].
    ``cohere``: [B, N, S, D] and a full rotation (Cohere's form), angles at axis 1."""
    rd = D if cohere else rd
    inv = (1.0 / (10000 ** (np.arange(0, rd, 2) / rd))).astype(np.float32)
    table = np.arange(64, dtype=np.float32)[:, None] * inv[None, :]
    i64 = lambda v, name: numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    inits = [numpy_helper.from_array(np.concatenate([np.sin(table), np.cos(table)], -1), "sincos"),
             i64([rd // 2, rd // 2], "halves"), i64([1] if cohere else [2], "heads_axis"), i64([-1], "last"),
             i64([1, 1, 1, 1, 2], "tile"), i64([0, 0, 1, rd] if not cohere else [0, 1, 0, rd], "flat_angles"),
             i64([0], "zero"), i64([1], "one"), i64([2], "two"), i64([rd], "rd"), i64([INT64_MAX], "end"),
             i64([3], "ax3"), i64([0, 0, 0, -1], "flat_pairs")]
    nodes = [helper.make_node("Gather", ["sincos", "position_ids"], ["sc"]),
             helper.make_node("Split", ["sc", "halves"], ["sin_h", "cos_h"], axis=-1)]
    for t in ("sin", "cos"):
        nodes += [helper.make_node("Unsqueeze", [f"{t}_h", "heads_axis"], [f"{t}_u"]),
                  helper.make_node("Unsqueeze", [f"{t}_u", "last"], [f"{t}_p"]),
                  helper.make_node("Tile", [f"{t}_p", "tile"], [f"{t}_t"]),
                  helper.make_node("Reshape", [f"{t}_t", "flat_angles"], [t])]
    src = "x"
    if not cohere:
        nodes += [helper.make_node("Slice", ["x", "zero", "rd", "ax3"], ["xr"]),
                  helper.make_node("Slice", ["x", "rd", "end", "ax3"], ["xp"])]
        src = "xr"
    nodes += [helper.make_node("Slice", [src, "zero", "end", "ax3", "two"], ["xe"]),
              helper.make_node("Slice", [src, "one", "end", "ax3", "two"], ["xo"]),
              helper.make_node("Neg", ["xo"], ["nxo"]),
              helper.make_node("Unsqueeze", ["nxo", "last"], ["a5"]),
              helper.make_node("Unsqueeze", ["xe", "last"], ["b5"]),
              helper.make_node("Concat", ["a5", "b5"], ["st"], axis=-1),
              helper.make_node("Reshape", ["st", "flat_pairs"], ["rot"]),
              helper.make_node("Mul", [src, "cos"], ["xc"]),
              helper.make_node("Mul", ["rot", "sin"], ["rs"]),
              helper.make_node("Add", ["xc", "rs"], ["y" if cohere else "yr"])]
    if not cohere:
        nodes.append(helper.make_node("Concat", ["yr", "xp"], ["y"], axis=-1))
    shape = ["batch", N, "seq", D] if cohere else ["batch", "seq", N, D]
    graph = helper.make_graph(
        nodes, "gptj_rope",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape),
         helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def gptj_feeds(batch=2, seq=5, start=3, cohere=False):
    rng = np.random.default_rng(2)
    pos = (start + np.arange(seq)[None, :] + np.arange(batch)[:, None]).astype(np.int64)
    shape = (batch, N, seq, D) if cohere else (batch, seq, N, D)
    return {"x": rng.standard_normal(shape).astype(np.float32), "position_ids": pos}


@pytest.mark.parametrize("target,opset", [("ort", 17), ("onnx", 23)])
@pytest.mark.parametrize("cohere", [False, True], ids=["gptj", "cohere"])
def test_gptj_and_cohere_interleaved_rotations_fuse(target, opset, cohere):
    """GPT-J/CodeGen: partial interleaved rotation of x laid out [B, S, N, D] (the kernel reads it as
    [B, S, N*D] with num_heads); Cohere: a full interleaved rotation of [B, N, S, D]. Angles repeated
    per pair by Tile, proven equal neighbours; both fuse on either target and compute the same."""
    proto = gptj_model(opset=opset, cohere=cohere)
    original = io.load_proto(proto)
    fused, _, ctx = optimize(original, level=2, target=target,
                             explain={"rotary-embedding-interleaved", "rotary-embedding-partial-interleaved"})
    name = "com.microsoft:RotaryEmbedding" if target == "ort" else "RotaryEmbedding"
    assert ops(fused)[name] == 1, ctx.explanations
    node = fused.graph.nodes("RotaryEmbedding")[0]
    assert node.attr("interleaved") == 1
    if not cohere:
        assert node.attr("num_heads") == N and node.attr("rotary_embedding_dim") == 4
    for sizes in (dict(), dict(batch=1, seq=1, start=40), dict(batch=3, seq=2, start=0)):
        assert_same_outputs(original, fused, gptj_feeds(cohere=cohere, **sizes))


def test_gptj_rotation_with_angles_not_repeated_per_pair_is_refused():
    """The same graph with the angles tiled along the wrong axis ([B, S, 1, 2, rd/2] flattened: [f, f]):
    neighbours differ, the kernel's one angle per pair would be wrong."""
    proto = gptj_model()
    for init in proto.graph.initializer:
        if init.name == "tile":
            init.CopyFrom(numpy_helper.from_array(np.array([1, 1, 1, 2, 1], np.int64), "tile"))
    original = io.load_proto(proto)
    fused, _, ctx = optimize(original, level=2, target="ort", passes=["ort-rotary-embedding"],
                             explain={"rotary-embedding-partial-interleaved"})
    assert not ops(fused)["com.microsoft:RotaryEmbedding"]
    assert_same_outputs(original, fused, gptj_feeds())
