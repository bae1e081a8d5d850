"""Reshape targets computed from the input's own shape become constants (ORT's ReshapeFusion).

Exporters write ``x.view(x.size(0), x.size(1), heads, -1)`` as
``Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), Unsqueeze(Gather(Shape(x), 1)), [4], [-1]))``.
With symbolic batch/sequence dims no folding can make that shape constant, but Reshape has a
word for "keep input dim i": 0 at position i (when ``allowzero`` is 0). So each piece is
resolved to a dim of the Reshape's *input*:

1. a constant piece keeps its values (a literal 0 refuses, since it would change meaning);
2. ``Shape(z)[k]`` (via Gather, or a Slice of Shape) where dim k of z is dim p of the input —
   z is the input itself with k == p, or both dims are the same static number or the same
   symbolic name in the known shapes — becomes 0;
3. at most one piece that resolves to neither becomes -1 (Reshape infers it from the size).

Anything else — two unknown pieces, ``allowzero=1``, a piece whose rank is unknown — is left
alone. The Shape/Gather/Concat nodes that fed the target die in dead-code elimination.
"""

from __future__ import annotations

import numpy as np

from graphtool.ir.graph import Graph, Node
from graphtool.pass_manager import Pass, PassContext, PassResult, register

Piece = list  # a list of entries: int (constant) or ("dim", value_name, index)


def _const_ints(graph: Graph, value: str) -> list[int] | None:
    array = graph.const(value)
    if array is None or array.dtype.kind not in "iu":
        return None
    return [int(v) for v in np.atleast_1d(array).tolist()]


def _shape_source(graph: Graph, value: str) -> tuple[str, int, int] | None:
    """(z, start, end) when ``value`` is Shape(z) (with its own start/end attributes)."""
    node = graph.producer(value)
    if node is None or node.op_type != "Shape" or node.domain not in ("", "ai.onnx"):
        return None
    rank = graph.shape(node.inputs[0])
    start = node.attr("start", 0)
    end = node.attr("end", None)
    if (start < 0 or (end is not None and end < 0)) and rank is None:
        return None
    n = len(rank) if rank is not None else None
    if start < 0:
        start += n  # type: ignore[operator]
    if end is None:
        end = n if n is not None else -1
    elif end < 0:
        end += n  # type: ignore[operator]
    return node.inputs[0], start, end


def _pieces(graph: Graph, value: str, depth: int = 0) -> Piece | None:
    """The entries a 1-D int64 shape tensor is made of, or None if it cannot be traced."""
    if depth > 8:
        return None
    consts = _const_ints(graph, value)
    if consts is not None:
        return list(consts)
    node = graph.producer(value)
    if node is None:
        return None
    op = node.op_type
    if op == "Concat":
        out: Piece = []
        for part in node.inputs:
            sub = _pieces(graph, part, depth + 1)
            if sub is None:
                return None
            out.extend(sub)
        return out
    if op == "Unsqueeze":  # a scalar made 1-D
        return _scalar_piece(graph, node.inputs[0], depth + 1)
    if op == "Cast":
        return _pieces(graph, node.inputs[0], depth + 1)
    if op == "Shape":
        source = _shape_source(graph, value)
        if source is None or source[2] < 0:
            return None
        z, start, end = source
        return [("dim", z, k) for k in range(start, end)]
    if op == "Slice":
        base = _pieces(graph, node.inputs[0], depth + 1)
        starts, ends = _const_ints(graph, node.inputs[1]), _const_ints(graph, node.inputs[2])
        axes = _const_ints(graph, node.inputs[3]) if len(node.inputs) > 3 and node.inputs[3] else [0]
        steps = _const_ints(graph, node.inputs[4]) if len(node.inputs) > 4 and node.inputs[4] else [1]
        if base is None or starts is None or ends is None or axes != [0] or steps != [1]:
            return None
        return base[slice(starts[0], ends[0])]
    if op == "Gather":
        return _gather(graph, node, depth)
    return None


def _scalar_piece(graph: Graph, value: str, depth: int) -> Piece | None:
    consts = _const_ints(graph, value)
    if consts is not None and len(consts) == 1:
        return consts
    node = graph.producer(value)
    if node is None:
        return None
    if node.op_type == "Gather":
        return _gather(graph, node, depth)
    if node.op_type == "Cast":
        return _scalar_piece(graph, node.inputs[0], depth + 1)
    return None


def _gather(graph: Graph, node: Node, depth: int) -> Piece | None:
    if node.attr("axis", 0) != 0:
        return None
    index = _const_ints(graph, node.inputs[1])
    if index is None:
        return None
    source = _shape_source(graph, node.inputs[0])
    if source is not None and source[1] == 0 and all(i >= 0 for i in index):
        # Shape(z)[k] needs no rank: dim k of z (end, if bounded, must cover k)
        z, _, end = source
        if end < 0 or all(i < end for i in index):
            return [("dim", z, i) for i in index]
    base = _pieces(graph, node.inputs[0], depth + 1)
    if base is None:
        return None
    try:
        return [base[i] for i in index]
    except IndexError:
        return None


def _same_dim(graph: Graph, x: str, p: int, z: str, k: int) -> bool:
    if z == x and k == p:
        return True
    xs, zs = graph.shape(x), graph.shape(z)
    if xs is None or zs is None or p >= len(xs) or k >= len(zs):
        return False
    a, b = xs[p], zs[k]
    return a is not None and a == b and (not isinstance(a, int) or a > 0)


def resolve_target(graph: Graph, reshape: Node) -> list[int] | None:
    """A constant target equal to the computed one, or None when it cannot be proven."""
    x, target = reshape.inputs[0], reshape.inputs[1]
    pieces = _pieces(graph, target)
    if pieces is None or not pieces:
        return None
    resolved: list[int] = []
    unknown = 0
    for p, entry in enumerate(pieces):
        if isinstance(entry, int):
            if entry == 0:
                return None
            resolved.append(entry)
            unknown += entry == -1
        elif _same_dim(graph, x, p, entry[1], entry[2]):
            resolved.append(0)
        else:
            resolved.append(-1)
            unknown += 1
    if unknown > 1:
        return None
    return resolved


@register(level=1, priority=16)
class ReshapeFromInputShape(Pass):
    """Reshape targets built from Shape(input) pieces become constants with 0 = keep dim."""

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        rewritten = 0
        for reshape in graph.nodes("Reshape"):
            if reshape.domain not in ("", "ai.onnx") or len(reshape.inputs) < 2 or reshape.attr("allowzero", 0):
                continue
            if graph.const(reshape.inputs[1]) is not None:
                continue
            target = resolve_target(graph, reshape)
            if target is None:
                continue
            name = graph.add_initializer(np.array(target, dtype=np.int64), f"{reshape.name or 'reshape'}_shape")
            graph.set_input(reshape, 1, name)
            rewritten += 1
        return PassResult(rewritten > 0, {"rewritten": rewritten})
