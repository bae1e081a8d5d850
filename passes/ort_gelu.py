"""GELU family → onnxruntime contrib ops (``--target ort``): Gelu, FastGelu, BiasGelu, QuickGelu.

Rules (each anchored locally, intermediates must have no other reader and be no graph output):

* ``ort-gelu`` — below opset 20 there is no standard Gelu, so the erf spelling
  ``x·0.5·(1+Erf(x/√2))`` becomes ``com.microsoft.Gelu(x)`` and the tanh spelling
  ``0.5·x·(1+Tanh(√(2/π)(x+0.044715x³)))`` becomes ``com.microsoft.FastGelu(x)``. The spellings are
  recognised by ``fuse_gelu``'s matchers (the same ones the opset-20 pass uses).
* ``ort-bias-gelu`` — ``Gelu(Add(a, b))`` (standard erf Gelu or contrib Gelu) with ``b`` a constant
  1-D bias whose length provably equals a's last dim → ``BiasGelu(a, b)``; the tanh form (standard
  ``Gelu(approximate="tanh")`` or bias-less ``FastGelu``) → ``FastGelu(a, b)``. A bias that would
  broadcast a's last dim (a's last dim is 1 or unknown) is refused: the kernels add it per row.
* ``ort-quick-gelu`` — ``x · Sigmoid(α·x)`` (α = 1 is SiLU/Swish) → ``QuickGelu(x, alpha=α)``.

All emitted ops are float32-only here (the dtype checked); contrib ops are only placed in the main
graph tree, whose opset imports gain ``com.microsoft``.
"""

from __future__ import annotations

from graphtool.ir.graph import Graph, Node
from graphtool.pass_manager import Pass, PassContext, PassResult, register
from graphtool.passes._fuse_common import (
    Namer,
    drop_dead_constants,
    graph_opset,
    is_op,
    only_feeds,
    other_input,
    sole_user,
)
from graphtool.passes._ort_common import (
    MS_DOMAIN,
    Dims,
    Shapes,
    contrib_allowed,
    float_scalar,
    producer_op,
    record_shape,
    replace_with,
    use_ms_domain,
)
from graphtool.passes.fuse_gelu import match_erf, match_tanh


def _emit(graph: Graph, ctx: PassContext, shapes: Shapes, namer: Namer, chain: list[Node], op_type: str,
          inputs: list[str], out: str, attrs: dict | None = None) -> Node:
    use_ms_domain(ctx)
    name = namer(chain, op_type, fallback=chain[-1].name)
    absorbed = [n.name or n.op_type for n in chain]
    out_shape, out_type = shapes.shape(out), shapes.dtype(out)  # before the edit hides them
    node = replace_with(graph, chain, op_type, inputs, [out], attrs, name=name)
    record_shape(graph, shapes, out, out_shape, out_type)
    ctx.absorbed(node, absorbed)
    return node


@register(level=2, target="ort", priority=59)
class OrtGelu(Pass):
    """Below opset 20: erf GELU → com.microsoft Gelu, tanh GELU → com.microsoft FastGelu."""

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        counts = {"gelu": 0, "fast_gelu": 0}
        if graph_opset(graph, ctx) >= 20 or not contrib_allowed(graph, ctx, "Gelu", "FastGelu"):
            return PassResult(False, counts)
        shapes = Shapes(graph, ctx)
        namer = Namer(graph)
        for op_type, matcher, fused, key in (("Erf", match_erf, "Gelu", "gelu"), ("Tanh", match_tanh, "FastGelu", "fast_gelu")):
            for anchor in graph.nodes(op_type):
                if not graph.has_node(anchor) or not is_op(anchor, op_type):
                    continue
                found = matcher(graph, anchor)
                if found is None:
                    continue
                walk, final = found
                if not shapes.is_float(walk.x):
                    continue
                _emit(graph, ctx, shapes, namer, walk.chain, fused, [walk.x], final)
                drop_dead_constants(graph, walk.consts)
                counts[key] += 1
        return PassResult(sum(counts.values()) > 0, counts)


def _bias_of(graph: Graph, dims: Dims, add: Node) -> tuple[str, str] | None:
    """(a, b) for Add(a, b) with b a constant 1-D bias of exactly a's last-dim length."""
    if not is_op(add, "Add") or len(add.inputs) != 2:
        return None
    for a, b in (add.inputs, add.inputs[::-1]):
        bias = graph.const(b)
        if bias is None or bias.ndim != 1 or graph.const(a) is not None:
            continue
        if dims.static(a, -1) == bias.shape[0] and bias.shape[0] > 1 or dims.static(a, -1) == 1 == bias.shape[0]:
            return a, b
    return None


def _gelu_kind(node: Node) -> str | None:
    """'erf' or 'tanh' for a bias-less GELU op, else None."""
    if is_op(node, "Gelu"):
        approx = node.attr("approximate", "none")
        approx = approx.decode() if isinstance(approx, bytes) else approx
        return {"none": "erf", "tanh": "tanh"}.get(approx)
    if node.domain == MS_DOMAIN and node.op_type == "Gelu" and len(node.inputs) == 1:
        return "erf"
    if node.domain == MS_DOMAIN and node.op_type == "FastGelu" and (len(node.inputs) < 2 or not node.inputs[1]):
        return "tanh"
    return None


@register(level=2, target="ort", priority=60)
class OrtBiasGelu(Pass):
    """Add(bias) + Gelu → com.microsoft BiasGelu (erf) or FastGelu with bias (tanh)."""

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        counts = {"bias_gelu": 0, "fast_gelu": 0}
        if not contrib_allowed(graph, ctx, "BiasGelu", "FastGelu"):
            return PassResult(False, counts)
        shapes = Shapes(graph, ctx)
        dims = Dims(graph, shapes)
        namer = Namer(graph)
        for op_type in ("Gelu", "FastGelu"):
            for gelu in graph.nodes(op_type):
                if not graph.has_node(gelu):
                    continue
                kind = _gelu_kind(gelu)
                add = producer_op(graph, gelu.inputs[0], "Add")
                if kind is None or add is None or not only_feeds(graph, gelu.inputs[0], gelu):
                    continue
                found = _bias_of(graph, dims, add)
                if found is None or not shapes.is_float(found[0]):
                    continue
                fused = "BiasGelu" if kind == "erf" else "FastGelu"
                _emit(graph, ctx, shapes, namer, [add, gelu], fused, list(found), gelu.outputs[0])
                counts["bias_gelu" if kind == "erf" else "fast_gelu"] += 1
        return PassResult(sum(counts.values()) > 0, counts)


@register(level=2, target="ort", priority=60)
class OrtQuickGelu(Pass):
    """x * Sigmoid(alpha * x) → com.microsoft QuickGelu(alpha) (alpha = 1: SiLU)."""

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        fused = 0
        if not contrib_allowed(graph, ctx, "QuickGelu"):
            return PassResult(False, {"fused": 0})
        shapes = Shapes(graph, ctx)
        namer = Namer(graph)
        for sig in graph.nodes("Sigmoid"):
            if not graph.has_node(sig) or not is_op(sig, "Sigmoid"):
                continue
            mul = sole_user(graph, sig.outputs[0])
            if not is_op(mul, "Mul"):
                continue
            x = other_input(mul, sig.outputs[0])
            if x is None:
                continue
            chain = [sig, mul]
            alpha = 1.0
            leftovers: list[str] = []
            if sig.inputs[0] != x:
                scale = producer_op(graph, sig.inputs[0], "Mul")
                if scale is None or not only_feeds(graph, sig.inputs[0], sig):
                    continue
                c = other_input(scale, x)
                alpha = float_scalar(graph, c) if c is not None else None
                if alpha is None or graph.const(c).ndim > 0 and (shapes.rank(x) or 0) < graph.const(c).ndim:
                    continue
                chain.insert(0, scale)
                leftovers.append(c)
            if not shapes.is_float(x):
                continue
            _emit(graph, ctx, shapes, namer, chain, "QuickGelu", [x], mul.outputs[0], {"alpha": alpha})
            drop_dead_constants(graph, leftovers)
            fused += 1
        return PassResult(fused > 0, {"fused": fused})
