"""Dynamically quantized MatMuls → onnxruntime's fused kernels (``--target ort`` level 2).

``onnxruntime.quantization.quantize_dynamic`` writes every MatMul with a constant weight as

    a, a_s, a_z = DynamicQuantizeLinear(x)
    y = Cast(MatMulInteger(a, b, a_z, b_z), to=float) * Mul(a_s, b_s)      [+ bias]

onnxruntime's extended level fuses that in two steps (``matmul_integer_to_float.cc``, then
``dynamic_quantize_matmul_fusion.cc``); this pass does both, with their conditions:

    matmul-integer-to-float   Mul(Cast(MatMulInteger(a, b, a_z?, b_z?)), Mul(a_s, b_s)) [+ Add(c)]
                              → com.microsoft MatMulIntegerToFloat(a, b, a_s, b_s, a_z, b_z, c)
    dynamic-quantize-matmul   a MatMulIntegerToFloat whose a, a_s, a_z are the three outputs of one
                              DynamicQuantizeLinear that nothing else reads, with b, b_s, b_z and c
                              constant → com.microsoft DynamicQuantizeMatMul(x, b, b_s, b_z, c)

Refused, as onnxruntime refuses: the MatMulInteger, the Cast or the scale Mul read by anything
else or a graph output; a Cast to anything but float32; a non-standard op. The bias is taken when
the Mul's only reader is an Add whose other operand is a float constant of shape [1, …, 1, N] with
N > 1 (onnxruntime looks at the Add's second operand only; torch exports put the bias first, and
Add commutes bit for bit, so either is taken here). A DynamicQuantizeLinear read by several
MatMuls (Q, K and V projections share one) keeps its MatMulIntegerToFloats, as in onnxruntime.
The A scale must be one number (the kernels' A is per tensor): the scale Mul's operand that is
not a scalar is B's, whichever side it is on.

The kernels compute the same integer product and scale it once; outputs agree with the unfused
graph to float rounding (onnxruntime's own fusion, the same kernels).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from graphtool.ir.graph import Graph, Node
from graphtool.pass_manager import Pass, PassContext, PassResult, register
from graphtool.passes._ort_common import MS_DOMAIN, Shapes, contrib_allowed, use_ms_domain


def _std(node: Node | None, op_type: str) -> bool:
    return node is not None and node.op_type == op_type and node.domain in ("", "ai.onnx")


def _only_reader(graph: Graph, value: str, reader: Node) -> bool:
    """``value`` is read by ``reader`` alone (once) and is not a graph output."""
    uses = graph.uses(value)
    return not graph.is_output(value) and len(uses) == 1 and uses[0][0].id == reader.id


def _scalar(shapes: Shapes, graph: Graph, value: str) -> bool:
    shape = shapes.shape(value)
    return shape is not None and all(d == 1 for d in shape)


def _bias(graph: Graph, mul: Node, n: int | None) -> tuple[Node, str] | None:
    """(Add, its constant 1-D-able bias) when the Mul's only reader adds a [1, ..., 1, N] constant."""
    uses = graph.uses(mul.outputs[0])
    if graph.is_output(mul.outputs[0]) or len(uses) != 1 or not _std(uses[0][0], "Add"):
        return None
    add = uses[0][0]
    if len(add.inputs) != 2 or add.inputs[0] == add.inputs[1]:
        return None
    other = add.inputs[1 - uses[0][1]]
    c = graph.const(other)
    if c is None or c.dtype != np.float32 or c.ndim < 1 or any(d != 1 for d in c.shape[:-1]) or c.shape[-1] <= 1:
        return None
    if n is not None and c.shape[-1] != n:
        return None  # the bias broadcasts over the product's columns only
    return add, other


def _fuse_integer_to_float(graph: Graph, ctx: PassContext, shapes: Shapes, mul: Node) -> bool:
    if len(mul.inputs) != 2:
        return False
    for cast_side in (0, 1):
        cast, scales = graph.producer(mul.inputs[cast_side]), graph.producer(mul.inputs[1 - cast_side])
        if _std(cast, "Cast") and _std(scales, "Mul"):
            break
    else:
        return False
    mmi = graph.producer(cast.inputs[0])
    if not _std(mmi, "MatMulInteger") or cast.attr("to") != TensorProto.FLOAT or len(scales.inputs) != 2:
        return False
    if not (_only_reader(graph, mmi.outputs[0], cast) and _only_reader(graph, cast.outputs[0], mul)
            and _only_reader(graph, scales.outputs[0], mul)):
        return False
    s0, s1 = scales.inputs
    if not _scalar(shapes, graph, s0):
        s0, s1 = s1, s0  # B's per-column scale came first
        if not _scalar(shapes, graph, s0):
            return False
    a, b = mmi.inputs[0], mmi.inputs[1]
    zeros = list(mmi.inputs[2:4]) + [""] * (4 - len(mmi.inputs))
    b_shape = shapes.shape(b)
    n = b_shape[-1] if b_shape and isinstance(b_shape[-1], int) else None
    found = _bias(graph, mul, n)
    inputs = [a, b, s0, s1, zeros[0], zeros[1]]
    last, absorbed = mul, [mmi, cast, scales, mul]
    if found is not None:
        add, bias = found
        c = graph.const(bias)
        if c.ndim != 1:
            bias = graph.add_initializer(c.reshape(-1), "bias")
        inputs.append(bias)
        last, absorbed = add, absorbed + [add]
    while inputs and not inputs[-1]:
        inputs.pop()
    out, info = last.outputs[0], graph.value_info.get(last.outputs[0])
    use_ms_domain(ctx)
    new = graph.add_node("MatMulIntegerToFloat", inputs, 1, domain=MS_DOMAIN,
                         name=(mmi.name or "matmul") + "_MatMulIntegerToFloat", near=last)
    ctx.absorbed(new, [n.name for n in absorbed])
    graph.remove_nodes(absorbed)
    graph.rename_value(new.outputs[0], out)
    if info is not None:
        graph.set_value_info(out, info)
    return True


def _fuse_dynamic(graph: Graph, ctx: PassContext, node: Node) -> bool:
    inputs = list(node.inputs) + [""] * (7 - len(node.inputs))
    dql = graph.producer(inputs[0])
    if not _std(dql, "DynamicQuantizeLinear") or len(dql.outputs) != 3:
        return False
    if [inputs[0], inputs[2], inputs[4]] != list(dql.outputs):
        return False  # A, its scale and zero point must be that DynamicQuantizeLinear's three outputs
    if not all(_only_reader(graph, v, node) for v in dql.outputs):
        return False
    if any(v and graph.const(v) is None for v in (inputs[1], inputs[3], inputs[5], inputs[6])):
        return False
    fused = [dql.inputs[0], inputs[1], inputs[3], inputs[5], inputs[6]]
    while fused and not fused[-1]:
        fused.pop()
    out, info = node.outputs[0], graph.value_info.get(node.outputs[0])
    new = graph.add_node("DynamicQuantizeMatMul", fused, 1, domain=MS_DOMAIN,
                         name=(node.name or "matmul") + "_DynamicQuantizeMatMul", near=node)
    ctx.absorbed(new, [dql.name, node.name])
    graph.remove_nodes([node, dql])
    graph.rename_value(new.outputs[0], out)
    if info is not None:
        graph.set_value_info(out, info)
    return True


@register(level=2, target="ort", priority=77, name="ort-dynamic-quant-matmul")
class OrtDynamicQuantMatMul(Pass):
    """Cast(MatMulInteger)·scales [+ bias] → MatMulIntegerToFloat; with its own DynamicQuantizeLinear → DynamicQuantizeMatMul."""

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        if not graph.has_op("MatMulInteger") and not graph.has_op("MatMulIntegerToFloat"):
            return PassResult(False, {"integer_to_float": 0, "dynamic": 0})
        if not contrib_allowed(graph, ctx, "MatMulIntegerToFloat", "DynamicQuantizeMatMul"):
            return PassResult(False, {"integer_to_float": 0, "dynamic": 0})
        shapes = Shapes(graph, ctx)
        to_float = sum(_fuse_integer_to_float(graph, ctx, shapes, mul) for mul in list(graph.nodes("Mul"))
                       if graph.has_node(mul) and _std(mul, "Mul"))
        dynamic = sum(_fuse_dynamic(graph, ctx, node) for node in list(graph.nodes("MatMulIntegerToFloat"))
                      if graph.has_node(node) and node.domain == MS_DOMAIN)
        return PassResult(to_float + dynamic > 0, {"integer_to_float": to_float, "dynamic": dynamic})
