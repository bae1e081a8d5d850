"""Residual Add + LayerNormalization → com.microsoft SkipLayerNormalization (``--target ort``),
as rules (``graphtool.rewrite``; pattern and checks in ``_norm_parts.py``).

Every transformer block ends its two sub-layers with ``LayerNorm(x + sublayer(x))``, and the
sub-layer's last op is usually ``MatMul + bias``. SkipLayerNormalization reads the input, the
skip and the bias once and writes the normalized value (and, as output 3, the sum the next
residual needs), instead of three passes over the activation.

Rule, anchored on each LayerNormalization::

    s = Add(a, b)  with  a = Add(m, bias)  (optional, tried first; bias constant 1-D of the hidden size)
    y = LayerNormalization(s, gamma, beta, axis=-1, epsilon)
    ⇒  y, _, _, s = SkipLayerNormalization(m | a, b, gamma, beta, bias?, epsilon)

It refuses unless:

1. LayerNormalization normalizes only the last axis, has one output, and gamma (and beta, when
   given) are 1-D of the hidden size H = the input's static last dim: constants, or values whose
   shape [H] and type the shapes prove (graph inputs: onnxscript's unit tests feed them);
2. the input has rank 2 or 3 (the kernel's limit) and is not a constant, and the two operands' shapes
   are provably the same — or the skip is provably a [1, S, H] / [S, H] broadcast of a rank-3 input
   (the broadcasts the kernel supports; ViT's constant position embedding is such a skip);
3. the bias Add's output has no other reader (the sum s may have: it becomes output 3);
4. the dtype is float32, or float16 with float16 gamma/beta/bias (the kernels' two types).

RMS norms (ORT's SimplifiedLayerNormalization, or RMSNormalization at opset 23) take the same rule
and become ``SkipSimplifiedLayerNormalization`` (no beta).
"""

from __future__ import annotations

from graphtool.ir.graph import Graph
from graphtool.pass_manager import PassContext, PassResult, register
from graphtool.passes import _norm_parts as parts
from graphtool.passes._ort_common import contrib_allowed
from graphtool.rewrite import Rule, RulePass, apply

SKIP = "SkipLayerNormalization"
SKIP_SIMPLIFIED = "SkipSimplifiedLayerNormalization"
SKIP_LAYERNORM = Rule("skip-layernorm", parts.skip_pattern("LayerNormalization"), parts.emit_skip(SKIP),
                      parts.check_skip, emits=SKIP)
SKIP_SIMPLIFIED_LAYERNORM = Rule("skip-simplified-layernorm",
                                 parts.skip_pattern("SimplifiedLayerNormalization", "RMSNormalization"),
                                 parts.emit_skip(SKIP_SIMPLIFIED), parts.check_skip, emits=SKIP_SIMPLIFIED)


@register(level=2, target="ort", priority=62)
class OrtSkipLayerNorm(RulePass):
    """Add (+ bias Add) + LayerNormalization (or RMS norm) → com.microsoft Skip(Simplified)LayerNormalization."""

    rules = (SKIP_LAYERNORM, SKIP_SIMPLIFIED_LAYERNORM)

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        counts = {"fused": 0, "with_bias": 0}
        if not contrib_allowed(graph, ctx, SKIP):
            return PassResult(False, counts)
        rules = [r for r in self.rules if contrib_allowed(graph, ctx, r.emits)]
        facts = parts.SkipFacts(graph, ctx)
        counts["fused"] = sum(apply(graph, ctx, rules, facts, self.name).values())
        counts["with_bias"] = facts.with_bias
        return PassResult(counts["fused"] > 0, counts)
