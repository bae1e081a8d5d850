"""Gemm + activation → FusedGemm; MatMul with transposed inputs / a scale → FusedMatMul (``--target ort``).

Two onnxruntime contrib ops that absorb the cheap op next to a matrix product:

* ``ort-fused-gemm`` — ``act(Gemm(A, B, C))`` → ``FusedGemm(A, B, C, activation=act, activation_*)``.
  Activations the CPU kernel implements (checked against ORT 1.32): Relu, Sigmoid, Tanh,
  LeakyRelu(alpha), HardSigmoid(alpha, beta), Elu(alpha), Selu(alpha, gamma), Softplus, Softsign,
  ThresholdedRelu(alpha).
* ``ort-fused-matmul`` — ``MatMul(Transpose(A), Transpose(B))`` where a Transpose swaps only the last
  two axes → ``transA`` / ``transB``; ``MatMul(·) * c``, ``MatMul(·) / c`` or ``MatMul(A * c, B)``
  with a scalar constant c → ``alpha``. The Transpose of a constant that only it reads is left to constant folding
  (a folded weight costs nothing at run time).

As rules (``graphtool.rewrite``)::

    gemm-activation     act(Gemm(A, B, C?))
    scaled-matmul       MatMul(T?(A (* c)?), T?(B)) * c  |  ... / c
    transposed-matmul   MatMul(T?(A (* c)?), T?(B))       (something besides the MatMul to absorb)

Both refuse when an absorbed value has another reader (a Shape too) or is a graph output, or when
the dtype is not float32; a scale constant must be a one-element tensor of rank <= the rank of
what it scales (A's, or the product's), so it cannot broadcast the result to a bigger shape.
"""

from __future__ import annotations

from graphtool.ir.graph import Graph, Node
from graphtool.pass_manager import PassContext, register
from graphtool.passes import _activation_parts as acts
from graphtool.passes._fuse_common import attr_protos, scalar_const
from graphtool.passes._ort_common import MS_DOMAIN, contrib_allowed, record_shape, use_ms_domain
from graphtool.rewrite import Match, Rewrite, Rule, RulePass, Scalar, Var, either, op

a, b, c = Var("a"), Var("b"), Var("c")
gemm = either(op.Gemm(a, b, c, _name="gemm"), op.Gemm(a, b, _name="gemm"))


def check_gemm(m: Match) -> str | None:
    if not m.facts.shapes.is_float(m["a"]):
        return "A is not float32 (FusedGemm's type)"
    return None


def emit_gemm(m: Match, rw: Rewrite) -> str:
    gemm_node, act = m.node("gemm"), m.root
    attrs = attr_protos(gemm_node)
    attrs["activation"] = act.op_type
    attrs.update((f"activation_{key}", value) for key, value in acts.params(act))
    use_ms_domain(m.ctx)
    out = rw.add("FusedGemm", list(gemm_node.inputs), attrs=attrs, domain=MS_DOMAIN).outputs[0]
    record_shape(m.graph, m.facts.shapes, out, m.facts.shapes.shape(gemm_node.outputs[0]), 1)
    return out


GEMM_ACTIVATION = Rule("gemm-activation", op.Relu(gemm, _types=acts.GEMM_ACTIVATIONS), emit_gemm, check_gemm,
                       emits="FusedGemm")


@register(level=2, target="ort", priority=75)
class OrtFusedGemm(RulePass):
    """Gemm followed by an activation → com.microsoft FusedGemm."""

    rules = (GEMM_ACTIVATION,)

    def applies(self, graph: Graph, ctx: PassContext) -> bool:
        return contrib_allowed(graph, ctx, "FusedGemm")

    def facts(self, graph: Graph, ctx: PassContext) -> acts.Facts:
        return acts.Facts(graph, ctx)


def _swaps_last_two(m: Match, tr: Node) -> str | None:
    """None when the Transpose swaps only the last two axes of a value that is not a constant
    read only by it (folding stores that one transposed; a constant other ops read too stays, and
    folding will not store it twice: tied embeddings' ``MatMul(h, Transpose(W))``)."""
    if m.graph.const(tr.inputs[0]) is not None and len(m.graph.uses(tr.inputs[0])) <= 1:
        return f"the Transpose '{tr.name}' is of a constant only it reads (constant folding's job)"
    perm, rank = tr.attr("perm"), m.facts.shapes.rank(tr.inputs[0])
    if perm is None:
        perm = list(range(rank - 1, -1, -1)) if rank is not None else None
    n = len(perm) if perm is not None else 0
    if n < 2 or (rank is not None and rank != n) or list(perm) != [*range(n - 2), n - 1, n - 2]:
        return f"the Transpose '{tr.name}' (perm {perm}) does not swap only the last two axes"
    return None


def check_matmul(m: Match) -> str | None:
    shapes, mm = m.facts.shapes, m.node("mm")
    if not (shapes.is_float(mm.inputs[0]) or shapes.is_float(mm.outputs[0])):
        return "the MatMul is not float32 (FusedMatMul's type)"
    if (shapes.rank(mm.inputs[0]) or 0) < 2 or (shapes.rank(mm.inputs[1]) or 0) < 2:
        return "an operand is 1-D or of unknown rank (MatMul's vector rules)"
    if len(m.nodes) == 1:
        return "nothing to fuse: a MatMul alone stays a MatMul"
    alpha = 1.0
    for tr in (m.node("ta"), m.node("tb")):
        why = _swaps_last_two(m, tr) if tr is not None else None
        if why:
            return why
    if m.get("sa"):
        a_rank = shapes.rank(m["a"])  # the scale's rank must not grow A's
        factor = scalar_const(m.graph, m["sa"], a_rank) if a_rank is not None else None
        if factor is None or m.graph.const(m["a"]) is not None:
            return "the scale of A is not a finite scalar of a rank <= A's, or A is a constant"
        alpha *= factor
    out = m.node("out_scale")
    if out is not None:
        factor = scalar_const(m.graph, m["so"], shapes.rank(mm.outputs[0]) or 0)
        if factor is None or (out.op_type == "Div" and factor == 0.0):
            return "the output scale is not a finite (non-zero, for Div) scalar of a rank <= the product's"
        alpha *= factor if out.op_type == "Mul" else 1.0 / factor
    m.extra["alpha"] = alpha
    return None


def emit_matmul(m: Match, rw: Rewrite) -> str:
    attrs = {"alpha": float(m.extra["alpha"])}
    attrs.update((key, 1) for key, name in (("transA", "ta"), ("transB", "tb")) if m.node(name) is not None)
    use_ms_domain(m.ctx)
    out = rw.add("FusedMatMul", [m["a"], m["b"]], attrs=attrs, domain=MS_DOMAIN).outputs[0]
    record_shape(m.graph, m.facts.shapes, out, m.facts.shapes.shape(m.root.outputs[0]), 1)
    return out


_a = either(op.Mul(a, Scalar("sa"), _name="a_scale"), a)
_mm = op.MatMul(either(op.Transpose(_a, _name="ta"), _a), either(op.Transpose(b, _name="tb"), b), _name="mm")
SCALED_MATMUL = Rule("scaled-matmul", either(op.Mul(_mm, Scalar("so"), _name="out_scale"),
                                             op.Div(_mm, Scalar("so"), _name="out_scale")),
                     emit_matmul, check_matmul, emits="FusedMatMul")
TRANSPOSED_MATMUL = Rule("transposed-matmul", _mm, emit_matmul, check_matmul, emits="FusedMatMul")


@register(level=2, target="ort", priority=76, name="ort-fused-matmul")
class OrtFusedMatMul(RulePass):
    """MatMul with last-two-axes Transposes and/or a scalar scale → com.microsoft FusedMatMul."""

    rules = (SCALED_MATMUL, TRANSPOSED_MATMUL)  # a MatMul the output scale did not take: its inputs

    def applies(self, graph: Graph, ctx: PassContext) -> bool:
        return contrib_allowed(graph, ctx, "FusedMatMul")

    def facts(self, graph: Graph, ctx: PassContext) -> acts.Facts:
        return acts.Facts(graph, ctx)
