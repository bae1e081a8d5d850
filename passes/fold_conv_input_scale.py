"""Fold a scalar Mul/Div in front of a Conv into the Conv's weights: ``Conv(x * s, W)`` → ``Conv(x, s·W)``.

A convolution is linear in its input, and zero padding stays zero under scaling, so a constant
scalar factor on the input moves into W; the bias is untouched. PaddleOCR's v6 detectors scale
every block's output by a learned scalar before the next Conv (13 Muls in PP-OCRv6 det); onnxsim
folds them, and so does this pass. (``fuse-conv-mul`` folds the Mul *after* a Conv, per output
channel.)

Refusals (each leaves the graph alone):
1. the factor is not a provably constant scalar (one element), or not floating point;
2. the Mul/Div output has another reader besides the Conv (or is a graph output), or feeds the
   Conv's weight or bias slot rather than its input;
3. the Conv's weights are not a constant float tensor, or are read by another op too (the scaled
   copy would double the weights) — unless the other readers see the same scaled input;
4. the scaled weights are not finite (a zero divisor, overflow).
"""

from __future__ import annotations

import numpy as np

from graphtool.ir.graph import Graph, Node
from graphtool.pass_manager import Pass, PassContext, PassResult, register
from graphtool.passes._fuse_common import is_op


def _scalar_factor(graph: Graph, op: Node) -> tuple[str, float] | None:
    """(the scaled tensor, the factor) of ``x * s``, ``s * x`` or ``x / s`` with a constant scalar s."""
    a, b = op.inputs[0], op.inputs[1]
    pairs = [(a, b), (b, a)] if op.op_type == "Mul" else [(a, b)]
    for x, s in pairs:
        value = graph.const(s)
        if value is not None and value.size == 1 and value.dtype.kind == "f" and graph.const(x) is None:
            factor = float(value.reshape(-1)[0])
            if op.op_type == "Div":
                if factor == 0.0:
                    return None
                factor = 1.0 / factor
            return x, factor
    return None


@register(level=1, priority=53)
class FoldConvInputScale(Pass):
    """Fold a constant scalar Mul/Div on a Conv's input into the Conv's weights."""

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        folded = 0
        for conv in graph.nodes("Conv"):
            if not is_op(conv, "Conv") or len(conv.inputs) < 2 or not graph.has_node(conv):
                continue
            op = graph.producer(conv.inputs[0])
            if not is_op(op, "Mul", "Div") or len(op.inputs) != 2:
                continue
            uses = graph.uses(op.outputs[0])
            if graph.is_output(op.outputs[0]) or uses != [(conv, 0)]:
                continue
            found = _scalar_factor(graph, op)
            weights = graph.const(conv.inputs[1])
            if found is None or weights is None or weights.dtype.kind != "f":
                continue
            if len(graph.consumers(conv.inputs[1])) != 1 or graph.is_output(conv.inputs[1]):
                continue
            x, factor = found
            scaled = (weights.astype(np.float64) * factor).astype(weights.dtype)
            if not np.all(np.isfinite(scaled)):
                continue
            name = graph.add_initializer(scaled, f"{conv.name or 'conv'}_scaled_w")
            inputs = conv.inputs
            absorbed = op.name or op.op_type
            graph.set_inputs(conv, [x, name, *inputs[2:]])
            graph.remove_nodes([op])
            ctx.absorbed(conv, [absorbed])
            folded += 1
        return PassResult(changed=folded > 0, stats={"folded": folded})
