"""Decoder attention (KV caches, grouped KV heads, rotary, cross-attention) -> MultiHeadAttention.

Every model is checked at distinct sizes for every symbolic dim: decoder 5 / encoder 12, past 8 /
new 4, a decode step (new 1), a prefill (past 0), batch 3 — a rewrite that is right only when
two dims happen to be equal (issue 32: the cross-attention mask expanded to [S, S]) fails here.
"""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from graphtool import io
from graphtool.optimize import optimize
from tests.passes import decoder_models as dm
from tests.passes.ort_helpers import assert_same_outputs, ops, run

SIZES = [dict(seq=5, enc=12, past=3), dict(seq=4, past=8), dict(seq=1, past=8), dict(seq=7, past=0, enc=2),
         dict(batch=3, seq=2, past=5, enc=9)]


def fused_and_equal(proto: onnx.ModelProto, expected: int, passes=None, sizes=SIZES):
    original, fused, _ = run(proto, passes)
    counts = ops(fused)
    assert counts["com.microsoft:MultiHeadAttention"] == expected, counts
    assert "Softmax" not in counts
    for kw in sizes:
        assert_same_outputs(original, fused, dm.feeds(proto, **kw))
    return fused


def test_cross_attention_with_encoder_mask_runs_when_decoder_and_encoder_lengths_differ():
    """Issue 32: the encoder's padding mask [B, 1, S_dec, S_enc] was expanded to [1, 1, S_dec,
    S_dec]: 'invalid expand shape' in onnxruntime as soon as the two lengths differ."""
    proto = dm.bart_decoder_layer()
    fused_and_equal(proto, 2, ["fuse-attention-ort"])


@pytest.mark.parametrize("form", ["expanded", "broadcast"])
def test_cross_attention_mask_expands_to_decoder_by_encoder(form):
    """A [B, 1, 1, S_enc] mask (not expanded by the model) gets Expand [1, 1, S_dec, S_enc]."""
    proto = dm.bart_decoder_layer()
    if form == "broadcast":  # drop the model's Expand: the mask reaches the Add as [B, 1, 1, S_enc]
        graph = proto.graph
        expand = next(n for n in graph.node if n.op_type == "Expand" and n.output[0].startswith("expand"))
        for node in graph.node:
            node.input[:] = [expand.input[0] if v == expand.output[0] else v for v in node.input]
    fused = fused_and_equal(proto, 2, ["fuse-attention-ort"], [dict(seq=5, enc=12), dict(seq=1, enc=12, past=4)])
    assert ops(fused)["Expand"] >= 1


@pytest.mark.parametrize("name,build", [
    ("llama_gqa", lambda: dm.llama_layer(kv_heads=2)),          # rotary, 2 KV heads repeated to 4
    ("llama_mqa", lambda: dm.llama_layer(kv_heads=1)),          # one KV head
    ("llama_mha", lambda: dm.llama_layer(kv_heads=4)),          # no grouping
    ("gqa_dynamo_sdpa", lambda: dm.llama_layer(kv_heads=2, rotary=False, scale_form="sdpa")),
    ("bart_cached_cross", lambda: dm.bart_decoder_layer(cached_cross=True)),
    ("bart_no_encoder_mask", lambda: dm.bart_decoder_layer(encoder_mask=False)),
    ("whisper_tiled_positions", lambda: dm.bart_decoder_layer(tiled_positions=True)),
    ("transformers5_zeroed_rows", lambda: dm.llama_layer(kv_heads=2, zero_empty_rows=True)),
    # Falcon's view(B, N, S, h) after sdpa, proven a no-op through the in-graph mask (its Expand target
    # Where(Equal(t, -1), 1, t) element by element, And, Range(0, B, 1)): was 0 fused
    ("falcon_torchscript_mask", dm.falcon_layer),
])
def test_decoder_layers_fuse_at_level_2_and_run_at_other_sizes(name, build):
    proto = build()
    expected = 2 if name.startswith(("bart", "whisper")) else 1
    fused_and_equal(proto, expected)


def test_float16_decoder_layer():
    """MultiHeadAttention has a float16 CPU kernel: a float16 export fuses too (mask, q, k, v all
    float16), outputs within float16's precision."""
    proto = dm.llama_layer(kv_heads=2, dtype=TensorProto.FLOAT16)
    original, fused, _ = run(proto)
    assert ops(fused)["com.microsoft:MultiHeadAttention"] == 1
    for kw in SIZES[:3]:
        assert_same_outputs(original, fused, dm.feeds(proto, **kw), atol=2e-2)


def test_fuses_after_fused_matmul_took_the_scores():
    """If ort-fused-matmul ran first (Q·Kᵀ as FusedMatMul transB=1, alpha = the scale), the rule
    still matches, and reads the scale from alpha."""
    proto = dm.llama_layer(kv_heads=2)
    original = io.load_proto(proto)
    pre, _, _ = optimize(original, level=2, target="ort", passes=["ort-fused-matmul"])
    assert ops(pre)["com.microsoft:FusedMatMul"] >= 1
    fused, _, _ = optimize(pre, level=2, target="ort", passes=["fuse-attention-ort"])
    assert ops(fused)["com.microsoft:MultiHeadAttention"] == 1
    for kw in SIZES[:3]:
        assert_same_outputs(original, fused, dm.feeds(proto, **kw))


def test_refuses_keys_and_values_of_unproven_lengths():
    """k and v from two cache inputs with their own length symbols: no proof that T_k = T_v."""
    proto = dm.bart_decoder_layer(cached_cross=True)
    for i in proto.graph.input:
        if i.name == "cross_value":
            i.CopyFrom(helper.make_tensor_value_info("cross_value", TensorProto.FLOAT, ["batch", dm.N, "v_len", dm.HD]))
    _, fused, _ = run(proto, ["fuse-attention-ort"])
    assert ops(fused)["com.microsoft:MultiHeadAttention"] == 1  # the self-attention only
    assert ops(fused)["Softmax"] == 1


def test_refuses_grouped_heads_that_are_not_repeated():
    """K with 2 heads against 4 query heads (broadcast would fail in the original too, but the
    rule must not claim [B, N, T, h]): q·kᵀ over mismatched heads is never fused."""
    proto = dm.llama_layer(kv_heads=2)
    reshapes = [n for n in proto.graph.node if n.op_type == "Reshape"]
    repeat = [n for n in reshapes if any(v.startswith("expand") for v in n.input)]
    concat_k = [n for n in proto.graph.node if n.op_type == "Concat" and n.input[0] == "past_key"][0]
    for node in proto.graph.node:  # the scores read the cache before repeat_kv
        if node.op_type == "Transpose" and node.input[0] == repeat[0].output[0]:
            node.input[0] = concat_k.output[0]
    _, fused, _ = run(proto, ["fuse-attention-ort"])
    assert "com.microsoft:MultiHeadAttention" not in ops(fused)


def test_refuses_softmax_over_queries():
    proto = dm.llama_layer(kv_heads=2)
    softmax = next(n for n in proto.graph.node if n.op_type == "Softmax")
    softmax.attribute[0].i = 2
    _, fused, _ = run(proto, ["fuse-attention-ort"])
    assert "com.microsoft:MultiHeadAttention" not in ops(fused)


def test_causal_cross_attention_with_other_key_length_is_refused():
    """The projected rule's causal mask is [S, S]: with keys from elsewhere it proves T = S first."""
    from tests.passes.test_attention import attention_model

    proto = attention_model(weights_as_inputs=True, causal=True, mask=False)
    graph = proto.graph
    graph.input.append(helper.make_tensor_value_info("enc", TensorProto.FLOAT, ["batch", "enc_seq", 16]))
    for node in graph.node:
        if node.op_type == "MatMul" and node.input[1] in ("Wk", "Wv"):
            node.input[0] = "enc"
    _, fused, _ = run(proto, ["fuse-attention-ort"])
    assert "com.microsoft:MultiHeadAttention" not in ops(fused)


# ------------------------------------------------ onnxscript's real-model graphs (its wheel, as code)


def _onnxscript_model(module: str, factory: str) -> onnx.ModelProto:
    models = pytest.importorskip("onnxscript.rewriter.models." + module)
    ir = pytest.importorskip("onnx_ir")
    test = getattr(models, factory)()
    return ir.serde.serialize_model(test.get_onnx_model()), test.get_ort_inputs()


def test_onnxscript_whisper_decoder_with_past_self_and_cached_cross_attention():
    """onnxscript's one-layer Whisper decoder (its ort_fusions test expects MultiHeadAttention for
    the self-attention over past + new keys and for the cross-attention over the cached encoder
    keys): level 2 fuses both, outputs as the original's on the peer's inputs (past 32, new 1)."""
    proto, inputs = _onnxscript_model("_whisper_decoder", "whisper_decoder_test")
    original = io.load_proto(proto)
    fused, _, _ = optimize(io.load_proto(proto), level=2, target="ort")
    counts = ops(fused)
    assert counts["com.microsoft:MultiHeadAttention"] == 2 and "Softmax" not in counts, counts
    assert_same_outputs(original, fused, inputs, atol=1e-3)


def test_cache_concat_becomes_past_and_present_of_the_fused_op():
    """BART's self-attention: Concat(past, new) for k and v becomes MultiHeadAttention's
    past_key/past_value inputs and present outputs (under the Concats' names, graph outputs kept)."""
    proto = dm.bart_decoder_layer()
    fused = fused_and_equal(proto, 2, ["fuse-attention-ort", "dead-code-elimination"])
    with_past = [n for n in fused.graph.nodes("MultiHeadAttention") if len(n.inputs) == 8 and n.inputs[6] == "past_key"]
    assert len(with_past) == 1 and len(with_past[0].outputs) == 3
    assert "Concat" not in {n.op_type for n in fused.graph.nodes() if "past_key" in n.inputs}


def test_cache_read_by_a_shape_keeps_the_concat():
    """A Shape of the cache Concat (how some exports size the mask) could feed the fused op and
    close a cycle through its present output: the 4-D key/value form is used, the Concat stays."""
    proto = dm.bart_decoder_layer()
    cat = next(n for n in proto.graph.node if n.op_type == "Concat" and n.input[0] == "past_key")
    proto.graph.node.append(helper.make_node("Shape", [cat.output[0]], ["cache_shape"], name="/cache_shape"))
    proto.graph.output.append(helper.make_tensor_value_info("cache_shape", TensorProto.INT64, [4]))
    fused = fused_and_equal(proto, 2, ["fuse-attention-ort", "dead-code-elimination"])
    assert all(len(n.inputs) <= 6 for n in fused.graph.nodes("MultiHeadAttention"))
    assert any(n.op_type == "Concat" and n.inputs[0] == "past_key" for n in fused.graph.nodes())


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_llama_style_layer_converted_to_float16_fuses_rotary_and_residual_norm(dtype):
    """The same layer without q/k norms (Llama's attention): after onnxruntime's float16 converter
    even q's head dim is a declared unk__N (nothing re-fixes it to 16, as Gemma's q-norm weight
    does), so rotary refused "the rotated size ... is not a static even number" and fold-shapes
    could not fold rotate_half's Slice bounds. Made-up declared dims now count as unknown
    (graphtool.shapes.declared_dims) and are inferred again: 2 rotations, the residual norm."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    proto = dm.gemma_layer(qk_norm=False)
    if dtype == "float16":
        proto = convert_float_to_float16(proto, keep_io_types=False)
    original, fused, _ = run(proto)
    counts = ops(fused)
    assert counts["com.microsoft:MultiHeadAttention"] == 1 and counts["com.microsoft:RotaryEmbedding"] == 2, counts
    assert counts["SimplifiedLayerNormalization"] == 3 and counts["com.microsoft:SkipSimplifiedLayerNormalization"] == 1, counts
    for kw in SIZES[1:]:
        assert_same_outputs(original, fused, dm.feeds(proto, **kw), atol=2e-2 if dtype == "float16" else 1e-4)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_gemma_layer_fuses_attention_rotary_and_every_norm(dtype):
    """A Gemma 3 layer (q/k RMSNorms before the rotary, norms after attention and MLP) fuses its
    attention, both rotations and all six norms (one of them with the residual Add). float16 as
    onnxruntime's converter writes it: its value_info carries shape inference's made-up dims
    (unk__N), so q's batch and length are proven only by walking the plumbing — through the q norm's
    ReduceMean, the heads' Reshape target Concat(Shape(x)[0], Shape(x)[1], -1, h), the fused
    SimplifiedLayerNormalization and the sdpa guard's IsNaN. Before that walk, the float16 layer kept
    both rotations and the residual Add unfused (cos's batch "not provably x's")."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    proto = dm.gemma_layer()
    if dtype == "float16":
        proto = convert_float_to_float16(proto, keep_io_types=False)
        assert any(d.dim_param.startswith("unk__") for v in proto.graph.value_info
                   for d in v.type.tensor_type.shape.dim)
    original, fused, _ = run(proto)
    counts = ops(fused)
    assert counts["com.microsoft:MultiHeadAttention"] == 1, counts
    assert counts["com.microsoft:RotaryEmbedding"] == 2, counts
    assert counts["SimplifiedLayerNormalization"] == 5 and counts["com.microsoft:SkipSimplifiedLayerNormalization"] == 1, counts
    assert counts["com.microsoft:FastGelu"] == 1 and "Tanh" not in counts, counts  # float16: its nearest constants
    for kw in SIZES[1:]:
        assert_same_outputs(original, fused, dm.feeds(proto, **kw), atol=2e-2 if dtype == "float16" else 1e-4)


@pytest.mark.parametrize("form", ["dynamo", "torchscript"])
def test_bloom_alibi_attention_with_heads_folded_into_the_batch_fuses(form):
    """BLOOM: q, k, v folded to [B·N, ·, h], alibi + q·kᵀ/√h (baddbmm), unfolded for mask and Softmax,
    folded again for · v: MultiHeadAttention with attention_bias = alibi as [B, N, 1, T] + the mask
    (was 0 fused: the cached pattern wants 4-D scores). TorchScript's form, two layers: q, k, v are
    Gathers at axis 3 of the packed projection, every fold computes its own B·N, the merge reads B as
    Shape(folded context)[0] / N; the second layer's dims are proven after the first one fused."""
    proto = dm.bloom_layer(torchscript=form == "torchscript", layers=2 if form == "torchscript" else 1)
    sizes = [dict(seq=5, past=3), dict(seq=4, past=8), dict(seq=1, past=9, batch=3), dict(seq=7, past=0)]
    fused_and_equal(proto, 2 if form == "torchscript" else 1, sizes=sizes)


def test_bloom_folds_of_unproven_batch_times_heads_are_left_alone():
    """The probabilities' fold computes its own B·N (from the mask's batch): nothing proves the four
    folds share one leading dim, so the element counts do not pin it to B·N and the rule refuses."""
    proto = dm.bloom_layer(shared_lead=False)
    original = io.load_proto(proto)
    fused, _, ctx = optimize(original, level=2, target="ort", explain={"alibi-attention"})
    assert not ops(fused)["com.microsoft:MultiHeadAttention"]
    reasons = [e["reason"] for e in ctx.explanations.values() if e["rule"] == "alibi-attention"]
    assert any("share one leading dim" in r for r in reasons), reasons
    assert_same_outputs(original, fused, dm.feeds(proto, seq=4, past=8))


def test_dim_proofs_follow_a_gather_at_any_axis_and_a_tile_that_repeats_once():
    """``Dims.root`` through Gather(x, i, axis=3) — BLOOM's TorchScript q/k/v from the packed projection
    viewed [B, S, N, 3, h]: a layer after a fused one has no inferred batch and is proven through it —
    and through Tile's axes repeated once (GPT-J's repeat_interleave of the angles)."""
    import numpy as np
    from onnx import numpy_helper

    from graphtool.pass_manager import PassContext
    from graphtool.passes._ort_common import Dims, Shapes

    inits = [numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array([[0, 2]], np.int64), "pairs"),
             numpy_helper.from_array(np.array([1, 1, 1, 2], np.int64), "reps")]
    nodes = [helper.make_node("Gather", ["x", "one"], ["q"], axis=3),
             helper.make_node("Gather", ["x", "pairs"], ["qq"], axis=3),
             helper.make_node("Tile", ["q", "reps"], ["t"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "s", 4, 3, 8])],
                              [helper.make_tensor_value_info(v, TensorProto.FLOAT, None) for v in ("q", "qq", "t")],
                              inits)
    model = io.load_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    dims = Dims(model.graph, Shapes(model.graph, PassContext(model=model, level=2)))
    assert [dims.root("q", a) for a in range(4)] == [("x", 0), ("x", 1), ("x", 2), ("x", 4)]
    assert [dims.root("qq", a) for a in range(6)] == [("x", 0), ("x", 1), ("x", 2), ("pairs", 0), ("pairs", 1), ("x", 4)]
    assert [dims.root("t", a) for a in range(4)] == [("x", 0), ("x", 1), ("x", 2), ("t", 3)]
