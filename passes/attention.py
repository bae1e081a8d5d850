"""Scaled dot-product attention → one attention op, as rules (``graphtool.rewrite``).

Exporters write self-attention as some twenty ops; one kernel does it without materializing the
[B, N, S, S] scores twice, and packs the three projections into one GEMM. The pattern, and the
variants today's exporters write (each is data below, not a branch)::

    proj_i = x @ W_i (+ b_i) (* c_i)           separate, or thirds of one Split (GPT-2)
    h_i    = Transpose(Reshape(proj_i, [B, S, N, h]), 0213)
    kᵀ     = Transpose(Reshape(proj_k), 0231)  or  Reshape(Transpose(Reshape(h_k, [-1, S, h]), 021))
    s      = (h_q (* c) @ kᵀ (* c)) (/ c | * c)                    sdpa scales q and kᵀ by √c
    s      = s + mask | Where(tril, s, fill) | both                  (optional)
    p      = Softmax(s, -1) (then Where(IsNaN(p), 0, p): the dynamo sdpa guard)
    y      = Reshape(Transpose(p @ h_v (then a no-op Reshape), 0213), [B, S, N·h])

The checks (``_attention_parts.py``, their dim proofs in ``_attention_dims.py``) prove what a
pattern cannot: the head split and merge targets, the scale, the mask's rank, a causal condition;
the replacements are ``_attention_emit.py``. Emitted: ``com.microsoft.Attention``
(packed QKV) or, for projections that are not constant, ``MultiHeadAttention`` with
``--target ort``; ONNX ``Attention`` (opset >= 23) with ``--target onnx``.

``cached-attention`` (``--target ort``) is attention as decoders write it: q [B, N, S, h] (q's head
split, or anything 4-D: rotary's output) over k, v [B, N, T, h] that anything made — a KV cache's
``Concat(past, new)``, ``repeat_kv``'s Unsqueeze/Expand/Reshape (grouped KV heads), a cache input
(cross-attention over cached encoder states). It becomes MultiHeadAttention in its 4-D key/value
form: the cache Concat and the repeat stay, T may be anything (past + new, the encoder's length).
When k and v are both ``Concat(past, head split of the new projection)`` (no rotary, no repeat:
GPT-2, BART, T5, Whisper) and nothing else reads the Concats, the cache goes into the fused op
itself: past_key/past_value in, present_key/present_value out under the Concats' names.
The check proves, walking the shape plumbing (Concat part by part, Reshape targets and their -1,
Expand, rotary's broadcasting ops, dynamic quantization), that q, k, v share the batch dim, k and v
one length T, and N, h are static on all three; float32 or float16. Refusals: "q, k and v do not
provably share one batch dim", "k and v do not provably have one length", "k is not provably
[B, N, T, h] like the queries" (grouped heads not repeated), the mask and merge refusals above.
Why not GroupQueryAttention: onnxruntime's CPU kernel refuses batch > 1 with a past and more than
one new token ("past 8 / new 4" at batch 2), and reads padding from seqlens_k, not the mask.

``onnx-cached-attention`` (``--target onnx``, opset >= 23) is the same pattern, its keys and values
also through repeat_kv, as ONNX ``Attention`` (checks: ``_attention_onnx.py``): grouped heads as
kv_num_heads (repeat_kv goes), the cache Concats as past/present, q, k, v unsplit (3-D) when all
three are head splits. The mask keeps the graph's values but finfo.min, raised one ulp:
onnxruntime 1.32 zeroes a row whose every score is the float's lowest value (left padding at
prefill), the graph averages it; raised, both average, every other row unchanged. Refusals: those
of ``cached-attention``, "q is float16 and the mask may hold finite values" (no form matches a
fully masked float16 row then: the graph rounds s·scale + min three times, the kernel once; a
mask of only 0 and -inf fuses, and so does one that provably shows every query key 0: a causal
mask without padding), a scale <= 0. ``onnx-projected-attention``:
``projected-attention``'s pattern (cross-attention over projected encoder states) as ONNX
Attention. ``onnx-attention`` and it refuse a causal Where together with a mask (the kernel's
causal mask is the float's lowest value: a row of only padding differs, by 2.4 on GPT-2-style
left padding).

The mask becomes attention_bias expanded to [1, 1, S, T] (S the queries', T the keys' length):
expanding a cross-attention mask to [S, S] wrote models that fail when decoder and encoder
lengths differ (issue 32).

``alibi-attention`` (``--target ort``) and ``onnx-alibi-attention`` (``--target onnx``, opset >= 23) are
BLOOM's attention: q, k, v [B, N, ·, h] folded to [B·N, ·, h], ``baddbmm(alibi, q, kᵀ, alpha)`` —
the ALiBi bias [B·N, 1, T] added to the scaled scores —, unfolded to [B, N, S, T] for the mask and
Softmax, folded again for the product with v, unfolded and merged. MultiHeadAttention (ONNX
Attention) computes it with the alibi as [B, N, 1, T] plus the mask as its attention bias (ONNX: the
mask raised one ulp as above). The check (``_attention_parts.check_alibi``) proves the folds by
element counts: the four folds share one leading element, q/k/v keep h last, the scores unfold to a
provable [B, N, S, T]. Refusals: "the four [B·N, ·, ·] folds do not provably share one leading dim",
"the scores' unfold is not provably [B, N, S, T]", "the bias's first dim is not provably B·N (or 1)",
and those of ``cached-attention``. Not ALiBi-like biases in general: a fused op cannot express Gemma
2's soft-capping (tanh between the product and Softmax), so that stays unfused.

``fuse-attention-mha`` is the same fusion with the projections left as they are (three MatMul
(+ Add), MultiHeadAttention taking q, k, v): which of the two forms onnxruntime runs faster
depends on the CPU, the batch and the threads (BERT-base dynamo export, batch 2, one thread:
the unpacked form measured faster), so no level selects it; ``graphtool tune`` tries it as a
rewrite set of its own, and ``--passes`` names it.

Known limits: a row whose mask hides every key is NaN in the fused op where the sdpa guard makes
it 0 (such a row attends to nothing: padding queries over an all-padding batch entry); an
additive mask with a larger batch than the input's batch of 1 is rejected by onnxruntime.
"""

from __future__ import annotations

from functools import partial

from graphtool.passes import _attention_emit as emit
from graphtool.passes import _attention_onnx as onnx_parts
from graphtool.passes import _attention_parts as parts
from graphtool.passes._ort_common import contrib_allowed

from graphtool.ir.graph import Graph
from graphtool.pass_manager import PassContext, register
from graphtool.rewrite import (
    Const,
    OneOf,
    Rule,
    RulePass,
    Scalar,
    Var,
    either,
    ms,
    op,
    opt,
)

HEADS, K_T = [0, 2, 1, 3], [0, 2, 3, 1]
x = Var("x", rank=3)


def _linear(tag: str, source: Var = x) -> object:
    return opt(op.Add(op.MatMul(source, Const(f"w_{tag}"), _name=f"mm_{tag}"), Const(f"b_{tag}")))


def _qkv_sources(packed: object) -> list[object]:
    """q, k, v projections: three separate ones, or the three outputs of one Split."""
    splits = [op.Split(packed, Const("sizes"), axis=OneOf(2, -1), _name="split"),
              op.Split(packed, axis=OneOf(2, -1), _name="split")]
    return [either(_linear(t), *(s.output(i) for s in splits)) for i, t in enumerate("qkv")]


def _core(q: object, k: object, v: object) -> object:
    """From projected [B, S, H] q, k, v to the merged [B, S, H] output."""
    k_head = op.Transpose(op.Reshape(k, Var("hs_k"), _name="rs_k"), perm=HEADS, _name="k_head")
    k_t = either(op.Transpose(op.Reshape(k, Var("hs_k"), _name="rs_k"), perm=K_T),
                 op.Transpose(k_head, perm=[0, 1, 3, 2]),
                 op.Reshape(op.Transpose(op.Reshape(k_head, Var("kt_flat")), perm=[0, 2, 1]), Var("kt_shape"),
                            _name="kt_unflat"))
    q_head = op.Transpose(op.Reshape(opt(op.Mul(q, Scalar("pre_q"))), Var("hs_q"), _name="rs_q"), perm=HEADS)
    q_side, k_side = opt(op.Mul(q_head, Scalar("s_q"))), opt(op.Mul(k_t, Scalar("s_k")))
    plain = {"transA": OneOf(0, None), "transBatchA": OneOf(0, None), "transBatchB": OneOf(0, None)}
    scores = either(op.MatMul(q_side, k_side),  # FusedMatMul: when matmul-scale fusion ran first
                    ms.FusedMatMul(q_side, k_side, transB=OneOf(0, None), _name="fused_scores", **plain),
                    ms.FusedMatMul(q_side, k_head, transB=1, _name="fused_scores", **plain))
    scaled = either(op.Div(scores, Scalar("s_div")), op.Mul(scores, Scalar("s_mul")), scores)
    causal = op.Where(Var("causal"), scaled, Scalar("fill"))
    masked = either(op.Add(scaled, Var("mask")), op.Add(causal, Var("mask")),
                    op.Where(Var("causal"), op.Add(scaled, Var("mask")), Scalar("fill")), causal, scaled)
    softmax = op.Softmax(masked, axis=OneOf(-1, 3), _name="softmax")
    probs = either(op.Where(op.IsNaN(softmax), Scalar("nan_fill"), softmax), softmax)
    context = op.MatMul(probs, op.Transpose(op.Reshape(v, Var("hs_v"), _name="rs_v"), perm=HEADS))
    context = opt(op.Reshape(context, Var("ctx_shape"), _name="ctx_reshape"))  # TorchScript sdpa: a no-op
    merged = op.Transpose(context, perm=HEADS, _name="merge", _shared=True)  # other Reshapes may read it
    return op.Reshape(merged, Var("out_shape"), _name="out")


def _cache(t: str) -> object:
    """k or v [B, N, T, h]: a KV cache's Concat(past, head split of the new projection), or any 4-D value."""
    new = op.Transpose(op.Reshape(Var(f"{t}3", rank=3), Var(f"hs_{t}"), _name=f"rs_{t}"), perm=HEADS)
    return either(op.Concat(Var(f"past_{t}", rank=4), new, axis=OneOf(2, -2), _name=f"cat_{t}", _shared=True),
                  Var(f"{t}4", rank=4))


def _repeated(t: str) -> object:
    """k or v [B, N, T, h] for ONNX Attention: repeat_kv (Unsqueeze at 2, Expand, Reshape: grouped
    KV heads, which the op takes as kv_num_heads) of a KV cache's Concat(past, new) or of any
    4-D value, or that Concat or value itself."""
    base = either(op.Concat(Var(f"past_{t}", rank=4), Var(f"new_{t}", rank=4), axis=OneOf(2, -2), _name=f"cat_{t}",
                            _shared=True),
                  Var(f"{t}4", rank=4))
    repeat = op.Reshape(op.Expand(op.Unsqueeze(base, Const(f"rep_axes_{t}")), Var(f"rep_shape_{t}")),
                        Var(f"rep_target_{t}"), _name=f"rep_{t}")
    return either(repeat, base)


def _cached_core(kv=_cache) -> object:
    """Attention of [B, N, S, h] queries over [B, N, T, h] keys and values that anything made:
    a KV cache's Concat, repeat_kv's Expand/Reshape (grouped KV heads), rotary, a cache input
    (cross-attention over cached encoder states). Queries are q's head split when it is one.
    ``kv`` writes the keys' and values' pattern (``_cache``, or ``_repeated`` for ONNX Attention)."""
    q4 = either(op.Transpose(op.Reshape(Var("q3", rank=3), Var("hs_q"), _name="rs_q"), perm=HEADS, _name="q_head"),
                Var("q4", rank=4))
    k4, v4 = kv("k"), kv("v")
    k_t = either(op.Transpose(k4, perm=[0, 1, 3, 2]),
                 op.Reshape(op.Transpose(op.Reshape(k4, Var("kt_flat")), perm=[0, 2, 1]), Var("kt_shape"),
                            _name="kt_unflat"))
    number = partial(Var, where=parts.is_scalar)  # a constant, or a scale computed from constants
    q_side, k_side = opt(op.Mul(q4, number("s_q"))), opt(op.Mul(k_t, number("s_k")))
    plain = {"transA": OneOf(0, None), "transBatchA": OneOf(0, None), "transBatchB": OneOf(0, None)}
    scores = either(op.MatMul(q_side, k_side),
                    ms.FusedMatMul(q_side, k_side, transB=OneOf(0, None), _name="fused_scores", **plain),
                    ms.FusedMatMul(q_side, k4, transB=1, _name="fused_scores", **plain))
    scaled = either(op.Div(scores, number("s_div")), op.Mul(scores, number("s_mul")), scores)
    softmax = op.Softmax(either(op.Add(scaled, Var("mask")), scaled), axis=OneOf(-1, 3), _name="softmax")
    probs = either(op.Where(op.IsNaN(softmax), Scalar("nan_fill"), softmax), softmax)
    attended = op.MatMul(probs, v4)
    # transformers 5's sdpa zeroes the rows of queries that see no key: Where(no key [B, 1, S, 1], 0, ·)
    attended = either(op.Where(Var("empty_rows", rank=4), Scalar("empty_fill"), attended, _name="empty_where"),
                      attended)
    context = opt(op.Reshape(attended, Var("ctx_shape"), _name="ctx_reshape"))
    merged = op.Transpose(context, perm=HEADS, _name="merge", _shared=True)
    return op.Reshape(merged, Var("out_shape"), _name="out")


def _alibi_core() -> object:
    """BLOOM: heads folded into the batch ([B·N, ·, h]), scores = alibi + scale·q·kᵀ (baddbmm),
    unfolded to [B, N, S, T] for the mask and Softmax, folded again for the product with v."""
    def fold(src: object, t: str) -> object:
        return op.Reshape(src, Var(f"flat_{t}_shape"), _name=f"flat_{t}")

    number = partial(Var, where=parts.is_scalar)
    q3, k3 = fold(Var("q4", rank=4), "q"), fold(_cache("k"), "k")
    k_t = op.Transpose(k3, perm=[0, 2, 1])
    plain = {"transA": OneOf(0, None), "transBatchA": OneOf(0, None), "transBatchB": OneOf(0, None)}
    scores = either(op.MatMul(q3, k_t),  # FusedMatMul: when matmul-scale fusion ran first
                    ms.FusedMatMul(q3, k_t, transB=OneOf(0, None), _name="fused_scores", **plain),
                    ms.FusedMatMul(q3, k3, transB=1, _name="fused_scores", **plain))
    scaled = either(op.Mul(scores, number("s_mul")), op.Div(scores, number("s_div")), scores)
    unfolded = op.Reshape(op.Add(scaled, Var("alibi", rank=3)), Var("unflat_shape"), _name="unflat")
    softmax = op.Softmax(either(op.Add(unfolded, Var("mask")), unfolded), axis=OneOf(-1, 3), _name="softmax")
    probs = either(op.Where(op.IsNaN(softmax), Scalar("nan_fill"), softmax), softmax)
    attended = op.MatMul(fold(probs, "p"), fold(_cache("v"), "v"))
    context = op.Reshape(attended, Var("ctx_shape"), _name="unflat_ctx")
    merged = op.Transpose(context, perm=HEADS, _name="merge", _shared=True)
    return op.Reshape(merged, Var("out_shape"), _name="out")


_packed = _linear("qkv")
SELF_ATTENTION = Rule("self-attention", _core(*_qkv_sources(_packed)), emit.emit_attention,
                      parts.check_self_attention_ort, emits="Attention")
PROJECTED = Rule("projected-attention", _core(Var("q", rank=3), Var("k", rank=3), Var("v", rank=3)),
                 emit.emit_multi_head, parts.check_projected, emits="MultiHeadAttention")
UNPACKED = Rule("unpacked-attention", PROJECTED.pattern, emit.emit_multi_head, parts.check_projected,
                emits="MultiHeadAttention")
CACHED = Rule("cached-attention", _cached_core(), emit.emit_cached, parts.check_cached, emits="MultiHeadAttention")
ALIBI = Rule("alibi-attention", _alibi_core(), emit.emit_alibi, parts.check_alibi, emits="MultiHeadAttention")
ONNX_ALIBI = Rule("onnx-alibi-attention", ALIBI.pattern, emit.emit_onnx_alibi, onnx_parts.check_onnx_alibi,
                  emits="Attention")
ONNX_ATTENTION = Rule("onnx-attention", SELF_ATTENTION.pattern, emit.emit_onnx_attention,
                      onnx_parts.check_onnx_self_attention, emits="Attention")
ONNX_PROJECTED = Rule("onnx-projected-attention", PROJECTED.pattern, emit.emit_onnx_projected,
                      onnx_parts.check_onnx_projected, emits="Attention")
ONNX_CACHED = Rule("onnx-cached-attention", _cached_core(_repeated), emit.emit_onnx_cached, onnx_parts.check_onnx_cached,
                   emits="Attention")


class _AttentionPass(RulePass):
    def facts(self, graph: Graph, ctx: PassContext) -> parts.Facts:
        return parts.Facts(graph, ctx)


@register(level=2, target="ort", priority=45)
class FuseAttentionOrt(_AttentionPass):
    """Fuse self-attention subgraphs into com.microsoft Attention (packed QKV) for onnxruntime."""

    rules = (SELF_ATTENTION, PROJECTED, CACHED, ALIBI)

    def applies(self, graph: Graph, ctx: PassContext) -> bool:
        return contrib_allowed(graph, ctx, "Attention", "MultiHeadAttention")


# Above every ``--level`` (1-3): a pass only ``--passes`` or a tune rewrite set selects.
OPT_IN_LEVEL = 4


@register(level=OPT_IN_LEVEL, target="ort", priority=44)
class FuseAttentionMha(_AttentionPass):
    """Fuse self-attention into com.microsoft MultiHeadAttention, the q/k/v projections left unpacked
    (opt-in: tune's "attention as MultiHeadAttention" runs it instead of fuse-attention-ort). A
    decoder's cached attention is MultiHeadAttention in both forms, so it is fused here too: without
    it the variant would be "attention off" on a decoder under another name."""

    rules = (UNPACKED, CACHED, ALIBI)

    def applies(self, graph: Graph, ctx: PassContext) -> bool:
        return ctx.target == "ort" and contrib_allowed(graph, ctx, "MultiHeadAttention")


@register(level=2, priority=46)
class FuseAttention(_AttentionPass):
    """Fuse attention into the ONNX Attention op (opset >= 23): encoders' self-attention, a
    decoder's cached self-attention (past/present, grouped KV heads) and cross-attention."""

    rules = (ONNX_ATTENTION, ONNX_PROJECTED, ONNX_CACHED, ONNX_ALIBI)

    def applies(self, graph: Graph, ctx: PassContext) -> bool:
        return ctx.target != "ort" and ctx.opset("") >= 23 and graph is ctx.model.graph
