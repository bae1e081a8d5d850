"""Gemm + activation → FusedGemm; MatMul with transposed inputs / a scale → FusedMatMul (``--target ort``).

Two onnxruntime contrib ops that absorb the cheap op next to a matrix product:

* ``ort-fused-gemm`` — ``act(Gemm(A, B, C))`` → ``FusedGemm(A, B, C, activation=act, activation_*)``.
  Activations the CPU kernel implements (checked against ORT 1.32): Relu, Sigmoid, Tanh,
  LeakyRelu(alpha), HardSigmoid(alpha, beta), Elu(alpha), Selu(alpha, gamma), Softplus, Softsign,
  ThresholdedRelu(alpha).
* ``ort-fused-matmul`` — ``MatMul(Transpose(A), Transpose(B))`` where a Transpose swaps only the last
  two axes → ``transA`` / ``transB``; ``MatMul(·) * c``, ``MatMul(·) / c`` or ``MatMul(A * c, B)``
  with a scalar constant c → ``alpha``. The Transpose of a constant is left to constant folding
  (a folded weight costs nothing at run time).

Both refuse when an absorbed value has another reader or is a graph output, or when the dtype is
not float32; a scale constant must be a one-element tensor of rank <= the product's rank (so it
cannot broadcast the result to a bigger shape).
"""

from __future__ import annotations

from graphtool.ir.graph import Graph, Node
from graphtool.pass_manager import Pass, PassContext, PassResult, register
from graphtool.passes._fuse_common import Namer, attr_protos, drop_dead_constants, is_op, only_feeds, other_input, scalar_const, sole_user
from graphtool.passes._ort_common import Shapes, contrib_allowed, producer_op, record_shape, replace_with, use_ms_domain

GEMM_ACTIVATIONS = {
    "Relu": (), "Sigmoid": (), "Tanh": (), "Softplus": (), "Softsign": (),
    "LeakyRelu": (("alpha", 0.01),), "HardSigmoid": (("alpha", 0.2), ("beta", 0.5)), "Elu": (("alpha", 1.0),),
    "Selu": (("alpha", 1.67326319217681884765625), ("gamma", 1.05070102214813232421875)),
    "ThresholdedRelu": (("alpha", 1.0),),
}


@register(level=2, target="ort", priority=75)
class OrtFusedGemm(Pass):
    """Gemm followed by an activation → com.microsoft FusedGemm."""

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        fused = 0
        if not contrib_allowed(graph, ctx, "FusedGemm"):
            return PassResult(False, {"fused": 0})
        shapes = Shapes(graph, ctx)
        namer = Namer(graph)
        for gemm in graph.nodes("Gemm"):
            if not graph.has_node(gemm) or not is_op(gemm, "Gemm"):
                continue
            act = sole_user(graph, gemm.outputs[0])
            if not is_op(act, *GEMM_ACTIVATIONS) or not shapes.is_float(gemm.inputs[0]):
                continue
            attrs = attr_protos(gemm)
            attrs["activation"] = act.op_type
            for key, default in GEMM_ACTIVATIONS[act.op_type]:
                attrs[f"activation_{key}"] = float(act.attr(key, default))
            out = act.outputs[0]
            out_shape = shapes.shape(gemm.outputs[0])
            use_ms_domain(ctx)
            name = namer([gemm, act], "FusedGemm", fallback=gemm.name)
            absorbed = [gemm.name or "Gemm", act.name or act.op_type]
            node = replace_with(graph, [gemm, act], "FusedGemm", list(gemm.inputs), [out], attrs, name=name)
            record_shape(graph, shapes, out, out_shape, 1)
            ctx.absorbed(node, absorbed)
            fused += 1
        return PassResult(fused > 0, {"fused": fused})


def _swapped_input(graph: Graph, shapes: Shapes, value: str, matmul: Node) -> str | None:
    """x when ``value`` = Transpose(x) swapping only the last two axes, read only by ``matmul``."""
    tr = producer_op(graph, value, "Transpose")
    if tr is None or not only_feeds(graph, value, matmul) or graph.const(tr.inputs[0]) is not None:
        return None
    perm = tr.attr("perm")
    rank = shapes.rank(tr.inputs[0])
    if perm is None:
        perm = list(range(rank - 1, -1, -1)) if rank is not None else None
    if perm is None or len(perm) < 2 or (rank is not None and rank != len(perm)):
        return None
    n = len(perm)
    return tr.inputs[0] if list(perm) == [*range(n - 2), n - 1, n - 2] else None


@register(level=2, target="ort", priority=76, name="ort-fused-matmul")
class OrtFusedMatMul(Pass):
    """MatMul with last-two-axes Transposes and/or a scalar scale → com.microsoft FusedMatMul."""

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        counts = {"fused": 0, "transposes": 0, "scales": 0}
        if not contrib_allowed(graph, ctx, "FusedMatMul"):
            return PassResult(False, counts)
        shapes = Shapes(graph, ctx)
        namer = Namer(graph)
        for mm in graph.nodes("MatMul"):
            if not graph.has_node(mm) or not is_op(mm, "MatMul"):
                continue
            a, b = mm.inputs
            if not (shapes.is_float(a) or shapes.is_float(mm.outputs[0])):
                continue
            if (shapes.rank(a) or 0) < 2 or (shapes.rank(b) or 0) < 2:
                continue  # 1-D operands (or unknown ranks): MatMul's vector rules, not worth the risk
            a_reader = mm
            chain: list[Node] = [mm]
            attrs: dict = {}
            alpha = 1.0
            leftovers: list[str] = []
            out_rank = shapes.rank(mm.outputs[0])
            max_rank = out_rank if out_rank is not None else 0
            # inputs: Transposes and a scaled A
            for slot, key in ((0, "transA"), (1, "transB")):
                value = mm.inputs[slot]
                x = _swapped_input(graph, shapes, value, mm)
                if x is not None:
                    chain.append(graph.producer(value))
                    attrs[key] = 1
                    if slot == 0:
                        a, a_reader = x, chain[-1]
                    else:
                        b = x
                    counts["transposes"] += 1
            scaled = producer_op(graph, a, "Mul")
            a_rank = shapes.rank(a)
            if scaled is not None and a_rank is not None and only_feeds(graph, a, a_reader):
                for x, c in (scaled.inputs, scaled.inputs[::-1]):
                    factor = scalar_const(graph, c, a_rank)
                    if factor is not None and graph.const(x) is None:
                        alpha *= factor
                        a = x
                        chain.append(scaled)
                        leftovers.append(c)
                        break
            # output: one Mul or Div by a scalar
            out = mm.outputs[0]
            user = sole_user(graph, out)
            if is_op(user, "Mul", "Div") and len(user.inputs) == 2:
                c = other_input(user, out)
                factor = scalar_const(graph, c, max_rank) if c is not None else None
                if factor is not None and (user.op_type == "Mul" or (user.inputs[1] == c and factor != 0.0)):
                    alpha *= factor if user.op_type == "Mul" else 1.0 / factor
                    chain.append(user)
                    leftovers.append(c)
                    out = user.outputs[0]
            if len(chain) == 1:
                continue
            counts["scales"] += alpha != 1.0
            attrs["alpha"] = float(alpha)
            out_shape = shapes.shape(out)
            use_ms_domain(ctx)
            name = namer(chain, "FusedMatMul", fallback=mm.name)
            absorbed = [n.name or n.op_type for n in chain]
            node = replace_with(graph, chain, "FusedMatMul", [a, b], [out], attrs, name=name)
            record_shape(graph, shapes, out, out_shape, 1)
            ctx.absorbed(node, absorbed)
            drop_dead_constants(graph, leftovers)
            counts["fused"] += 1
        return PassResult(counts["fused"] > 0, counts)
