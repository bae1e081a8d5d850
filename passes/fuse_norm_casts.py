"""A float16 norm computed in float32 between two Casts → the norm in float16, as rules (``graphtool.rewrite``).

fp16 exports keep the norm's arithmetic in float32 (autocast, or ``hidden.to(torch.float32)`` in
LLaMA-style RMSNorm): ``Cast(x16 → f32)``, the norm, ``Cast(→ f16)``. Once the norm is one op
(``fuse-layernorm``, ``ort-rms-norm``, ``fuse-rms-norm``), the Casts only move data: the float16
kernels with ``stash_type=1`` (the default) convert to float32 inside, compute, and round once —
what the Casts did around the float32 op. One rule per norm op::

    y16 = Cast(to=f16)(Norm(Cast(to=f32)(x16), gamma32[, beta32]))  ⇒  Norm(x16, gamma16[, beta16])

It refuses when (``--explain layernorm-fp16`` etc. prints which):

1. x is not float16, or the Casts are not exactly float16 → float32 → float16;
2. gamma (or beta) is not a float32 constant whose every value is a float16 number (converting
   it must be exact: an fp16 model's weights cast up are; trained float32 weights are not);
3. the norm has a second output in use (mean / inverse std), or stash_type is not 1.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from graphtool.pass_manager import register
from graphtool.passes import _rule_common as common
from graphtool.passes._ort_common import record_shape
from graphtool.rewrite import Const, Match, Rewrite, Rule, RulePass, Var, op

F16, F32 = TensorProto.FLOAT16, TensorProto.FLOAT


def _pattern(norm_type: str):
    inputs = [op.Cast(Var("x"), _name="up", to=F32), Const("gamma"), Var("beta", const=True, omittable=True)]
    return op.Cast(getattr(op, norm_type)(*inputs, _name="norm"), _name="down", to=F16)


def _check(m: Match) -> str | None:
    if m.facts.shapes.dtype(m["x"]) != F16:
        return "x is not float16"
    norm = m.node("norm")
    if norm.attr("stash_type", 1) != 1:
        return f"the norm's stash_type is {norm.attr('stash_type')}, not 1"
    if any(o and (m.graph.uses(o) or m.graph.is_output(o)) for o in norm.outputs[1:]):
        return "the norm's mean / inverse-std output is read"
    for name in ("gamma", "beta"):
        if m.get(name) is None:
            continue
        array = m.const(name)
        if array.dtype != np.float32:
            return f"{name} is {array.dtype}, not float32"
        if not np.array_equal(array.astype(np.float16).astype(np.float32), array):
            return f"{name} holds values float16 cannot hold exactly"
    return None


def _emit(norm_type: str):
    def replace(m: Match, rw: Rewrite) -> str:
        norm = m.node("norm")
        inputs = [m["x"], rw.initializer(m.const("gamma").astype(np.float16), "scale16")]
        if m.get("beta") is not None:
            inputs.append(rw.initializer(m.const("beta").astype(np.float16), "bias16"))
        attrs = {k: v for k, v in norm.attrs.items()}
        out = rw.add(norm_type, inputs, attrs=attrs, domain=norm.domain).outputs[0]
        record_shape(m.graph, m.facts.shapes, out, m.facts.shapes.shape(m.root.outputs[0]), F16)
        return out

    return replace


def _rules():
    return tuple(Rule(f"{tag}-fp16", _pattern(norm_type), _emit(norm_type), _check, emits=norm_type)
                 for norm_type, tag in (("LayerNormalization", "layernorm"),
                                        ("SimplifiedLayerNormalization", "simplified-layernorm"),
                                        ("RMSNormalization", "rms-normalization")))


@register(level=1, priority=58)
class FuseNormCasts(RulePass):
    """Cast(f16)(Norm(Cast(f32)(x16), ...)) → the norm in float16 (its kernel stashes in float32)."""

    rules = _rules()

    def facts(self, graph, ctx) -> common.Facts:
        return common.Facts(graph, ctx)
