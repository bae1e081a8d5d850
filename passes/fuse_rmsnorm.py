"""Hand-written RMS norm → RMSNormalization (opset >= 23), or ORT's SimplifiedLayerNormalization,
as rules (``graphtool.rewrite``; patterns and checks in ``_norm_parts.py``).

LLaMA/T5-style models normalize by the root mean square only; exporters write it as five or six
elementwise ops::

    ms = ReduceMean(Pow(x, 2) | Mul(x, x), trailing axes, keepdims=1)
    r  = Sqrt(Add(ms, eps))                       (no Add: eps = 0)
    n  = Div(x, r) | Mul(x, Reciprocal(r)) | Mul(x, Div(1, r))
    y  = Mul(n, gamma)                            (optional, either operand order)

* ``fuse-rms-norm`` (standard ops) writes ``RMSNormalization(x, scale, axis=-k, epsilon)`` when the
  opset is >= 23 (where the op exists); below that it leaves the graph alone.
* ``ort-rms-norm`` (``--target ort``) writes onnxruntime's ``SimplifiedLayerNormalization`` (an ORT
  op in the default domain, registered since version 1) below opset 23.

It refuses when an intermediate has another reader (a ``Shape`` too) or is a graph output, when the
reduced axes are not the trailing ones, when eps / the exponent / the 1 of ``1/r`` are not one-element
constants (exponent exactly 2, the 1 exactly 1, eps >= 0), when the dtype is not float32 or float16
(a float16 chain becomes the float16 op, whose kernel computes in float32 and rounds once), or when
gamma is absent and the normalized size is not static (the op needs an explicit scale). A gamma
Mul that does not fit (not x's dtype, varies along other axes, does not broadcast to the normalized
dims) is left after the fused op.
"""

from __future__ import annotations

from graphtool.ir.graph import Graph
from graphtool.pass_manager import PassContext, register
from graphtool.passes import _norm_parts as parts
from graphtool.passes import _rule_common as common
from graphtool.passes._fuse_common import graph_opset
from graphtool.rewrite import Rule, RulePass


def _rules(op_type: str) -> tuple[Rule, Rule]:
    emit = parts.emit_rms(op_type)
    return (Rule("rms-norm-scaled", parts.RMS_SCALED, emit, parts.check_rmsnorm, emits=op_type),
            Rule("rms-norm", parts.RMS_NORM, emit, parts.check_rmsnorm, emits=op_type))


def _main_tree(graph: Graph, ctx: PassContext) -> bool:
    root = graph
    while root.parent is not None:
        root = root.parent
    return root is ctx.model.graph


class _RmsPass(RulePass):
    stat_keys = {"rms-norm-scaled": "fused", "rms-norm": "fused"}

    def facts(self, graph: Graph, ctx: PassContext) -> common.Facts:
        return common.Facts(graph, ctx)


@register(level=2, priority=57)
class FuseRmsNorm(_RmsPass):
    """Fuse a hand-written RMS norm into one RMSNormalization (opset >= 23)."""

    rules = _rules("RMSNormalization")

    def applies(self, graph: Graph, ctx: PassContext) -> bool:
        return graph_opset(graph, ctx) >= 23


@register(level=2, target="ort", priority=57)
class OrtRmsNorm(_RmsPass):
    """Below opset 23: fuse a hand-written RMS norm into ORT's SimplifiedLayerNormalization."""

    rules = _rules("SimplifiedLayerNormalization")

    def applies(self, graph: Graph, ctx: PassContext) -> bool:
        return graph_opset(graph, ctx) < 23 and _main_tree(graph, ctx)
