"""Rotary position embedding (RoPE) → one RotaryEmbedding op, as rules (``graphtool.rewrite``;
patterns, proofs and replacement in ``_rotary_parts.py``).

Every LLaMA-family decoder rotates q and k by the token's position before attention; exporters
write it as seven ops per tensor (plus the shape arithmetic of the halves)::

    rot = Concat(Neg(x[..., h:]), x[..., :h], axis=-1)     halves by two Slices, or one Split
    y   = x * cos + rot * sin                               cos, sin: [1|B, 1, S, D] (or fewer dims)

* ``rotary-embedding``: the whole head dim D rotates (h = D/2);
* ``rotary-embedding-partial``: ``Concat(rope(q[..., :d]), q[..., d:])`` (Phi-2: d < D) — the
  kernel's ``rotary_embedding_dim``/``num_heads``;
* ``rotary-embedding-interleaved``: GPT-J's pairs, ``rot = flatten(stack((-x[..., 1::2], x[..., ::2]), -1))``
  with cos/sin repeated per pair (``interleaved=1``; the proof is then "neighbours equal").

``ort-rotary-embedding`` (``--target ort``) writes com.microsoft ``RotaryEmbedding(x, position_ids,
cos_cache, sin_cache)``; ``fuse-rotary-embedding`` writes ONNX ``RotaryEmbedding`` (opset >= 23).
Both run before ``slices-to-split`` and the attention fusions, which then see one op per rotation.

They refuse when (the first failure is what ``--explain`` prints):

1. x is not of known rank 4 [B, N, S, D], or x/cos/sin are not all float32 (or all float16);
2. the halves are not exactly [0, D/2) and [D/2, D) of the last axis with step 1 (a partial
   rotary's two parts must tile [0, D) and the head count must be static);
3. cos or sin varies along the heads axis, has a last dim other than the rotated size, a batch dim
   neither 1 nor provably x's, or a sequence dim not provably x's;
4. a row of cos or sin does not provably have two equal halves — interleaved: equal neighbours
   (``_rotary_parts.halves_equal``: the kernel reads one angle and applies it to both);
5. the shapes are dynamic below opset 15.

The kernel's caches are the model's own cos/sin rows and its position ids are the row numbers,
so no largest position is assumed (see ``_rotary_parts``).
"""

from __future__ import annotations

from graphtool.ir.graph import Graph
from graphtool.pass_manager import PassContext, register
from graphtool.passes import _rotary_parts as parts
from graphtool.passes import _rule_common as common
from graphtool.passes._fuse_common import graph_opset
from graphtool.passes._ort_common import contrib_allowed
from graphtool.rewrite import Rule, RulePass


def _rules(target: str) -> tuple[Rule, ...]:
    emit = parts.emit(target)
    return (Rule("rotary-embedding-partial", parts.PARTIAL, emit, lambda m: parts.check(m, True),
                 emits="RotaryEmbedding"),
            Rule("rotary-embedding-partial-interleaved", parts.PARTIAL_INTERLEAVED, emit,
                 lambda m: parts.check(m, True, True), emits="RotaryEmbedding"),
            Rule("rotary-embedding", parts.FULL, emit, lambda m: parts.check(m, False), emits="RotaryEmbedding"),
            Rule("rotary-embedding-interleaved", parts.INTERLEAVED, emit, lambda m: parts.check(m, False, True),
                 emits="RotaryEmbedding"))


class _RotaryPass(RulePass):
    stat_keys = {"rotary-embedding-partial": "fused", "rotary-embedding-partial-interleaved": "fused",
                 "rotary-embedding": "fused", "rotary-embedding-interleaved": "fused"}

    def facts(self, graph: Graph, ctx: PassContext) -> common.Facts:
        return common.Facts(graph, ctx)


@register(level=2, target="ort", priority=41)
class OrtRotaryEmbedding(_RotaryPass):
    """x*cos + rotate_half(x)*sin → com.microsoft RotaryEmbedding."""

    rules = _rules("ort")

    def applies(self, graph: Graph, ctx: PassContext) -> bool:
        return contrib_allowed(graph, ctx, "RotaryEmbedding")


@register(level=2, priority=41)
class FuseRotaryEmbedding(_RotaryPass):
    """x*cos + rotate_half(x)*sin → ONNX RotaryEmbedding (opset >= 23)."""

    rules = _rules("onnx")

    def applies(self, graph: Graph, ctx: PassContext) -> bool:
        return graph_opset(graph, ctx) >= 23 and ctx.target != "ort"
