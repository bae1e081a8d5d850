"""Hand-written layer norm → one LayerNormalization (opset >= 17), as rules (``graphtool.rewrite``).

Exporters turn a layer norm written out in Python (BERT-style ``(x - u) / sqrt(s + eps)``) into
nine ops and three full passes over the activation; ``LayerNormalization`` does it in one kernel.
The pattern (``_norm_parts.py``), every variant as data::

    mean = ReduceMean(x, axes)            d = Sub(x, mean)   (or two identical Subs: older PyTorch)
    var  = ReduceMean(Pow(d, 2) | Mul(d, d), axes)           (axes an attribute, or an input: opset 18)
    std  = Sqrt(Add(var, eps))            (no Add: eps = 0, as the dynamo exporter emits it)
    n    = Div(d, std) | Mul(d, Reciprocal(std)) | Mul(d, Div(1, std))
    y    = Add(Mul(n, gamma), beta)       (gamma and beta optional, either operand order)

The rule with the affine ops runs first; a Mul/Add that does not fit is left after the fused op.
It refuses when:

1. the model's (or function's) opset is below 17 — LayerNormalization does not exist there —
   unless the target is onnxruntime (``--target ort``), which has it from version 1;
2. the two ReduceMeans do not read the same ``x`` with the same axes and keepdims=1, or the axes
   are not the trailing ones (-k..-1, or r-k..r-1 with a known rank r): LayerNormalization only
   normalizes a suffix of the dimensions;
3. any intermediate (mean, d, d², var, var+eps, std, n, n*gamma) has a reader outside the chain
   (a ``Shape`` too) or is a graph output — the unfused value would still be needed;
4. eps / the exponent 2 / the 1 of ``1/std`` are not one-element constants of rank <= k, or the
   exponent is not exactly 2;
5. the dtype is not float or float16 (the kernels computing with float32 stash);
6. gamma / beta are not constants that broadcast onto the normalized dims without touching the
   other axes; and when gamma is missing, ones of the normalized shape are only created if that
   shape is statically known.

LayerNormalization gets ``axis=-k`` and the exporter's epsilon, and writes the chain's final
value under its name.
"""

from __future__ import annotations

from graphtool.ir.graph import Graph
from graphtool.pass_manager import PassContext, register
from graphtool.passes import _norm_parts as parts
from graphtool.passes import _rule_common as common
from graphtool.passes._fuse_common import graph_opset
from graphtool.rewrite import Rule, RulePass

_check = common.all_of(parts.check_ln_opset, parts.check_layernorm)
LAYERNORM_AFFINE = Rule("layernorm-affine", parts.LN_AFFINE, parts.emit_layernorm, _check, emits="LayerNormalization")
LAYERNORM = Rule("layernorm", parts.LN_NORM, parts.emit_layernorm, _check, emits="LayerNormalization")


@register(level=1, priority=57)
class FuseLayerNorm(RulePass):
    """Fuse a hand-written layer norm (ReduceMean/Sub/Pow/.../Div/Mul/Add) into LayerNormalization (opset >= 17)."""

    rules = (LAYERNORM_AFFINE, LAYERNORM)
    stat_keys = {"layernorm-affine": "fused", "layernorm": "fused"}

    def applies(self, graph: Graph, ctx: PassContext) -> bool:  # below 17 only --explain looks (and is told why)
        return graph_opset(graph, ctx) >= 17 or parts.ort_below_17(graph, ctx) or common.explaining(ctx)
