"""GELU family → onnxruntime contrib ops (``--target ort``): Gelu, FastGelu, BiasGelu, QuickGelu.

Rules (patterns here and in ``_gelu_parts.py``; intermediates must have no other reader, a
``Shape`` included, and be no graph output):

* ``ort-gelu`` — below opset 20 there is no standard Gelu, so the erf spelling
  ``x·0.5·(1+Erf(x/√2))`` becomes ``com.microsoft.Gelu(x)`` and the tanh spelling
  ``0.5·x·(1+Tanh(√(2/π)(x+0.044715x³)))`` — or its factored form ``Tanh(0.79788·x·(1+0.044715·x·x))``
  (OpenAI/Megatron, HuggingFace's FastGELUActivation) — becomes ``com.microsoft.FastGelu(x)``. The patterns and
  constant checks are ``fuse_gelu``'s (the same ones the opset-20 pass uses).
* ``ort-bias-gelu`` — ``Gelu(Add(a, b))`` (standard erf Gelu or contrib Gelu) with ``b`` a 1-D bias
  (a constant, or a graph input of proven shape) whose length provably equals a's last dim → ``BiasGelu(a, b)``; the tanh form (standard
  ``Gelu(approximate="tanh")`` or bias-less ``FastGelu``) → ``FastGelu(a, b)``. A bias that would
  broadcast a's last dim (a's last dim is 1 or unknown) is refused: the kernels add it per row.
* ``ort-quick-gelu`` — ``x · Sigmoid(α·x)`` (α = 1 is SiLU/Swish) → ``QuickGelu(x, alpha=α)``.

Gelu and FastGelu take float32 or float16 (onnxruntime's CPU kernels have both; a float16 graph's
constants are accepted as the float16 nearest to the exact value), the others float32 only (the
dtype checked); contrib ops are only placed in the main graph tree, whose opset imports gain
``com.microsoft``.
"""

from __future__ import annotations

from graphtool.ir.graph import Graph
from graphtool.pass_manager import PassContext, register
from graphtool.passes import _gelu_parts as parts
from graphtool.passes import _rule_common as common
from graphtool.passes._fuse_common import graph_opset
from graphtool.passes._ort_common import MS_DOMAIN, contrib_allowed
from graphtool.rewrite import OneOf, Rule, RulePass, Scalar, Var, either, ms, op

_gelu = common.all_of(parts.check_opset(False), parts.check_constants, parts.check_float("x", half=True))
ORT_GELU = Rule("ort-gelu-erf", parts.ERF, parts.emit("Gelu", ["x"], MS_DOMAIN), _gelu, emits="Gelu")
ORT_FAST_GELU = Rule("ort-fast-gelu", parts.TANH, parts.emit("FastGelu", ["x"], MS_DOMAIN), _gelu, emits="FastGelu")

_biased = op.Add(Var("a"), Var("bias"))
_bias = common.all_of(parts.check_bias, parts.check_float("a"))
BIAS_GELU = Rule("bias-gelu", either(op.Gelu(_biased, approximate=OneOf("none", b"none", None)), ms.Gelu(_biased)),
                 parts.emit("BiasGelu", ["a", "bias"], MS_DOMAIN), _bias, emits="BiasGelu")
BIAS_FAST_GELU = Rule("bias-fast-gelu",
                      either(op.Gelu(_biased, approximate=OneOf("tanh", b"tanh")), ms.FastGelu(_biased)),
                      parts.emit("FastGelu", ["a", "bias"], MS_DOMAIN), _bias, emits="FastGelu")

x = Var("x")
QUICK_GELU = Rule("quick-gelu", op.Mul(x, op.Sigmoid(either(op.Mul(x, Scalar("alpha")), x))), parts.emit_quick_gelu,
                  common.all_of(parts.check_alpha, parts.check_float("x")), emits="QuickGelu")


class _OrtRulePass(RulePass):
    contrib: tuple[str, ...] = ()

    def applies(self, graph: Graph, ctx: PassContext) -> bool:
        return contrib_allowed(graph, ctx, *self.contrib)

    def facts(self, graph: Graph, ctx: PassContext) -> common.Facts:
        return common.Facts(graph, ctx)


@register(level=2, target="ort", priority=59)
class OrtGelu(_OrtRulePass):
    """Below opset 20: erf GELU → com.microsoft Gelu, tanh GELU → com.microsoft FastGelu."""

    rules = (ORT_GELU, ORT_FAST_GELU)
    stat_keys = {"ort-gelu-erf": "gelu", "ort-fast-gelu": "fast_gelu"}
    contrib = ("Gelu", "FastGelu")

    def applies(self, graph: Graph, ctx: PassContext) -> bool:  # from 20 only --explain looks (and is told why)
        return super().applies(graph, ctx) and (graph_opset(graph, ctx) < 20 or common.explaining(ctx))


@register(level=2, target="ort", priority=60)
class OrtBiasGelu(_OrtRulePass):
    """Add(bias) + Gelu → com.microsoft BiasGelu (erf) or FastGelu with bias (tanh)."""

    rules = (BIAS_GELU, BIAS_FAST_GELU)
    stat_keys = {"bias-gelu": "bias_gelu", "bias-fast-gelu": "fast_gelu"}
    contrib = ("BiasGelu", "FastGelu")


@register(level=2, target="ort", priority=60)
class OrtQuickGelu(_OrtRulePass):
    """x * Sigmoid(alpha * x) → com.microsoft QuickGelu(alpha) (alpha = 1: SiLU)."""

    rules = (QUICK_GELU,)
    stat_keys = {"quick-gelu": "fused"}
    contrib = ("QuickGelu",)
