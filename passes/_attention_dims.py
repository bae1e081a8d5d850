"""Proofs about one dim of an attention's tensors, for the attention rules' checks
(``passes/_attention_parts.py``): that two dims are equal (walking each up through the ops that
copy a dim — Reshape/Expand targets built from Shape pieces (an Expand target that is not
traceable as a whole, element by element: TorchScript's ``Where(Equal(t, -1), 1, t)`` of a mask's
[B, -1, S, P + S]), a head split's -1, Concats part by part, as a KV cache's past and new lengths,
broadcasting ops (comparisons and And/Or too: an in-graph mask), ``Range(0, n, 1)``'s n), and the
size the graph fixes for a dim where shape inference gave up. Apart from the checks because they are a small theory of their own: each
answer is memoised on the match, and a cycle proves nothing.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from graphtool.passes._ort_common import MS_DOMAIN, piece_at, shape_pieces

from graphtool.rewrite import Match

Dim = tuple[str, int]


def same_dim(m: Match, a: Dim, b: Dim, depth: int = 0) -> bool:
    """Dim ``a`` provably equals dim ``b``: walk each up through the ops that copy a dim (those
    ``Dims.root`` follows, plus Reshape/Expand targets built from Shape pieces, and a head
    split's -1), and find a common point; two Concats along the dim are equal part by part
    (a KV cache: past keys and values one length, new keys and values one length)."""
    memo = m.extra.setdefault("same_dim", {})
    if (a, b) not in memo:
        memo[(a, b)] = False  # a cycle through this pair proves nothing
        memo[(a, b)] = _prove_same_dim(m, a, b, depth)
    return memo[(a, b)]


def _prove_same_dim(m: Match, a: Dim, b: Dim, depth: int) -> bool:
    if depth > 12:
        return False
    chain_a, chain_b = _dim_chain(m, a, depth), _dim_chain(m, b, depth)
    dims = m.facts.dims
    if any(dims.equal(x, y) for x in chain_a for y in chain_b):
        return True
    parts_a, parts_b = _concat_parts(m, chain_a[-1]), _concat_parts(m, chain_b[-1])
    return (parts_a is not None and parts_b is not None and len(parts_a) == len(parts_b)
            and all(same_dim(m, x, y, depth + 1) for x, y in zip(parts_a, parts_b)))


def _dim_chain(m: Match, dim: Dim, depth: int = 0) -> list[Dim]:
    chain = [dim]
    for _ in range(16):
        root = m.facts.dims.root(*chain[-1])
        if root != chain[-1]:
            chain.append(root)
        nxt = _dim_step(m, chain[-1], depth)
        if nxt is None or nxt in chain:
            return chain
        chain.append(nxt)
    return chain


# numpy broadcasting: an output dim is the one input dim that is not 1 there
_BROADCASTING = {"Add", "Sub", "Mul", "Div", "Where", "And", "Or", "Xor", "Equal", "Less", "LessOrEqual", "Greater",
                 "GreaterOrEqual"}
_SAME_SHAPE = {"Cast", "Neg", "Identity", "Softmax", "Sqrt", "Relu", "Sigmoid", "Tanh", "Erf", "Exp", "Abs", "Dropout",
               "Cos", "Sin", "Reciprocal", "LayerNormalization", "Gelu", "Softplus", "IsNaN", "Not",
               "DynamicQuantizeLinear", "DequantizeLinear", "QuantizeLinear", "RotaryEmbedding", "RMSNormalization"}


def static_size(m: Match, value: str, axis: int, depth: int = 0) -> int | None:
    """The size of dim ``axis`` of ``value`` when the graph fixes it, read through the ops that
    carry it where inference gave up (a Reshape target built from Shape pieces, then Transpose,
    rotary's broadcasting Mul/Add, Concat/Slice on other axes, repeat_kv's Expand and Reshape)."""
    dims, graph, shapes = m.facts.dims, m.graph, m.facts.shapes
    known = dims.static(value, axis)
    if known is not None or depth > 24:
        return known
    node, r = graph.producer(value), shapes.rank(value)
    if node is None or r is None or not 0 <= axis < r:
        return None
    op, ins = node.op_type, node.inputs
    if node.domain == MS_DOMAIN:
        return static_size(m, ins[0], axis, depth + 1) if op == "RotaryEmbedding" else None
    if node.domain not in ("", "ai.onnx"):
        return None
    if op in _SAME_SHAPE:
        return static_size(m, ins[0], axis, depth + 1)
    if op in ("Add", "Sub", "Mul", "Div", "Where"):  # the original runs: every input not 1 there has the size
        sizes = []
        for v in ins:
            rv = shapes.rank(v)
            pos = axis - (r - rv) if rv is not None else -1
            if rv is None:
                return None
            if pos >= 0:
                sizes.append(static_size(m, v, pos, depth + 1))
        big = [z for z in sizes if z is not None and z != 1]
        return big[0] if big else (1 if sizes and all(z == 1 for z in sizes) else None)
    if op == "Transpose":
        perm = node.attr("perm")
        return static_size(m, ins[0], int(perm[axis]), depth + 1) if perm is not None and len(perm) == r else None
    if op in ("Concat", "Slice"):
        step = _dim_step(m, (value, axis))
        return static_size(m, step[0], step[1], depth + 1) if step is not None else None
    if op == "Unsqueeze":
        axes = _const_axes(m, node)
        if axes is None or axis in axes:
            return 1 if axes is not None else None
        return static_size(m, ins[0], axis - sum(a < axis for a in axes), depth + 1)
    if op in ("Reshape", "Expand"):
        pieces = shape_pieces(graph, shapes, ins[1])
        if pieces is None or len(pieces) != r:
            return None
        piece = pieces[axis]
        if isinstance(piece, tuple):
            size = static_size(m, piece[0], piece[1], depth + 1)
        elif op == "Reshape" and piece == 0 and not node.attr("allowzero", 0):
            size = static_size(m, ins[0], axis, depth + 1)
        elif op == "Reshape" and piece == -1:
            size = _minus_one(m, node, pieces, axis, depth)
        else:
            size = piece
        if op == "Expand" and size == 1:
            rv = shapes.rank(ins[0])
            pos = axis - (r - rv) if rv is not None else -1
            return static_size(m, ins[0], pos, depth + 1) if pos >= 0 else 1
        return size if isinstance(size, int) and size >= 0 else None
    return None


def _const_axes(m: Match, node) -> list[int] | None:
    axes = node.attr("axes")
    if axes is None and len(node.inputs) > 1 and node.inputs[1]:
        axes = m.graph.const(node.inputs[1])
    r = m.facts.shapes.rank(node.outputs[0])
    if axes is None or r is None:
        return None
    return sorted(int(a) + r if int(a) < 0 else int(a) for a in np.reshape(axes, -1))


def _cancelled(m: Match, node, pieces: list, axis: int, same: Callable[[Dim, Dim], bool],
               size_of: Callable[[Dim], int | None]) -> tuple[list[int], int] | None:
    """What a Reshape target's pieces other than ``axis`` leave of its input: the input dims no piece
    copies (a 0, or a piece ``same`` as an input dim, cancels one) and the product of the pieces that
    are sizes (``size_of`` a piece that copies no input dim); None when a piece is neither."""
    source = node.inputs[0]
    r_in = m.facts.shapes.rank(source)
    if r_in is None:
        return None
    left, product = list(range(r_in)), 1
    for j, piece in enumerate(pieces):
        if j == axis:
            continue
        if piece == 0 and not node.attr("allowzero", 0) and j < r_in and j in left:
            left.remove(j)
            continue
        if isinstance(piece, tuple):
            copies = [i for i in left if same(piece, (source, i))]
            if copies:
                left.remove(copies[0])
                continue
            piece = size_of(piece)
        if not isinstance(piece, int) or piece <= 0:
            return None
        product *= piece
    return left, product


def _minus_one(m: Match, node, pieces: list, axis: int, depth: int) -> int | None:
    """A Reshape's -1 from the element counts, when every dim but matching copies is fixed."""
    got = _cancelled(m, node, pieces, axis, lambda a, b: same_dim(m, a, b),
                     lambda p: static_size(m, p[0], p[1], depth + 1))
    if got is None:
        return None
    left, out_product = got
    sizes = [static_size(m, node.inputs[0], i, depth + 1) for i in left]
    if any(z is None for z in sizes):
        return None
    total = int(np.prod(sizes, dtype=np.int64))
    return total // out_product if total % out_product == 0 else None


def _concat_parts(m: Match, dim: Dim) -> list[Dim] | None:
    value, axis = dim
    node = m.graph.producer(value)
    r = m.facts.shapes.rank(value)
    if node is None or node.op_type != "Concat" or r is None or node.domain not in ("", "ai.onnx"):
        return None
    cat = node.attr("axis", 0)
    return [(v, axis) for v in node.inputs] if (cat + r if cat < 0 else cat) == axis else None


def _dim_step(m: Match, dim: Dim, depth: int = 0) -> Dim | None:
    """Where an output dim comes from, one producer up, past what ``Dims.root`` follows: a
    Reshape's or Expand's target piece, a Concat's or Slice's untouched axis, and a broadcasting
    op whose inputs that are not 1 there are provably one dim (rotary's x·cos + rot(x)·sin)."""
    value, axis = dim
    graph, shapes = m.graph, m.facts.shapes
    node = graph.producer(value)
    if node is not None and node.domain == MS_DOMAIN and node.op_type == "RotaryEmbedding":
        return (node.inputs[0], axis)  # same shape as its input, 3-D or 4-D
    if node is None or node.domain not in ("", "ai.onnx"):
        return None
    r = shapes.rank(value)
    if node.op_type in _SAME_SHAPE:
        return (node.inputs[0], axis) if shapes.rank(node.inputs[0]) == r else None
    if node.op_type == "Attention" and value == node.outputs[0] and r is not None and axis < r - 1:
        return (node.inputs[0], axis)  # ONNX Attention's Y: Q's batch, (heads,) length
    if node.op_type in ("Concat", "Slice") and r is not None:
        if node.op_type == "Concat":
            cat = node.attr("axis", 0)
            touched = [cat + r if cat < 0 else cat]
        else:
            axes = graph.const(node.inputs[3]) if len(node.inputs) > 3 and node.inputs[3] else np.arange(r)
            touched = None if axes is None else [int(a) + r if a < 0 else int(a) for a in np.reshape(axes, -1)]
        return (node.inputs[0], axis) if touched is not None and axis not in touched else None
    matmul = node.op_type in ("MatMul", "MatMulInteger")
    if matmul and r is not None and axis == r - 2 and shapes.rank(node.inputs[0]) == r:
        return (node.inputs[0], axis)  # rows of A
    matmul_batch = matmul and r is not None and axis < r - 2
    if (node.op_type in _BROADCASTING or matmul_batch) and r is not None:
        candidates = []
        for v in node.inputs:
            rv = shapes.rank(v)
            if rv is None:
                return None
            pos = axis - (r - rv)
            if matmul_batch and pos >= rv - 2:
                return None
            if pos >= 0 and m.facts.dims.static(v, pos) != 1:
                candidates.append((v, pos))
        if candidates and all(same_dim(m, candidates[0], c, depth + 1) for c in candidates[1:]):
            return candidates[0]
        return None
    if node.op_type == "Range" and axis == 0 and r == 1:
        # Range(0, n, 1) has n elements: a mask's arange over the batch or the keys
        start, delta = graph.const(node.inputs[0]), graph.const(node.inputs[2])
        if start is None or delta is None or start.size != 1 or delta.size != 1 or start.item() != 0 or delta.item() != 1:
            return None
        limit = shape_pieces(graph, shapes, node.inputs[1])
        return limit[0] if limit is not None and len(limit) == 1 and isinstance(limit[0], tuple) else None
    if node.op_type == "Tile" and r is not None:
        # out dim = in dim × repeats: a repeat of 1 keeps the input's dim; an input dim of 1 takes
        # the repeat (Whisper's positions: Tile([1, S] positions, [B, 1]) → [B, S])
        repeats = shape_pieces(graph, shapes, node.inputs[1])
        if repeats is None or len(repeats) != r or not 0 <= axis < r:
            return None
        if repeats[axis] == 1:
            return (node.inputs[0], axis)
        if isinstance(repeats[axis], tuple) and static_size(m, node.inputs[0], axis, depth + 1) == 1:
            return repeats[axis]
        return None
    if node.op_type not in ("Reshape", "Expand"):
        return None
    pieces = shape_pieces(graph, shapes, node.inputs[1])
    r_in = shapes.rank(node.inputs[0])
    if r is None or r_in is None or not 0 <= axis < r or (pieces is not None and len(pieces) != r):
        return None
    if pieces is None:  # one element traced alone: a mask's [B, -1, S, P + S] target gives B and S
        if node.op_type != "Expand" or shapes.shape(node.inputs[1]) != [r]:
            return None
        piece = piece_at(graph, shapes, node.inputs[1], axis)
        if piece is None:
            return None
    else:
        piece = pieces[axis]
    if node.op_type == "Expand":
        pos = axis - (r - r_in)
        if piece == 1 and pos >= 0:
            return (node.inputs[0], pos)
        if isinstance(piece, tuple) and (pos < 0 or m.facts.dims.static(node.inputs[0], pos) == 1):
            return piece
        if isinstance(piece, tuple) and (m.facts.dims.equal(piece, (node.inputs[0], pos))
                                         or same_dim(m, piece, (node.inputs[0], pos), depth + 1)):
            return (node.inputs[0], pos)
        return None
    if isinstance(piece, tuple):
        return piece
    if piece == 0 and not node.attr("allowzero", 0) and axis < r_in:
        return (node.inputs[0], axis)
    if piece == -1:
        return _inferred_dim(m, node, pieces, axis)
    return None


def _inferred_dim(m: Match, node, pieces: list, axis: int) -> Dim | None:
    """A Reshape's -1 at ``axis`` is one input dim when the element counts say so: every other
    target dim is a constant, or copies/equals an input dim (which then cancels); the input has
    exactly one dim left that is not a constant, and the constants' products agree — a head
    split [B, -1, n, h] of [B, S, n·h], repeat_kv's [B, N, -1, h] of [B, kv, g, T, h]."""
    source, dims = node.inputs[0], m.facts.dims
    got = _cancelled(m, node, pieces, axis, dims.equal, lambda _piece: None)
    if got is None:
        return None
    left, out_product = got
    unknown = [i for i in left if dims.static(source, i) is None]
    if len(unknown) != 1:
        return None
    in_product = int(np.prod([dims.static(source, i) for i in left if i != unknown[0]], dtype=np.int64))
    return (source, unknown[0]) if in_product == out_product else None
