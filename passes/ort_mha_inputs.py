"""What a com.microsoft MultiHeadAttention's inputs still compute outside it → into the op (``--target ort``).

An attention fused earlier (by graphtool, by another tool, or written by an exporter) may leave the
projections' bias Adds and a query scaling Mul in front of it. The kernel does both itself.

Rules, anchored on each MultiHeadAttention (``com.microsoft``) with 3-D query, key and value
[B, S, D] (not packed, no past/present, no bias input yet):

* ``mha-bias`` — ``query = Add(q, bq)``, ``key = Add(k, bk)``, ``value = Add(v, bv)`` (any subset,
  either operand order) with each bias 1-D of its projection's static last dim ``D`` (a constant, or a
  value the shapes prove [D] of the same type) ⇒ ``MHA(q, k, v, bias=[bq | bk | bv])`` with zeros for a
  missing bias. The kernel adds the bias to the three projections before anything else, so the
  result is the same sum.
* ``mha-scale`` — ``query = Mul(q, c)`` with ``c`` a constant finite non-zero number (one element)
  ⇒ ``MHA(q, k, v, scale=c · s)`` where ``s`` is the op's scale (default ``1/√(D/num_heads)``): the
  kernel multiplies q·kᵀ by its scale, and (c·q)·kᵀ·s = q·kᵀ·(c·s). Refused when the op has a bias
  input (it is added to the already-scaled query) or the query's last dim is not static.

Either refuses when the Add/Mul's output is read by anything else or is a graph output.
"""

from __future__ import annotations

import math

import numpy as np
from graphtool.passes._fuse_common import is_op, only_feeds
from graphtool.passes._ort_common import (
    MS_DOMAIN,
    Dims,
    Shapes,
    contrib_allowed,
    float_scalar,
)

from graphtool.ir.graph import Graph, Node
from graphtool.pass_manager import Pass, PassContext, PassResult, register


def _plain(mha: Node) -> bool:
    """Query, key and value given, nothing past them (no bias, masks, past or present)."""
    ins = list(mha.inputs)
    return len(ins) >= 3 and all(ins[:3]) and not any(ins[3:]) and not any(mha.outputs[1:])


def _bias_of(graph: Graph, shapes: Shapes, dims: Dims, value: str, mha: Node) -> tuple[str, str] | None:
    """(projection, bias) when ``value`` = Add(projection, bias [D]) read only by ``mha``."""
    add = graph.producer(value)
    if not is_op(add, "Add") or len(add.inputs) != 2 or graph.is_output(value) or not only_feeds(graph, value, mha):
        return None
    hidden, dtype = dims.static(value, -1), shapes.dtype(value)
    for x, b in (add.inputs, add.inputs[::-1]):
        if shapes.rank(x) != 3 or dims.static(x, -1) != hidden or graph.const(x) is not None:
            continue
        const = graph.const(b)
        if const is not None and const.shape == (hidden,) and const.dtype == np.float32:
            return x, b
        if const is None and shapes.rank(b) == 1 and dims.static(b, 0) == hidden and shapes.dtype(b) == dtype:
            return x, b
    return None


@register(level=2, target="ort", priority=47)
class OrtMhaInputs(Pass):
    """Bias Adds and a query scaling Mul in front of a MultiHeadAttention → its bias input and scale."""

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        stats = {"bias": 0, "scale": 0}
        if not contrib_allowed(graph, ctx, "MultiHeadAttention"):
            return PassResult(False, stats)
        shapes: Shapes | None = None
        for mha in graph.nodes("MultiHeadAttention"):
            if mha.domain != MS_DOMAIN or not graph.has_node(mha) or not _plain(mha):
                continue
            shapes = shapes or Shapes(graph, ctx)
            dims = Dims(graph, shapes)
            if any(shapes.rank(v) != 3 or shapes.dtype(v) != 1 for v in mha.inputs[:3]):
                continue  # float32 [B, S, D] each
            if self._scale(graph, ctx, dims, mha):
                stats["scale"] += 1
            if self._bias(graph, ctx, shapes, dims, mha):
                stats["bias"] += 1
        return PassResult(sum(stats.values()) > 0, stats)

    @staticmethod
    def _bias(graph: Graph, ctx: PassContext, shapes: Shapes, dims: Dims, mha: Node) -> bool:
        found = [_bias_of(graph, shapes, dims, v, mha) for v in mha.inputs[:3]]
        if not any(found):
            return False
        sizes = [dims.static(v, -1) for v in mha.inputs[:3]]
        if any(s is None for s in sizes):
            return False
        parts, consts = [], []
        for (x_b, size) in zip(found, sizes):
            if x_b is None:
                consts.append(np.zeros(size, np.float32))
                parts.append("")
            else:
                consts.append(graph.const(x_b[1]))
                parts.append(x_b[1])
        if all(c is not None for c in consts):
            bias = graph.add_initializer(np.concatenate(consts).astype(np.float32), f"{mha.name or 'mha'}_qkv_bias")
        else:
            pieces = [p if p else graph.add_initializer(c, f"{mha.name or 'mha'}_zero_bias")
                      for p, c in zip(parts, consts)]
            bias = graph.add_node("Concat", pieces, 1, {"axis": 0}, name=f"{mha.name or 'mha'}/bias",
                                  near=graph.producer(mha.inputs[0])).outputs[0]
        adds = []
        for slot, x_b in enumerate(found):
            if x_b is not None:
                adds.append(graph.producer(mha.inputs[slot]))
                graph.set_input(mha, slot, x_b[0])
        graph.set_input(mha, 3, bias)
        absorbed = [n.name or n.op_type for n in adds]
        graph.remove_nodes(adds)
        ctx.absorbed(mha, absorbed)
        return True

    @staticmethod
    def _scale(graph: Graph, ctx: PassContext, dims: Dims, mha: Node) -> bool:
        query = mha.inputs[0]
        mul = graph.producer(query)
        if not is_op(mul, "Mul") or graph.is_output(query) or not only_feeds(graph, query, mha):
            return False
        heads, hidden = mha.attr("num_heads"), dims.static(query, -1)
        if not heads or hidden is None or hidden % heads:
            return False
        for q, c in (mul.inputs, mul.inputs[::-1]):
            const = graph.const(c)
            factor = float_scalar(graph, c)
            if const is None or factor is None or factor == 0 or const.ndim > 1 or graph.const(q) is not None:
                continue
            if dims.static(q, -1) != hidden or dims.shapes.rank(q) != 3:
                continue
            scale = mha.attr("scale")
            scale = float(scale) if scale else 1.0 / math.sqrt(hidden // heads)
            graph.set_input(mha, 0, q)
            graph.set_attr(mha, "scale", float(np.float32(factor * scale)))
            absorbed = [mul.name or mul.op_type]
            graph.remove_nodes([mul])
            ctx.absorbed(mha, absorbed)
            return True
        return False
