"""Decoder attention (KV caches, grouped KV heads, rotary, cross-attention) -> ONNX Attention
(opset 23) with ``--target onnx``.

The layers of ``decoder_models`` converted to opset 23, checked at distinct sizes for every
symbolic dim (decoder 5 / encoder 12, past 8 / new 4, a decode step, a prefill with left padding,
batch 3). The prefill's padded sequence has query rows whose every key is masked (finfo.min):
onnxruntime's kernel zeroes such a row unless the mask is raised one ulp, so the prefill set fails
without it.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from graphtool import io
from graphtool.optimize import optimize
from graphtool.runtime import make_session
from tests.passes import decoder_models as dm
from tests.passes.ort_helpers import assert_same_outputs, ops, run
from tests.passes.test_decoder_attention import SIZES


def at_23(proto: onnx.ModelProto) -> onnx.ModelProto:
    proto.opset_import[0].version = 23  # every op of these layers reads the same at 17 and 23
    return proto


def fused_and_equal(proto: onnx.ModelProto, expected: int, passes=None, sizes=SIZES):
    original, fused, _ = run(proto, passes, target="onnx")
    counts = ops(fused)
    assert counts["Attention"] == expected, counts
    assert "Softmax" not in counts and not any(k.startswith("com.microsoft") for k in counts), counts
    for kw in sizes:
        assert_same_outputs(original, fused, dm.feeds(proto, **kw))
    return fused


def attention_nodes(model):
    return list(model.graph.nodes("Attention"))


@pytest.mark.parametrize("name,build,expected", [
    ("llama_gqa", lambda: dm.llama_layer(kv_heads=2), 1),          # rotary, 2 KV heads repeated to 4
    ("llama_mqa", lambda: dm.llama_layer(kv_heads=1), 1),
    ("llama_mha", lambda: dm.llama_layer(kv_heads=4), 1),
    ("gqa_dynamo_sdpa", lambda: dm.llama_layer(kv_heads=2, rotary=False, scale_form="sdpa"), 1),
    ("transformers5_zeroed_rows", lambda: dm.llama_layer(kv_heads=2, zero_empty_rows=True), 1),
    ("bart", dm.bart_decoder_layer, 2),                            # self over past + new, projected cross
    ("bart_cached_cross", lambda: dm.bart_decoder_layer(cached_cross=True), 2),
    ("bart_no_encoder_mask", lambda: dm.bart_decoder_layer(encoder_mask=False), 2),
    ("whisper_tiled_positions", lambda: dm.bart_decoder_layer(tiled_positions=True), 2),
    ("bloom_alibi", dm.bloom_layer, 1),  # heads folded into the batch, ALiBi + raised mask as attn_mask
])
def test_decoder_layers_become_onnx_attention_at_opset_23(name, build, expected):
    fused_and_equal(at_23(build()), expected)


def test_the_prefill_has_rows_with_every_key_masked():
    """What makes the raised mask necessary (and this file's prefill set a real test): at past 0,
    the left-padded sequence's first queries see only padding."""
    mask = dm.feeds(dm.llama_layer(), seq=7, past=0)["mask"]
    assert np.all(mask[1, 0, 0] == dm.MIN) and np.all(mask[1, 0, 1] == dm.MIN)


def test_grouped_heads_and_cache_go_into_the_op():
    """repeat_kv goes (kv_num_heads 2 for 4 query heads), the cache Concats become past_key/
    past_value in and present_key/present_value out under the graph outputs' names."""
    proto = at_23(dm.llama_layer(kv_heads=2, rotary=False, scale_form="sdpa"))
    fused = fused_and_equal(proto, 1)
    (node,) = attention_nodes(fused)
    assert node.attr("q_num_heads") == 4 and node.attr("kv_num_heads") == 2
    assert node.inputs[4:] == ["past_key", "past_value"] and node.outputs[1:] == ["present_key", "present_value"]
    assert {"Expand", "Concat", "Unsqueeze"}.isdisjoint(ops(fused)), ops(fused)


def test_unsplit_queries_keys_and_values_take_the_3d_form():
    """BART's self-attention: q and the new k, v are head splits of [B, S, H] projections, so the
    op reads them unsplit and its output needs no merge."""
    fused = fused_and_equal(at_23(dm.bart_decoder_layer()), 2)
    self_attention = next(n for n in attention_nodes(fused) if len(n.inputs) == 6)
    assert self_attention.inputs[4:] == ["past_key", "past_value"]
    for value in self_attention.inputs[:3]:
        producer = fused.graph.producer(value)
        assert producer is None or producer.op_type != "Transpose"
    assert not any(n.op_type == "Transpose" and n.inputs[0] == self_attention.outputs[0] for n in fused.graph.nodes())


def test_without_the_raised_mask_a_fully_masked_row_differs():
    """The kernel's behaviour that the raise answers, measured on the op alone: a row of
    finfo.min scores is zeros in onnxruntime, the mean of v in the graph (and with the raise)."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 2, 3, 8)).astype(np.float32) for _ in range(3))
    mask = np.zeros((1, 1, 3, 3), np.float32)
    mask[0, 0, 0] = dm.MIN
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in "qkvm"]
    graph = helper.make_graph([helper.make_node("Attention", list("qkvm"), ["y"])], "a", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    session = make_session(io.load_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])))
    raw = session.run(None, dict(q=q, k=k, v=v, m=mask))[0]
    raised = session.run(None, dict(q=q, k=k, v=v, m=np.where(mask == dm.MIN, np.nextafter(np.float32(dm.MIN), np.float32(0)), mask).astype(np.float32)))[0]
    np.testing.assert_allclose(raised[0, :, 0], v[0].mean(axis=1), atol=1e-6)
    if np.allclose(raw[0, :, 0], raised[0, :, 0], atol=1e-6):
        pytest.skip("this onnxruntime averages a fully masked row itself")
    assert np.all(raw[0, :, 0] == 0)


def test_float16_is_refused_with_its_reason():
    from graphtool.rewrite.explain import format_explanations

    proto = at_23(dm.llama_layer(kv_heads=2, dtype=TensorProto.FLOAT16))
    fused, _, ctx = optimize(io.load_proto(proto), level=2, target="onnx", explain=["onnx-cached-attention"])
    assert "Attention" not in ops(fused) and ops(fused)["Softmax"] == 1
    assert "q is float16" in format_explanations(ctx.explanations)


def test_explain_names_ungrouped_keys():
    """K with 2 heads read by 4 query heads without repeat_kv: never fused, and --explain says why."""
    from graphtool.rewrite.explain import format_explanations

    proto = at_23(dm.llama_layer(kv_heads=2))
    reshapes = [n for n in proto.graph.node if n.op_type == "Reshape"]
    repeat = [n for n in reshapes if any(v.startswith("expand") for v in n.input)]
    concat_k = [n for n in proto.graph.node if n.op_type == "Concat" and n.input[0] == "past_key"][0]
    for node in proto.graph.node:
        if node.op_type == "Transpose" and node.input[0] == repeat[0].output[0]:
            node.input[0] = concat_k.output[0]
    fused, _, ctx = optimize(io.load_proto(proto), level=2, target="onnx", passes=["fuse-attention"],
                             explain=["onnx-cached-attention"])
    assert "Attention" not in ops(fused)
    assert "k is not provably [B, 4, T, 8]" in format_explanations(ctx.explanations)


def test_a_mask_computed_from_the_cache_keeps_the_concat():
    """A mask that reads the cache's shape would be computed from the op's own present output:
    the Concats stay in front (keys and values 4-D, no past input), no cycle, outputs equal."""
    proto = at_23(dm.bart_decoder_layer(cached_cross=True))
    graph = proto.graph
    cat = next(n for n in graph.node if n.op_type == "Concat" and n.input[0] == "past_key")
    extra = [helper.make_node("Shape", [cat.output[0]], ["cache_shape"], name="/cache_shape"),
             helper.make_node("ReduceSum", ["cache_shape"], ["cache_sum"], keepdims=0, name="/cache_sum"),
             helper.make_node("Cast", ["cache_sum"], ["cache_f"], to=TensorProto.FLOAT, name="/cache_f"),
             helper.make_node("Mul", ["cache_f", "zero"], ["cache_zero"], name="/cache_zero"),
             helper.make_node("Add", ["mask", "cache_zero"], ["mask_from_cache"], name="/mask_from_cache")]
    graph.initializer.append(onnx.numpy_helper.from_array(np.array(0, np.float32), "zero"))
    for node in graph.node:
        node.input[:] = ["mask_from_cache" if v == "mask" else v for v in node.input]
    graph.node.extend(extra)
    proto = helper.make_model(helper.make_graph(_sorted(graph), graph.name, graph.input, graph.output, graph.initializer),
                              opset_imports=proto.opset_import)
    fused = fused_and_equal(proto, 2)
    assert all(len(n.inputs) <= 4 for n in attention_nodes(fused))
    assert any(n.op_type == "Concat" and n.inputs[0] == "past_key" for n in fused.graph.nodes())


def _sorted(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """The graph's nodes in an order where each reads only what comes before it."""
    known = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    pending, done = list(graph.node), []
    while pending:
        ready = [n for n in pending if all(v in known or not v for v in n.input)]
        assert ready, "a cycle"
        for n in ready:
            known.update(n.output)
            done.append(n)
        pending = [n for n in pending if n not in ready]
    return done


def test_float16_with_a_minus_inf_mask_fuses():
    """TorchScript's mask Where(visible, 0, -inf) holds no finite lowest value: a masked score is
    -inf in the graph and the kernel alike, a row of only -inf is 0 in the kernel and (behind the
    exporters' IsNaN guard) in the graph; float16 then fuses, outputs within float16's precision."""
    proto = dm.llama_layer(kv_heads=2, dtype=TensorProto.FLOAT16)
    graph = proto.graph
    graph.input.append(helper.make_tensor_value_info("visible", TensorProto.BOOL, ["batch", 1, "seq", "total"]))
    graph.initializer.extend([onnx.numpy_helper.from_array(np.array(0, np.float16), "zero16"),
                              onnx.numpy_helper.from_array(np.array(-np.inf, np.float16), "minus_inf16")])
    softmax = next(n for n in graph.node if n.op_type == "Softmax")
    for node in graph.node:
        node.input[:] = ["mask_inf" if v == "mask" else v for v in node.input]
    guard = [helper.make_node("Where", ["visible", "zero16", "minus_inf16"], ["mask_inf"], name="/mask_inf"),
             helper.make_node("IsNaN", [softmax.output[0]], ["probs_nan"], name="/probs_nan"),
             helper.make_node("Where", ["probs_nan", "zero16", softmax.output[0]], ["probs_safe"], name="/probs_safe")]
    for node in graph.node:
        if node.op_type == "MatMul" and node.input[0] == softmax.output[0]:
            node.input[0] = "probs_safe"
    kept = [i for i in graph.input if i.name != "mask"]
    del graph.input[:]
    graph.input.extend(kept)
    graph.node.extend(guard)
    proto = at_23(helper.make_model(helper.make_graph(_sorted(graph), graph.name, graph.input, graph.output,
                                                      graph.initializer), opset_imports=proto.opset_import))
    original, fused, _ = run(proto, target="onnx")
    assert ops(fused)["Attention"] == 1 and "Softmax" not in ops(fused)
    for kw in SIZES:
        feeds = dm.feeds(proto, **kw)
        feeds["visible"] = dm.feeds(dm.llama_layer(), **kw)["mask"] == 0
        assert_same_outputs(original, fused, feeds, atol=2e-2)


def _in_graph_causal(padding: bool) -> onnx.ModelProto:
    """The float16 Llama layer with its mask computed in the graph, as the dynamo exports of mBART's /
    Llama's decoder write it: Where(arange(T) <= arange(S) + P, 0, finfo(float16).min), T = P + S
    from the cache's and x's shapes; ``padding``: And-ed with attention_mask [B, T] (left padding can
    then hide every key of a row)."""
    proto = dm.llama_layer(kv_heads=2, dtype=TensorProto.FLOAT16)
    graph = proto.graph
    i64 = lambda v, name: onnx.numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    graph.initializer.extend([i64(0, "m_zero"), i64(1, "m_one"), i64([0], "m_ax0"), i64([0, 1, 2], "kv_axes"),
                              i64([0, 1, 3], "q_axes"), i64([1, 2], "pad_axes"),
                              onnx.numpy_helper.from_array(np.array(0, np.float16), "zero16"),
                              onnx.numpy_helper.from_array(np.array(np.finfo(np.float16).min, np.float16), "min16")])
    nodes = [helper.make_node("Shape", ["x"], ["x_shape"]),
             helper.make_node("Gather", ["x_shape", "m_one"], ["seq_len"]),
             helper.make_node("Shape", ["past_key"], ["pk_shape2"], start=2, end=3),
             helper.make_node("Squeeze", ["pk_shape2", "m_ax0"], ["past_len"]),
             helper.make_node("Add", ["past_len", "seq_len"], ["total"]),
             helper.make_node("Range", ["m_zero", "total", "m_one"], ["kv_pos"]),
             helper.make_node("Unsqueeze", ["kv_pos", "kv_axes"], ["kv4"]),
             helper.make_node("Range", ["m_zero", "seq_len", "m_one"], ["q_pos0"]),
             helper.make_node("Add", ["q_pos0", "past_len"], ["q_pos"]),
             helper.make_node("Unsqueeze", ["q_pos", "q_axes"], ["q4"]),
             helper.make_node("LessOrEqual", ["kv4", "q4"], ["causal"])]
    visible = "causal"
    if padding:
        graph.input.append(helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "total"]))
        nodes += [helper.make_node("Cast", ["attention_mask"], ["am_bool"], to=TensorProto.BOOL),
                  helper.make_node("Unsqueeze", ["am_bool", "pad_axes"], ["am4"]),
                  helper.make_node("And", ["causal", "am4"], ["visible"])]
        visible = "visible"
    nodes.append(helper.make_node("Where", [visible, "zero16", "min16"], ["mask_graph"]))
    for node in graph.node:
        node.input[:] = ["mask_graph" if v == "mask" else v for v in node.input]
    kept = [i for i in graph.input if i.name != "mask"]
    del graph.input[:]
    graph.input.extend(kept)
    graph.node.extend(nodes)
    return at_23(helper.make_model(helper.make_graph(_sorted(graph), graph.name, graph.input, graph.output,
                                                     graph.initializer), opset_imports=proto.opset_import))


def test_float16_with_an_in_graph_causal_mask_fuses_and_with_padding_is_refused():
    """A float16 mask with finite finfo.min fuses when no row can be fully masked: the causal
    Where(arange(T) <= arange(S) + P, 0, min) shows key 0 to every query (mbart_fp16 at opset 23: 0 -> 4
    of 4, 2.4e-4). With the padding And-ed in, a padded query's row can hide every key: refused."""
    proto = _in_graph_causal(padding=False)
    original, fused, _ = run(proto, target="onnx")
    assert ops(fused)["Attention"] == 1 and "Softmax" not in ops(fused)
    for kw in SIZES:
        assert_same_outputs(original, fused, dm.feeds(proto, **kw), atol=2e-2)
    _, padded, _ = run(_in_graph_causal(padding=True), target="onnx")
    assert not ops(padded)["Attention"] and ops(padded)["Softmax"] == 1


def test_onnxscript_whisper_decoder_at_opset_23():
    """onnxscript's one-layer Whisper decoder (self-attention over past + new keys, cross-attention
    over the cached encoder keys), converted to opset 23: both attentions become ONNX Attention,
    outputs as the converted model's on the peer's inputs (outputs up to ~113: rel. 5e-6)."""
    from graphtool.convert import convert

    models = pytest.importorskip("onnxscript.rewriter.models._whisper_decoder")
    ir = pytest.importorskip("onnx_ir")
    test = models.whisper_decoder_test()
    converted = convert(io.load_proto(ir.serde.serialize_model(test.get_onnx_model())), 23, verify_outputs=False).model
    fused, _, _ = optimize(converted, level=2, target="onnx")
    counts = ops(fused)
    assert counts["Attention"] == 2 and "Softmax" not in counts, counts
    assert_same_outputs(converted, fused, test.get_ort_inputs(), atol=2e-3)
