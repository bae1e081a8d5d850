"""Gemm(Transpose(A), Transpose(B), C) → Gemm(A, B, C) with transA / transB flipped (level 1).

A Gemm's operands are 2-D, so a Transpose that feeds one (perm [1, 0], or no perm: the reverse)
is exactly what ``transA`` / ``transB`` say; folding it saves a node and the copy the Transpose
makes. onnxruntime's basic level does the same (``GemmTransposeFusion``), so a TF/Keras export
that feeds Dense layers through Transposes gets no fewer nodes from onnxruntime than from graphtool.

As a rule (``graphtool.rewrite``)::

    gemm-transpose   Gemm(Transpose?(A), Transpose?(B), C?)   (at least one Transpose)

Refused: a Transpose another op also reads or that is a graph output (the engine), one whose
perm is not [1, 0], and the Transpose of a constant only it reads — constant folding stores that
one transposed, which costs nothing at run time and keeps the weight in the layout the exporter
chose for it.
"""

from __future__ import annotations

from graphtool.pass_manager import register
from graphtool.passes._fuse_common import attr_protos
from graphtool.rewrite import Match, Rewrite, Rule, RulePass, Var, either, op

a, b, c = Var("a"), Var("b"), Var("c")
_ta = either(op.Transpose(a, _name="ta"), a)
_tb = either(op.Transpose(b, _name="tb"), b)


def check(m: Match) -> str | None:
    moved = [m.node(name) for name in ("ta", "tb") if m.node(name) is not None]
    if not moved:
        return "no Transpose feeds the Gemm"
    for tr in moved:
        perm = tr.attr("perm")
        if perm is not None and list(perm) != [1, 0]:
            return f"the Transpose '{tr.name}' has perm {list(perm)}, not [1, 0]"
        if m.graph.const(tr.inputs[0]) is not None and len(m.graph.uses(tr.inputs[0])) <= 1:
            return f"the Transpose '{tr.name}' is of a constant only it reads (constant folding's job)"
    return None


def emit(m: Match, rw: Rewrite) -> str:
    gemm = m.node("gemm")
    attrs = attr_protos(gemm)
    for key, name in (("transA", "ta"), ("transB", "tb")):
        if m.node(name) is not None:
            attrs[key] = 1 - int(gemm.attr(key, 0))
    inputs = [m["a"], m["b"], *([m["c"]] if m.get("c") else [])]
    return rw.add("Gemm", inputs, attrs=attrs).outputs[0]


GEMM_TRANSPOSE = Rule("gemm-transpose", either(op.Gemm(_ta, _tb, c, _name="gemm"), op.Gemm(_ta, _tb, _name="gemm")),
                      emit, check, emits="Gemm")


@register(level=1, priority=56, name="fold-transpose-gemm")
class FoldTransposeGemm(RulePass):
    """Fold 2-D Transposes feeding a Gemm into its transA / transB."""

    rules = (GEMM_TRANSPOSE,)
    stat_keys = {"gemm-transpose": "folded"}
