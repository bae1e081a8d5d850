"""Residual Add + LayerNormalization → com.microsoft SkipLayerNormalization (``--target ort``).

Every transformer block ends its two sub-layers with ``LayerNorm(x + sublayer(x))``, and the
sub-layer's last op is usually ``MatMul + bias``. SkipLayerNormalization reads the input, the
skip and the bias once and writes the normalized value (and, as output 3, the sum the next
residual needs), instead of three passes over the activation.

Rule, anchored on each LayerNormalization::

    s = Add(a, b)  with  a = Add(m, bias)  (optional, bias constant 1-D of the hidden size)
    y = LayerNormalization(s, gamma, beta, axis=-1, epsilon)
    ⇒  y, _, _, s = SkipLayerNormalization(m | a, b, gamma, beta, bias?, epsilon)

It refuses unless:

1. LayerNormalization normalizes only the last axis, has one output, and gamma (and beta, when
   given) are constant 1-D of the hidden size H = the input's static last dim;
2. the input has rank 2 or 3 (the kernel's limit) and is not a constant, and the two operands' shapes
   are provably the same — or the skip is provably a [1, S, H] / [S, H] broadcast of a rank-3 input
   (the broadcasts the kernel supports; ViT's constant position embedding is such a skip);
3. the bias Add's output has no other reader (the sum s may have: it becomes output 3);
4. the dtype is float32.

RMS norms (ORT's SimplifiedLayerNormalization, or RMSNormalization at opset 23) take the same rule
and become ``SkipSimplifiedLayerNormalization`` (no beta).
"""

from __future__ import annotations

from graphtool.ir.graph import Graph, Node
from graphtool.pass_manager import Pass, PassContext, PassResult, register
from graphtool.passes._fuse_common import Namer, is_op, only_feeds
from graphtool.passes._ort_common import (
    Dims,
    Shapes,
    contrib_allowed,
    producer_op,
    record_shape,
    replace_with,
    use_ms_domain,
)


def _same_dims(dims: Dims, a: str, b: str, axes_a: list[int], axes_b: list[int]) -> bool:
    return all(dims.equal((a, i), (b, j)) for i, j in zip(axes_a, axes_b))


def _input_and_skip(dims: Dims, a: str, b: str) -> tuple[str, str] | None:
    """(input, skip): same shape, or skip a kernel-supported broadcast of a rank-3 input."""
    shapes = dims.shapes
    ra, rb = shapes.rank(a), shapes.rank(b)
    if ra is None or rb is None or max(ra, rb) not in (2, 3):
        return None
    if ra == rb and _same_dims(dims, a, b, list(range(ra)), list(range(rb))):
        return a, b
    for x, skip, rx, rs in ((a, b, ra, rb), (b, a, rb, ra)):
        if rx != 3:
            continue
        if rs == 3 and dims.static(skip, 0) == 1 and _same_dims(dims, x, skip, [1, 2], [1, 2]):
            return x, skip
        if rs == 2 and _same_dims(dims, x, skip, [1, 2], [0, 1]):
            return x, skip
    return None


def _bias_split(graph: Graph, dims: Dims, value: str, reader: Node, hidden: int) -> tuple[str, str, Node] | None:
    """value = Add(m, bias) read only by ``reader``, bias constant [hidden] → (m, bias, add)."""
    add = producer_op(graph, value, "Add")
    if add is None or len(add.inputs) != 2 or not only_feeds(graph, value, reader):
        return None
    for m, b in (add.inputs, add.inputs[::-1]):
        bias = graph.const(b)
        if bias is not None and bias.shape == (hidden,) and graph.const(m) is None and dims.static(m, -1) == hidden:
            if dims.shapes.rank(m) == dims.shapes.rank(value):
                return m, b, add
    return None


@register(level=2, target="ort", priority=62)
class OrtSkipLayerNorm(Pass):
    """Add (+ bias Add) + LayerNormalization (or RMS norm) → com.microsoft Skip(Simplified)LayerNormalization."""

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        counts = {"fused": 0, "with_bias": 0}
        if not contrib_allowed(graph, ctx, "SkipLayerNormalization"):
            return PassResult(False, counts)
        shapes = Shapes(graph, ctx)
        dims = Dims(graph, shapes)
        namer = Namer(graph)
        for op_type in ("LayerNormalization", "SimplifiedLayerNormalization", "RMSNormalization"):
            for ln in graph.nodes(op_type):
                if not graph.has_node(ln) or not is_op(ln, op_type) or len([o for o in ln.outputs if o]) != 1:
                    continue
                if self._fuse(graph, ctx, shapes, dims, namer, ln, counts):
                    counts["fused"] += 1
        return PassResult(counts["fused"] > 0, counts)

    @staticmethod
    def _fuse(graph: Graph, ctx: PassContext, shapes: Shapes, dims: Dims, namer: Namer, ln: Node,
              counts: dict[str, int]) -> bool:
        s = ln.inputs[0]
        add = producer_op(graph, s, "Add")
        if add is None or len(add.inputs) != 2 or ln.outputs[0] == "":
            return False
        hidden = dims.static(s, -1)
        rank = shapes.rank(s)
        axis = ln.attr("axis", -1)
        if hidden is None or rank not in (2, 3) or axis not in (-1, rank - 1):
            return False
        simplified = ln.op_type != "LayerNormalization"  # RMS norm: no mean, no beta
        gamma = graph.const(ln.inputs[1])
        beta = graph.const(ln.inputs[2]) if len(ln.inputs) > 2 and ln.inputs[2] and not simplified else None
        if gamma is None or gamma.shape != (hidden,) or (len(ln.inputs) > 2 and ln.inputs[2] and (beta is None or beta.shape != (hidden,))):
            return False
        a, b = add.inputs
        if (graph.const(a) is not None and graph.const(b) is not None) or not shapes.is_float(s):
            return False
        chain = [add, ln]
        bias = ""
        for first, second in ((a, b), (b, a)):
            split = _bias_split(graph, dims, first, add, hidden)
            if split is not None and _input_and_skip(dims, split[0], second) is not None:
                a, b, bias = split[0], second, split[1]
                chain.insert(0, split[2])
                break
        pair = _input_and_skip(dims, a, b)
        if pair is None or graph.const(pair[0]) is not None:
            return False  # a constant may only be the skip (e.g. ViT's [1, S, H] position embedding)
        x, skip = pair
        keep_sum = graph.is_output(s) or any(u != ln for u, _ in graph.uses(s))
        outputs = [ln.outputs[0], "", "", s if keep_sum else ""]
        if simplified:
            fused = "SkipSimplifiedLayerNormalization"
            inputs = [x, skip, ln.inputs[1], bias]
        else:
            fused = "SkipLayerNormalization"
            inputs = [x, skip, ln.inputs[1], ln.inputs[2] if beta is not None else "", bias]
        while inputs and not inputs[-1]:
            inputs.pop()
        if not contrib_allowed(graph, ctx, fused):
            return False
        use_ms_domain(ctx)
        name = namer(chain, fused, fallback=ln.name)
        absorbed = [n.name or n.op_type for n in chain]
        attrs = {"epsilon": float(ln.attr("epsilon", 1e-5))}
        while outputs and not outputs[-1]:
            outputs.pop()
        s_shape = shapes.shape(s)
        node = replace_with(graph, chain, fused, inputs, outputs, attrs, name=name)
        for value in outputs[::3]:  # the normalized value and the kept sum have the input's shape
            if value:
                record_shape(graph, shapes, value, s_shape, 1)
        ctx.absorbed(node, absorbed)
        counts["with_bias"] += bool(bias)
        return True

