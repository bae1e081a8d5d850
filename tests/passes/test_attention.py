"""Attention fusion: com.microsoft Attention/MultiHeadAttention (--target ort), ONNX Attention (opset 23)."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphtool import io
from graphtool.optimize import optimize
from tests.conftest import FIXTURES
from tests.passes.ort_helpers import assert_same_outputs, ops, run

B, S, H, N = 2, 5, 16, 4
HD = H // N


def attention_model(
    opset: int = 17,
    mask: bool = True,
    causal: bool = False,
    packed: bool = False,
    weights_as_inputs: bool = False,
    k_perm: tuple[int, ...] = (0, 2, 3, 1),
    softmax_axis: int = -1,
    scores_output: bool = False,
    causal_fill: float = -3.4028234663852886e38,
    seq: int | str = "seq",
) -> onnx.ModelProto:
    """One BERT/GPT-2-style self-attention block as the exporters write it."""
    rng = np.random.default_rng(0)
    f32 = np.float32
    inits = [
        numpy_helper.from_array(np.array([0, 0, N, HD], np.int64), "split_heads"),
        numpy_helper.from_array(np.array([0, 0, H], np.int64), "merge_heads"),
        numpy_helper.from_array(np.array(float(np.sqrt(HD)), f32), "sqrt_d"),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", seq, H])]
    nodes = []
    if packed:
        inits += [numpy_helper.from_array((rng.standard_normal((H, 3 * H)) * 0.3).astype(f32), "W"),
                  numpy_helper.from_array((rng.standard_normal(3 * H) * 0.1).astype(f32), "b"),
                  numpy_helper.from_array(np.array([H, H, H], np.int64), "thirds")]
        nodes += [helper.make_node("MatMul", ["x", "W"], ["qkv_mm"]),
                  helper.make_node("Add", ["qkv_mm", "b"], ["qkv"]),
                  helper.make_node("Split", ["qkv", "thirds"], ["q", "k", "v"], axis=2)]
    else:
        for p in "qkv":
            w = (rng.standard_normal((H, H)) * 0.3).astype(f32)
            if weights_as_inputs:
                inputs.append(helper.make_tensor_value_info(f"W{p}", TensorProto.FLOAT, [H, H]))
            else:
                inits.append(numpy_helper.from_array(w, f"W{p}"))
            inits.append(numpy_helper.from_array((rng.standard_normal(H) * 0.1).astype(f32), f"b{p}"))
            nodes += [helper.make_node("MatMul", ["x", f"W{p}"], [f"{p}_mm"]),
                      helper.make_node("Add", [f"b{p}", f"{p}_mm"], [p])]
    for p, perm in (("q", (0, 2, 1, 3)), ("k", k_perm), ("v", (0, 2, 1, 3))):
        nodes += [helper.make_node("Reshape", [p, "split_heads"], [f"{p}4"]),
                  helper.make_node("Transpose", [f"{p}4"], [f"{p}t"], perm=list(perm))]
    nodes += [helper.make_node("MatMul", ["qt", "kt"], ["scores"]),
              helper.make_node("Div", ["scores", "sqrt_d"], ["scaled"])]
    last = "scaled"
    if causal:
        tril = np.tril(np.ones((16, 16), dtype=bool)).reshape(1, 1, 16, 16)
        inits += [numpy_helper.from_array(tril, "tril"), numpy_helper.from_array(np.array([0], np.int64), "zero"),
                  numpy_helper.from_array(np.array([2], np.int64), "ax2"), numpy_helper.from_array(np.array([3], np.int64), "ax3"),
                  numpy_helper.from_array(np.array(causal_fill, f32), "fill")]
        nodes += [helper.make_node("Shape", ["x"], ["seq_len"], start=1, end=2),
                  helper.make_node("Slice", ["tril", "zero", "seq_len", "ax2"], ["rows"]),
                  helper.make_node("Slice", ["rows", "zero", "seq_len", "ax3"], ["causal"]),
                  helper.make_node("Where", ["causal", last, "fill"], ["masked"])]
        last = "masked"
    if mask:
        inputs.append(helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["batch", 1, 1, seq]))
        nodes.append(helper.make_node("Add", [last, "mask"], ["biased"]))
        last = "biased"
    nodes += [helper.make_node("Softmax", [last], ["probs"], axis=softmax_axis),
              helper.make_node("MatMul", ["probs", "vt"], ["ctx"]),
              helper.make_node("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["ctx_t", "merge_heads"], ["y"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", seq, H])]
    if scores_output:
        outputs.append(helper.make_tensor_value_info("scaled", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "attention", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def feeds(model: onnx.ModelProto, seq: int = S) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    out = {"x": rng.standard_normal((B, seq, H)).astype(np.float32)}
    names = {i.name for i in model.graph.input}
    if "mask" in names:
        keep = rng.integers(0, 2, size=(B, 1, 1, seq)).astype(np.float32)
        out["mask"] = (1.0 - keep) * -10000.0
    for p in "qkv":
        if f"W{p}" in names:
            out[f"W{p}"] = (rng.standard_normal((H, H)) * 0.3).astype(np.float32)
    return out


@pytest.mark.parametrize("opset", [17, 13])
def test_bert_style_block_becomes_one_attention_op(opset):
    proto = attention_model(opset=opset)
    original, fused, _ = run(proto, ["fuse-attention-ort"])
    counts = ops(fused)
    assert counts["com.microsoft:Attention"] == 1
    assert not {"Softmax", "Transpose", "Reshape", "MatMul"} & set(counts)  # projections packed in
    assert fused.opset("com.microsoft") == 1
    node = fused.graph.nodes("Attention")[0]
    assert node.attr("num_heads") == N and node.attr("scale") == pytest.approx(1 / np.sqrt(HD))
    assert counts["Expand"] == 1  # the [B,1,1,S] mask broadcast to [B,1,S,S] for the kernel
    assert_same_outputs(original, fused, feeds(proto))
    assert_same_outputs(original, fused, feeds(proto, seq=7))  # the sequence dim stays dynamic


def test_causal_packed_gpt2_style_block():
    proto = attention_model(mask=False, causal=True, packed=True)
    original, fused, _ = run(proto, ["fuse-attention-ort", "dead-code-elimination"])
    node = fused.graph.nodes("Attention")[0]
    assert node.attr("unidirectional") == 1
    assert set(ops(fused)) == {"com.microsoft:Attention"}
    assert_same_outputs(original, fused, feeds(proto))


def test_non_constant_weights_use_multi_head_attention():
    proto = attention_model(weights_as_inputs=True)
    original, fused, _ = run(proto, ["fuse-attention-ort"])
    counts = ops(fused)
    assert counts["com.microsoft:MultiHeadAttention"] == 1 and counts["MatMul"] == 3
    assert_same_outputs(original, fused, feeds(proto))


def test_onnx_attention_at_opset_23_and_not_below():
    proto = attention_model(opset=23, causal=True, mask=False)
    original, fused, _ = run(proto, ["fuse-attention"], target="onnx")
    counts = ops(fused)
    assert counts["Attention"] == 1 and "com.microsoft" not in fused.opset_imports
    assert fused.graph.nodes("Attention")[0].attr("is_causal") == 1
    assert_same_outputs(original, fused, feeds(proto))
    _, untouched, _ = run(attention_model(opset=22), ["fuse-attention"], target="onnx")
    assert "Attention" not in ops(untouched)


def test_onnx_attention_refuses_causal_with_a_padding_mask():
    """ONNX Attention's causal mask is the float's lowest value: a query whose every visible key
    is padding (left padding) would keep only the padded keys where the graph's Softmax spreads
    over every key (measured: rows 2.4 apart). The padding mask alone, or causal alone, fuse."""
    from graphtool.rewrite.explain import format_explanations

    proto = attention_model(opset=23, causal=True)
    kept, _, ctx = optimize(io.load_proto(proto), level=2, target="onnx", passes=["fuse-attention"],
                            explain=["onnx-attention"])
    assert "Attention" not in ops(kept)
    assert "causal and a mask" in format_explanations(ctx.explanations)
    mask = np.zeros((B, 1, 1, S), np.float32)
    mask[1, ..., :2] = np.finfo(np.float32).min
    assert_same_outputs(io.load_proto(proto), kept, {**feeds(proto), "mask": mask})
    projected = attention_model(opset=23, causal=True, weights_as_inputs=True)  # onnx-projected-attention's form
    assert "Attention" not in ops(run(projected, ["fuse-attention"], target="onnx")[1])
    fused_and_equal = run(attention_model(opset=23), ["fuse-attention"], target="onnx")
    assert ops(fused_and_equal[1])["Attention"] == 1
    assert_same_outputs(fused_and_equal[0], fused_and_equal[1], {**feeds(proto), "mask": mask})


@pytest.mark.parametrize(
    "kwargs",
    [
        {"k_perm": (0, 2, 1, 3)},  # q·k without transposing k: not attention
        {"softmax_axis": 2},  # normalizes over queries
        {"scores_output": True},  # the scaled scores are read outside the pattern
        {"causal": True, "causal_fill": -10.0},  # a soft mask the kernel's causal mask is not
    ],
)
def test_refuses_what_it_cannot_prove(kwargs):
    proto = attention_model(**kwargs)
    original, result, _ = run(proto, ["fuse-attention-ort"])
    assert "com.microsoft:Attention" not in ops(result)
    assert ops(result) == ops(original)


def test_refuses_rank_4_input():
    """[a, b, 1, H] reshaped to [a, b, N, h] is legal, but the fused op needs a 3-D input."""
    proto = attention_model(mask=False)
    x = proto.graph.input[0]
    x.CopyFrom(helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 1, H]))
    _, result, _ = run(proto, ["fuse-attention-ort"])
    assert "com.microsoft:Attention" not in ops(result)


# The best node count among ORT extended, onnxruntime.transformers.optimize_model (opt_level 0-2) and
# onnxscript's optimize_for_ort on each export (measured by bench/level2.py): level 2 must not lose.
PEER_BEST = {"bert_ts": 25, "bert_dynamo": 101, "gpt2_ts": 114, "gpt2_dynamo": 62, "vit_ts": 51, "vit_dynamo": 25}


@pytest.mark.parametrize("name", sorted(PEER_BEST))
def test_torch_exports_fuse_every_layer(name):
    """Both exporters, after the level-1 cleanups: one Attention per layer, outputs as torch's."""
    path = os.path.join(FIXTURES, "torch", f"{name}.onnx")
    model = io.load(path)
    fused, _, _ = optimize(model, level=2, target="ort")
    assert ops(fused)["com.microsoft:Attention"] == 2
    assert fused.node_count() <= PEER_BEST[name]
    assert_exporter_outputs(path, fused)


def assert_exporter_outputs(path: str, fused) -> None:
    """The fused model, on the export's sample inputs, gives what torch gave (``.expected.npz``)."""
    from graphtool.runtime import make_session

    inputs = dict(np.load(path[:-5] + ".inputs.npz"))
    expected = dict(np.load(path[:-5] + ".expected.npz"))
    sess = make_session(fused)
    got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, inputs)))
    for key, value in expected.items():
        np.testing.assert_allclose(got[key], value, atol=2e-4, rtol=1e-3)


HF = sorted(f[:-5] for f in os.listdir(os.path.join(FIXTURES, "hf")) if f.endswith(".onnx"))


@pytest.mark.parametrize("name", HF)
def test_transformers_exports_fuse_every_layer(name):
    """transformers 5 models (eager and sdpa attention, TorchScript and dynamo exporters, padded
    masks): one fused op per layer, outputs as torch's, and proven on discovered inputs too —
    those include an all-padding mask, where the sdpa NaN guard decides the output."""
    path = os.path.join(FIXTURES, "hf", f"{name}.onnx")
    original = io.load(path)
    fused, _, _ = optimize(io.load(path), level=2, target="ort")
    counts = ops(fused)
    assert counts["com.microsoft:Attention"] + counts["com.microsoft:MultiHeadAttention"] == 2, counts
    assert "Softmax" not in counts
    assert_exporter_outputs(path, fused)
    from graphtool.verify import verify

    check = verify(original, fused)
    assert check.ok, check.summary()


# ------------------------------------------------------------ fuse-attention-mha (opt-in, unpacked QKV)


def level2_with_mha(model, target: str = "ort"):
    """Level 2 with the unpacked form instead of the packed one: what tune's rewrite set
    "level 2, attention as MultiHeadAttention" runs (graphtool.tune.ort.rewrite_passes)."""
    from graphtool.tune import RewriteSet, rewrite_passes

    rewrite = RewriteSet("mha", 2, ("fuse-attention-ort",), ("fuse-attention-mha",))
    fused, _, _ = optimize(model, level=2, target=target, passes=rewrite_passes(rewrite, target))
    return fused


@pytest.mark.parametrize("opset", [17, 13])
def test_constant_projections_stay_unpacked_with_fuse_attention_mha(opset):
    """MultiHeadAttention takes the three projections (MatMul + Add each) as q, k and v."""
    proto = attention_model(opset=opset)
    original, fused, _ = run(proto, ["fuse-attention-mha"])
    counts = ops(fused)
    assert counts["com.microsoft:MultiHeadAttention"] == 1 and "com.microsoft:Attention" not in counts
    assert counts["MatMul"] == 3 and counts["Add"] == 3 and "Softmax" not in counts
    node = fused.graph.nodes("MultiHeadAttention")[0]
    assert node.attr("num_heads") == N and node.attr("scale") == pytest.approx(1 / np.sqrt(HD))
    assert_same_outputs(original, fused, feeds(proto))
    assert_same_outputs(original, fused, feeds(proto, seq=7))


def test_fuse_attention_mha_causal_split_projections():
    """GPT-2's one packed projection split in thirds: the Split's outputs become q, k, v."""
    proto = attention_model(mask=False, causal=True, packed=True)
    original, fused, _ = run(proto, ["fuse-attention-mha", "dead-code-elimination"])
    counts = ops(fused)
    assert counts["com.microsoft:MultiHeadAttention"] == 1 and counts["Split"] == 1
    assert fused.graph.nodes("MultiHeadAttention")[0].attr("unidirectional") == 1
    assert_same_outputs(original, fused, feeds(proto))


def test_fuse_attention_mha_is_opt_in():
    """No --level selects it (level 2 node counts stay), and only for --target ort does it fire."""
    from graphtool.pass_manager import select_passes

    for level in (1, 2, 3):
        for target in ("ort", "onnx"):
            assert "fuse-attention-mha" not in {c.name for c in select_passes(level, target)}
    _, untouched, _ = run(attention_model(), ["fuse-attention-mha"], target="onnx")
    assert "com.microsoft:MultiHeadAttention" not in ops(untouched)


@pytest.mark.parametrize("name", ["torch/bert_ts", "torch/bert_dynamo", "torch/gpt2_ts", "torch/gpt2_dynamo",
                                  "hf/whisper_encoder_sdpa_ts"])
def test_torch_exports_fuse_every_layer_as_multi_head_attention(name):
    """Both exporters: level 2 with the unpacked form makes one MultiHeadAttention per layer and
    no packed Attention, outputs as torch's, and verified on discovered inputs. Whisper scales q
    before the head split: MultiHeadAttention takes q before that Mul (its scale holds the factor)."""
    from graphtool.verify import verify

    path = os.path.join(FIXTURES, f"{name}.onnx")
    fused = level2_with_mha(io.load(path))
    counts = ops(fused)
    assert counts["com.microsoft:MultiHeadAttention"] == 2 and "com.microsoft:Attention" not in counts, counts
    assert "Softmax" not in counts
    assert_exporter_outputs(path, fused)
    check = verify(io.load(path), fused)
    assert check.ok, check.summary()


def test_q_and_k_read_one_shared_projection():
    """onnxruntime's bert_model_generator writes all-ones weights, so q and k are one MatMul/Add/
    Reshape once CSE has merged them: one node fills two places of the pattern; the fused op is exact."""
    proto = attention_model()
    for node in proto.graph.node:
        if node.op_type == "Transpose" and node.input[0] == "k4":
            node.input[0] = "q4"  # k's transpose reads q's head split: Wk = Wq, bk = bq
    proto = onnx.shape_inference.infer_shapes(proto)
    original, fused, _ = run(proto, ["dead-code-elimination", "fuse-attention-ort", "dead-code-elimination"])
    counts = ops(fused)
    assert counts["com.microsoft:Attention"] == 1 and not {"Softmax", "MatMul"} & set(counts)
    assert_same_outputs(original, fused, feeds(proto))


def test_static_k_transposition_through_reshapes():
    """BART's sdpa export at fixed shapes (onnxruntime's bart_model_generator): kᵀ as
    Reshape [B·N, S, h] → Transpose(0, 2, 1) → Reshape [B, N, h, S] with literal sizes."""
    proto = attention_model(k_perm=(0, 2, 1, 3), seq=S, mask=False)
    graph = proto.graph
    graph.initializer.extend([numpy_helper.from_array(np.array([B * N, S, HD], np.int64), "flat"),
                              numpy_helper.from_array(np.array([B, N, HD, S], np.int64), "unflat")])
    graph.input[0].type.tensor_type.shape.dim[0].dim_value = B
    at = next(i for i, n in enumerate(graph.node) if n.op_type == "MatMul" and list(n.input) == ["qt", "kt"])
    graph.node[at].input[1] = "kT"
    for j, node in enumerate([helper.make_node("Reshape", ["kt", "flat"], ["k3"]),
                              helper.make_node("Transpose", ["k3"], ["k3t"], perm=[0, 2, 1]),
                              helper.make_node("Reshape", ["k3t", "unflat"], ["kT"])]):
        graph.node.insert(at + j, node)
    original, fused, _ = run(proto, ["fuse-attention-ort", "dead-code-elimination"])
    assert ops(fused)["com.microsoft:Attention"] == 1
    assert_same_outputs(original, fused, feeds(proto))
    # flattened to [B·N, h, S] instead (it runs: the same element count), the chain only reinterprets
    # memory and is not kᵀ: refused
    graph.initializer[-2].CopyFrom(numpy_helper.from_array(np.array([B * N, HD, S], np.int64), "flat"))
    _, kept, _ = run(proto, ["fuse-attention-ort"])
    assert "com.microsoft:Attention" not in ops(kept)


def varied_model(opset: int = 17) -> onnx.ModelProto:
    """onnxruntime's pruned bert attention (bert_model_generator, pruned_qk_hidden_size=24,
    pruned_v_hidden_size=16): q and k 2 heads of 12, v 2 heads of 8, random weights here."""
    rng = np.random.default_rng(3)
    f32 = np.float32
    widths = {"q": 24, "k": 24, "v": 16}
    inits = [numpy_helper.from_array(np.array([0, 0, 2, w // 2], np.int64), f"split_{t}") for t, w in widths.items()]
    inits += [numpy_helper.from_array(np.array([0, 0, 16], np.int64), "merge"),
              numpy_helper.from_array(np.array(np.sqrt(12), f32), "sqrt_d")]
    nodes = []
    for t, w in widths.items():
        inits += [numpy_helper.from_array((rng.standard_normal((H, w)) * 0.3).astype(f32), f"W{t}"),
                  numpy_helper.from_array((rng.standard_normal(w) * 0.1).astype(f32), f"b{t}")]
        nodes += [helper.make_node("MatMul", ["x", f"W{t}"], [f"{t}_mm"]),
                  helper.make_node("Add", [f"{t}_mm", f"b{t}"], [t]),
                  helper.make_node("Reshape", [t, f"split_{t}"], [f"{t}4"]),
                  helper.make_node("Transpose", [f"{t}4"], [f"{t}t"], perm=[0, 2, 3, 1] if t == "k" else [0, 2, 1, 3])]
    nodes += [helper.make_node("MatMul", ["qt", "kt"], ["scores"]), helper.make_node("Div", ["scores", "sqrt_d"], ["sc"]),
              helper.make_node("Softmax", ["sc"], ["p"], axis=-1), helper.make_node("MatMul", ["p", "vt"], ["ctx"]),
              helper.make_node("Transpose", ["ctx"], ["ctx_t"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["ctx_t", "merge"], ["y"])]
    graph = helper.make_graph(nodes, "varied", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", H])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 16])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_v_narrower_than_q_and_k_uses_qkv_hidden_sizes():
    proto = varied_model()
    original, fused, _ = run(proto, ["fuse-attention-ort", "dead-code-elimination"])
    assert ops(fused) == {"com.microsoft:Attention": 1}
    node = fused.graph.nodes("Attention")[0]
    assert list(node.attr("qkv_hidden_sizes")) == [24, 24, 16] and node.attr("num_heads") == 2
    assert node.attr("scale") == pytest.approx(1 / np.sqrt(12))
    assert_same_outputs(original, fused, feeds(proto))
    # ONNX Attention (opset 23) has no such attribute: left alone there
    _, kept, _ = run(varied_model(opset=23), ["fuse-attention"])
    assert "Attention" not in ops(kept)


def test_the_multi_head_attention_form_keeps_a_decoders_cached_attention():
    """On a KV-cache decoder, tune's "attention as MultiHeadAttention" set fuses each cached
    attention as level 2 does (MultiHeadAttention with the cache), not leave it as MatMul/Softmax:
    else the set is "attention off" under another name (the 6-layer Qwen3 of
    bench/decoder_latency.py kept 6 Softmax and measured 8% slower than level 2)."""
    from graphtool.io import load

    path = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "decoder", "llama_kv.onnx")
    model = load(path)
    level2, _, _ = optimize(model, level=2, target="ort")
    mha = level2_with_mha(model)
    assert ops(mha)["com.microsoft:MultiHeadAttention"] == ops(level2)["com.microsoft:MultiHeadAttention"] >= 1
    assert "Softmax" not in ops(mha)
