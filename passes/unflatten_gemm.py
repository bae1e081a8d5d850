"""Reshape(x, [-1, K]) → Gemm → Reshape back to x's leading dims  ⇒  MatMul(x, W) + b.

PyTorch's ``addmm``-based layers (HF GPT-2's Conv1D, and every ``nn.Linear`` the TorchScript
exporter sees on a 3-D input in older versions) flatten the activation to 2-D, run a Gemm, and
restore the leading dims. MatMul broadcasts over leading dims, so the same product needs no
Reshapes: three ops become two (one when there is no bias), and the [B, S, N] MatMul+Add pair is
what the level-2 fusions (BiasGelu, SkipLayerNormalization, Attention) look for.

Anchored on each Gemm; it refuses unless:

1. the Gemm has transA=0, alpha=1 and beta=1 (no rescaling that would change rounding), a constant
   B (transposed here when transB=1) and a constant C of shape [N], [1, N] or none;
2. its A is ``Reshape(x, t1)`` with x of known rank >= 3 and t1 provably [-1, K] (K = x's last dim);
3. its only reader is ``Reshape(·, t2)`` with t2 provably x's leading dims followed by N;
4. the flattened and the Gemm values have no other reader and are no graph output.

The MatMul (or the Add after it) writes t2's Reshape output under its name.
"""

from __future__ import annotations

import numpy as np

from graphtool.ir.graph import Graph, Node
from graphtool.pass_manager import Pass, PassContext, PassResult, register
from graphtool.passes._fuse_common import Namer, drop_dead_constants, is_op, only_feeds, sole_user
from graphtool.passes._ort_common import Dims, Shapes, producer_op, record_shape, shape_pieces


def _match(graph: Graph, dims: Dims, gemm: Node) -> tuple[Node, Node, str, np.ndarray, np.ndarray | None] | None:
    ins = gemm.inputs
    if len(ins) < 2 or gemm.attr("transA", 0) or gemm.attr("alpha", 1.0) != 1.0 or gemm.attr("beta", 1.0) != 1.0:
        return None
    w = graph.const(ins[1])
    c = graph.const(ins[2]) if len(ins) > 2 and ins[2] else None
    if w is None or w.ndim != 2 or (len(ins) > 2 and ins[2] and c is None):
        return None
    if gemm.attr("transB", 0):
        w = w.T
    n = w.shape[1]
    if c is not None:
        if c.ndim > 2 or c.size != n or (c.ndim == 2 and c.shape[0] != 1):
            return None
        c = c.reshape(n)
    flat = producer_op(graph, ins[0], "Reshape")
    if flat is None or not only_feeds(graph, ins[0], gemm):
        return None
    x = flat.inputs[0]
    shape = dims.shapes.shape(x)
    if shape is None or len(shape) < 3 or shape[-1] != w.shape[0]:
        return None
    pieces = shape_pieces(graph, dims.shapes, flat.inputs[1])
    if pieces is None or len(pieces) != 2 or pieces[0] != -1 or not (pieces[1] == w.shape[0] or (
            not isinstance(pieces[1], int) and dims.static(*pieces[1]) == w.shape[0])):
        return None
    back = sole_user(graph, gemm.outputs[0])
    if not is_op(back, "Reshape") or back.inputs[0] != gemm.outputs[0]:
        return None
    rank = len(shape)
    expected = [(x, i) for i in range(rank - 1)] + [n]
    if not dims.target_is(back.inputs[1], back.attr("allowzero", 0), expected, {}):
        return None
    return flat, back, x, w, c


@register(level=2, priority=40)
class UnflattenGemm(Pass):
    """Reshape→Gemm→Reshape around a 3-D+ activation becomes MatMul(+Add) on the activation."""

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        shapes = Shapes(graph, ctx)
        dims = Dims(graph, shapes)
        namer = Namer(graph)
        done = 0
        for gemm in graph.nodes("Gemm"):
            if not graph.has_node(gemm) or not is_op(gemm, "Gemm") or not shapes.is_float(gemm.inputs[0]):
                continue
            found = _match(graph, dims, gemm)
            if found is None:
                continue
            flat, back, x, w, c = found
            chain = [flat, gemm, back]
            out = back.outputs[0]
            leftovers = [v for node in chain for v in node.inputs[1:]]
            name = namer(chain, "MatMul", fallback=gemm.name)
            absorbed = [n.name or n.op_type for n in chain]
            near = graph.producer(x)
            x_shape, x_type = shapes.shape(x), shapes.dtype(x)
            w_name, c_name = gemm.inputs[1], gemm.inputs[2] if len(gemm.inputs) > 2 else ""
            if gemm.attr("transB", 0):
                w_name = graph.add_initializer(np.ascontiguousarray(w), f"{name}_weight")
            if c is not None and graph.const(c_name).shape != c.shape:
                c_name = graph.add_initializer(c, f"{name}_bias")
            graph.remove_nodes(chain)
            if c is None:
                node = graph.add_node("MatMul", [x, w_name], [out], name=name, near=near)
            else:
                node = graph.add_node("MatMul", [x, w_name], 1, name=name, near=near)
                graph.add_node("Add", [node.outputs[0], c_name], [out], name=f"{name}/bias", near=node)
            for value in dict.fromkeys([node.outputs[0], out]):
                record_shape(graph, shapes, value, [*x_shape[:-1], w.shape[1]], x_type)
            ctx.absorbed(node, absorbed)
            drop_dead_constants(graph, leftovers)
            done += 1
        return PassResult(done > 0, {"unflattened": done})
