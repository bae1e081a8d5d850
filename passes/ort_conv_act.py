"""Conv (+ residual Add) (+ activation) → com.microsoft FusedConv (``--target ort``).

onnxruntime's CPU FusedConv applies the activation — and adds an optional same-shaped ``Z`` — while
the convolution's output is still in cache, instead of re-reading it for every following op.
ORT's own extended level fuses Conv+activation only; residual blocks (Conv → Add → Relu, the whole
of ResNet) keep two extra ops per block there. This pass takes both.

Rule, anchored on each Conv::

    c = Conv(x, W, B?, attrs)
    s = Add(c, z) | Sum(c, z)          (optional; z provably has c's exact shape)
    y = act(s | c)                     (optional; one of the kernel's activations)
    ⇒  y = FusedConv(x, W, B?, z?, attrs, activation=act, activation_params=[...])

Activations (what the CPU kernel implements, checked against ORT 1.32): Relu, Sigmoid, Tanh,
LeakyRelu(alpha), HardSigmoid(alpha, beta), HardSwish, Clip(min, max) with constant bounds.
It refuses when an intermediate value has another reader or is a graph output, when z could
broadcast (its shape is not provably c's), when the dtype is not float32, or when there is
nothing to fuse (a Conv alone stays a Conv).
"""

from __future__ import annotations

import numpy as np

from graphtool.ir.graph import Graph, Node
from graphtool.pass_manager import Pass, PassContext, PassResult, register
from graphtool.passes._fuse_common import Namer, attr_protos, drop_dead_constants, graph_opset, is_op, other_input, sole_user
from graphtool.passes._ort_common import Dims, Shapes, contrib_allowed, record_shape, replace_with, use_ms_domain

FLOAT_MAX = float(np.finfo(np.float32).max)


def activation_params(graph: Graph, node: Node, opset: int) -> tuple[str, list[float]] | None:
    """(activation name, params) for an activation FusedConv can apply, else None."""
    op = node.op_type
    if op in ("Relu", "Sigmoid", "Tanh", "HardSwish"):
        return op, []
    if op == "LeakyRelu":
        return op, [float(node.attr("alpha", 0.01))]
    if op == "HardSigmoid":
        return op, [float(node.attr("alpha", 0.2)), float(node.attr("beta", 0.5))]
    if op == "Clip":
        if opset < 11:
            return op, [float(node.attr("min", -FLOAT_MAX)), float(node.attr("max", FLOAT_MAX))]
        bounds = []
        for slot, default in ((1, -FLOAT_MAX), (2, FLOAT_MAX)):
            value = node.inputs[slot] if len(node.inputs) > slot else ""
            if not value:
                bounds.append(default)
                continue
            array = graph.const(value)
            if array is None or array.size != 1 or array.dtype != np.float32:
                return None
            bounds.append(float(array.reshape(-1)[0]))
        return op, bounds
    return None


def same_shape(dims: Dims, a: str, b: str) -> bool:
    ra, rb = dims.shapes.rank(a), dims.shapes.rank(b)
    return ra is not None and ra == rb and all(dims.equal((a, i), (b, i)) for i in range(ra))


@register(level=2, target="ort", priority=75)
class OrtFusedConv(Pass):
    """Conv + optional same-shaped Add + activation → com.microsoft FusedConv."""

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        counts = {"fused": 0, "with_sum": 0}
        if not contrib_allowed(graph, ctx, "FusedConv"):
            return PassResult(False, counts)
        opset = graph_opset(graph, ctx)
        shapes = Shapes(graph, ctx)
        dims = Dims(graph, shapes)
        namer = Namer(graph)
        for conv in graph.nodes("Conv"):
            if not graph.has_node(conv) or not is_op(conv, "Conv") or len(conv.outputs) != 1:
                continue
            out = conv.outputs[0]
            chain, z, act = [conv], "", None
            user = sole_user(graph, out)
            if is_op(user, "Add", "Sum") and len(user.inputs) == 2:
                other = other_input(user, out)
                if other is not None and graph.const(other) is None and same_shape(dims, out, other):
                    z = other
                    chain.append(user)
                    user = sole_user(graph, user.outputs[0])
            if is_op(user, "Relu", "Sigmoid", "Tanh", "HardSwish", "LeakyRelu", "HardSigmoid", "Clip"):
                act = activation_params(graph, user, opset)
                if act is not None:
                    chain.append(user)
            if len(chain) == 1 or not shapes.is_float(conv.inputs[0]):
                continue
            final = chain[-1].outputs[0]
            final_shape = shapes.shape(out)
            inputs = list(conv.inputs)
            if z:  # X, W, B ('' when the Conv has none), Z
                inputs = (inputs + ["", ""])[:3] + [z]
            attrs = attr_protos(conv)
            if act is not None:
                attrs["activation"] = act[0]
                if act[1]:
                    attrs["activation_params"] = act[1]
            leftovers = chain[-1].inputs[1:] if act and act[0] == "Clip" else []
            use_ms_domain(ctx)
            name = namer(chain, "FusedConv", fallback=conv.name)
            absorbed = [n.name or n.op_type for n in chain]
            node = replace_with(graph, chain, "FusedConv", inputs, [final], attrs, name=name)
            record_shape(graph, shapes, final, final_shape, 1)
            ctx.absorbed(node, absorbed)
            drop_dead_constants(graph, leftovers)
            counts["fused"] += 1
            counts["with_sum"] += bool(z)
        return PassResult(counts["fused"] > 0, counts)
