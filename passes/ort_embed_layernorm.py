"""BERT/GPT-2 embeddings → com.microsoft EmbedLayerNormalization (``--target ort``).

The embedding block is three table lookups, two Adds and a LayerNormalization — plus, in the
exports, the plumbing that builds position ids (``arange`` buffer sliced to the sequence length)
and all-zero token-type ids (a zeros buffer sliced and expanded to the batch). One
EmbedLayerNormalization does the lookups, the sum and the norm, with positions 0..S-1 built in.

Rule, anchored on each LayerNormalization (last axis, constant 1-D gamma/beta)::

    s = word + pos (+ type)                 any association/order of the Adds
    word = Gather(W[V, H], ids)             ids: rank-2 [B, S] integers
    pos  = Gather(P[Pmax, H], p)            p provably [[0, 1, ..., S-1]]: Slice(arange const, 0, S)
                                            on the last axis, or Unsqueeze(Range(0, S, 1), 0)
    type = Gather(T[k, H], t)               t provably all zeros (a zeros constant sliced/expanded,
                                            expanded to ids' shape) → T[0] is folded into P;
                                            otherwise t of ids' shape becomes the segment ids
    y = LayerNormalization(s, gamma, beta)
    ⇒  y, _, s = EmbedLayerNormalization(int32(ids), int32(t)?, W, P(+T[0]), T?, gamma, beta)

The same rule reads an earlier fusion's ``com.microsoft`` SkipLayerNormalization(a, b, gamma, beta) as
``LayerNormalization(a + b)`` (onnxruntime's own GPT-2 embedding tests start from that graph): the
Skip's output 3, when read, is the sum (EmbedLayerNormalization's output 2). A Skip with a bias
(input 4) or whose mean/inv-std outputs are read is refused.

S above is always *proved* to be ids' dim 1 (``_ort_common.Dims``). Positions that are not provably
0..S-1 (GPT-2 with a cache: ``arange(past, past + S)``, or a ``position_ids`` input) are passed to the
kernel as its ``position_ids`` (input 8) when they are integers of ids' shape or of [1, S]. It refuses when an Add has
another reader (the full sum may: it becomes output 2), when a table is not a float32 constant,
when the ids' rank is not 2, or when the position ids cannot be proved to be 0..S-1.

Known difference: the kernel takes int32 ids; a negative id (which Gather would wrap around from
the end of the table) makes the fused op fail instead.
"""

from __future__ import annotations

import numpy as np

from graphtool.ir.graph import Graph, Node
from graphtool.pass_manager import Pass, PassContext, PassResult, register
from graphtool.passes._fuse_common import Namer, is_op, only_feeds
from graphtool.passes._ort_common import (
    MS_DOMAIN,
    Dims,
    Shapes,
    contrib_allowed,
    producer_op,
    record_shape,
    replace_with,
    shape_pieces,
    use_ms_domain,
)


def _leaves(graph: Graph, value: str, reader: Node, chain: list[Node], out: list[str]) -> bool:
    """Flatten an Add tree into its non-Add leaves (each intermediate Add read only by its parent)."""
    add = producer_op(graph, value, "Add")
    if add is None or len(add.inputs) != 2 or (chain and not only_feeds(graph, value, reader)):
        out.append(value)
        return True
    chain.append(add)
    return all(_leaves(graph, v, add, chain, out) for v in add.inputs) and len(out) <= 3


def _lookup(graph: Graph, value: str) -> tuple[Node, np.ndarray] | None:
    node = producer_op(graph, value, "Gather")
    if node is None or node.attr("axis", 0) != 0:
        return None
    table = graph.const(node.inputs[0])
    if table is None or table.ndim != 2 or table.dtype != np.float32:
        return None
    return node, table


def _all_zeros(graph: Graph, value: str, depth: int = 0) -> bool:
    """``value`` is made only of zeros: a zero constant, or Slice/Expand/Cast/Unsqueeze of one."""
    array = graph.const(value)
    if array is not None:
        return array.size > 0 and not np.any(array)
    node = graph.producer(value)
    if node is None or depth > 6 or not is_op(node, "Slice", "Expand", "Cast", "Unsqueeze", "Reshape", "ConstantOfShape"):
        return False
    if node.op_type == "ConstantOfShape":
        fill = node.attr("value")
        return fill is None or not np.any(np.asarray(fill))  # default fill is 0
    return _all_zeros(graph, node.inputs[0], depth + 1)


def _explicit_positions(prover: "_Prover", lookups: list) -> tuple[int, int, str] | None:
    """GPT-2's positions: (word, pos, position ids) when two lookups read rank-2 integer ids, the
    position ids of the ids' shape or of [1, S] (S provably equal). The kernel then adds
    ``word_table[ids] + pos_table[position_ids]``, which is the graph's sum whichever is called which;
    the larger table is taken as the words."""
    order = sorted(range(len(lookups)), key=lambda i: -lookups[i][1].shape[0])
    for i in order:
        ids = lookups[i][0].inputs[1]
        if prover.shapes.rank(ids) != 2 or prover.shapes.dtype(ids) not in (6, 7):
            continue
        for p in order:
            pids = lookups[p][0].inputs[1]
            if p == i or prover.shapes.rank(pids) != 2 or prover.shapes.dtype(pids) not in (6, 7):
                continue
            if prover.same_shape(pids, ids) or (prover.dims.static(pids, 0) == 1 and prover.dims.equal((pids, 1), (ids, 1))):
                return i, p, pids
    return None


def _is_skip(node: Node) -> bool:
    return node.op_type == "SkipLayerNormalization" and node.domain == MS_DOMAIN


class _Prover:
    def __init__(self, graph: Graph, ctx: PassContext):
        self.graph = graph
        self.shapes = Shapes(graph, ctx)
        self.dims = Dims(graph, self.shapes)

    def is_seq_len(self, value: str, ids: str) -> bool:
        pieces = shape_pieces(self.graph, self.shapes, value)
        if pieces is None or len(pieces) != 1:
            return False
        piece = pieces[0]
        if isinstance(piece, int):
            return self.dims.static(ids, 1) == piece
        return self.dims.equal(piece, (ids, 1))

    def is_positions(self, value: str, ids: str) -> bool:
        """value = [[0, 1, ..., S-1]] with S = ids' dim 1."""
        graph = self.graph
        node = graph.producer(value)
        if is_op(node, "Slice") and len(node.inputs) >= 3:
            base = graph.const(node.inputs[0])
            starts = graph.const(node.inputs[1])
            axes = graph.const(node.inputs[3]) if len(node.inputs) > 3 and node.inputs[3] else None
            steps = graph.const(node.inputs[4]) if len(node.inputs) > 4 and node.inputs[4] else None
            if base is None or base.ndim != 2 or base.shape[0] != 1 or base.dtype.kind not in "iu":
                return False
            if not np.array_equal(base[0], np.arange(base.shape[1])):
                return False
            if starts is None or starts.reshape(-1).tolist() != [0] or axes is None or axes.reshape(-1).tolist() not in ([1], [-1]):
                return False
            if steps is not None and steps.reshape(-1).tolist() != [1]:
                return False
            return self.is_seq_len(node.inputs[2], ids)
        if is_op(node, "Unsqueeze"):
            axes = node.attr("axes")
            axes = list(axes) if axes is not None else (graph.const(node.inputs[1]).reshape(-1).tolist()
                                                        if len(node.inputs) > 1 and graph.const(node.inputs[1]) is not None else None)
            rng = producer_op(graph, node.inputs[0], "Range")
            if axes != [0] or rng is None:
                return False
            start, delta = graph.const(rng.inputs[0]), graph.const(rng.inputs[2])
            if start is None or delta is None or start.reshape(-1).tolist() != [0] or delta.reshape(-1).tolist() != [1]:
                return False
            return self.is_seq_len(rng.inputs[1], ids)
        return False

    def same_shape(self, a: str, b: str) -> bool:
        """a provably has b's shape: equal dims, or a = Expand(x, shape_of_b) where x is no bigger."""
        expand = producer_op(self.graph, a, "Expand")
        if expand is not None:
            return self._expands_to(expand, b)
        ra, rb = self.shapes.rank(a), self.shapes.rank(b)
        return ra is not None and ra == rb and all(self.dims.equal((a, i), (b, i)) for i in range(ra))

    def _expands_to(self, expand: Node, b: str) -> bool:
        """Expand(x, t) has exactly b's shape: t's entries are b's dims, and every dim of x is 1, or
        equal to that dim, or a Slice of x from 0 to that dim (so never larger: Expand cannot
        grow the result past t)."""
        graph, rank = self.graph, self.shapes.rank(b)
        pieces = shape_pieces(graph, self.shapes, expand.inputs[1])
        x = expand.inputs[0]
        x_rank = self.shapes.rank(x)
        if pieces is None or rank is None or len(pieces) != rank or x_rank is None or x_rank > rank:
            return False
        if not all(not isinstance(p, int) and self.dims.equal(p, (b, i)) for i, p in enumerate(pieces)):
            return False
        slice_ends: dict[int, str] = {}
        kept: dict[int, int] = {}  # static dims a Slice of a constant does not touch
        node = producer_op(graph, x, "Slice")
        if node is not None and len(node.inputs) >= 4:
            starts, axes = graph.const(node.inputs[1]), graph.const(node.inputs[3])
            base = graph.const(node.inputs[0])
            if starts is not None and axes is not None and not np.any(starts) and axes.size == 1:
                axis = int(axes.reshape(-1)[0])
                axis = axis + x_rank if axis < 0 else axis
                slice_ends[axis] = node.inputs[2]
                if base is not None and base.ndim == x_rank:
                    kept = {k: d for k, d in enumerate(base.shape) if k != axis}
        for k in range(x_rank):
            j = k + rank - x_rank  # the target axis this x axis is aligned with
            if self.dims.static(x, k) == 1 or kept.get(k) == 1 or self.dims.equal((x, k), (b, j)):
                continue
            if k in slice_ends and self.is_seq_len(slice_ends[k], b) and j == 1:
                continue
            return False
        return True


@register(level=2, target="ort", priority=60)
class OrtEmbedLayerNorm(Pass):
    """Word + position (+ token type) embedding lookups + LayerNormalization → com.microsoft EmbedLayerNormalization."""

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        fused = 0
        if not contrib_allowed(graph, ctx, "EmbedLayerNormalization"):
            return PassResult(False, {"fused": 0})
        prover: _Prover | None = None
        namer = Namer(graph)
        for ln in [*graph.nodes("LayerNormalization"), *graph.nodes("SkipLayerNormalization")]:
            if not graph.has_node(ln) or not (is_op(ln, "LayerNormalization") or _is_skip(ln)):
                continue
            if ln.op_type == "LayerNormalization" and producer_op(graph, ln.inputs[0], "Add") is None:
                continue
            prover = prover or _Prover(graph, ctx)
            if self._fuse(graph, ctx, prover, namer, ln):
                fused += 1
        return PassResult(fused > 0, {"fused": fused})

    @staticmethod
    def _fuse(graph: Graph, ctx: PassContext, prover: _Prover, namer: Namer, ln: Node) -> bool:
        chain: list[Node] = []
        leaves: list[str] = []
        if _is_skip(ln):
            # an earlier fusion's Skip(a, b, gamma, beta): the sum a + b is the Add tree's root; its
            # optional output 3 is that sum. No bias (input 4), no mean/inv-std outputs read.
            if len(ln.inputs) < 4 or any(ln.inputs[4:]) or any(ln.outputs[1:3]):
                return False
            s = ln.outputs[3] if len(ln.outputs) > 3 else ""
            for root in ln.inputs[:2]:
                if not only_feeds(graph, root, ln) or graph.is_output(root):
                    return False
                if not _leaves(graph, root, ln, chain, leaves):
                    return False
                if producer_op(graph, root, "Add") is not None and not only_feeds(graph, root, ln):
                    return False
            if len(leaves) not in (2, 3) or len(set(leaves)) != len(leaves):
                return False
        else:
            s = ln.inputs[0]
            if len([o for o in ln.outputs if o]) != 1 or ln.attr("axis", -1) not in (-1, 2):
                return False
            if not _leaves(graph, s, ln, chain, leaves) or len(leaves) not in (2, 3):
                return False
        g_at = 2 if ln.op_type == "SkipLayerNormalization" else 1  # Skip: (input, skip, gamma, beta, bias)
        gamma_name, beta_name = ln.inputs[g_at], (ln.inputs[g_at + 1] if len(ln.inputs) > g_at + 1 else "")
        gamma = graph.const(gamma_name)
        beta = graph.const(beta_name) if beta_name else None
        lookups = [_lookup(graph, v) for v in leaves]
        if any(found is None for found in lookups):
            return False
        for v in leaves:  # each lookup is read by one Add of the tree (or the Skip) and nothing else
            uses = graph.uses(v)
            if len(uses) != 1 or (uses[0][0] not in chain and uses[0][0] != ln) or graph.is_output(v):
                return False
        hidden = lookups[0][1].shape[1]
        if any(table.shape[1] != hidden for _, table in lookups) or gamma is None or gamma.shape != (hidden,):
            return False
        if beta is None or beta.shape != (hidden,):
            return False
        # which lookup is which: positions are proved, the word ids are the rank-2 input of another
        word = pos = typ = None
        for i, (gather, table) in enumerate(lookups):
            ids = gather.inputs[1]
            if prover.shapes.rank(ids) != 2:
                continue
            rest = [j for j in range(len(lookups)) if j != i]
            p = next((j for j in rest if prover.is_positions(lookups[j][0].inputs[1], ids)), None)
            if p is None:
                continue
            word, pos = i, p
            others = [j for j in rest if j != p]
            typ = others[0] if others else None
            break
        explicit = ""  # position ids the kernel reads (input 8) when they are not provably 0..S-1
        if word is None:
            found = _explicit_positions(prover, lookups)
            if found is None:
                return False
            word, pos, explicit = found
            others = [j for j in range(len(lookups)) if j not in (word, pos)]
            typ = others[0] if others else None
        ids = lookups[word][0].inputs[1]
        segment, pos_table, seg_table = "", lookups[pos][1], None
        if typ is not None:
            t_ids = lookups[typ][0].inputs[1]
            if not prover.same_shape(t_ids, ids):
                return False
            if _all_zeros(graph, t_ids):
                pos_table = pos_table + lookups[typ][1][0]
            else:
                segment, seg_table = t_ids, lookups[typ][0].inputs[0]
        ids_dtype = prover.shapes.dtype(ids)
        if ids_dtype not in (6, 7) or (segment and prover.shapes.dtype(segment) not in (6, 7)):
            return False
        if explicit and typ is not None and not segment:
            return False  # the zero token-type row would be folded into a table read at explicit positions
        use_ms_domain(ctx)
        nodes = chain + [lookups[i][0] for i in range(len(lookups))] + [ln]
        name = namer(nodes, "EmbedLayerNormalization", fallback=ln.name)
        absorbed = [n.name or n.op_type for n in nodes]
        out_shape = prover.shapes.shape(ln.outputs[0])
        keep_sum = bool(s) and (graph.is_output(s) or any(u != ln for u, _ in graph.uses(s)))
        inputs32 = []
        for value, dtype in ((ids, ids_dtype), (segment, prover.shapes.dtype(segment) if segment else None),
                             (explicit, prover.shapes.dtype(explicit) if explicit else None)):
            if value and dtype == 7:
                value = graph.add_node("Cast", [value], 1, {"to": 6}, name=f"{name}/{value}_int32",
                                       near=graph.producer(value)).outputs[0]
            inputs32.append(value)
        pos_name = lookups[pos][0].inputs[0]
        if pos_table is not lookups[pos][1]:
            pos_name = graph.add_initializer(pos_table.astype(np.float32), f"{name}_position_embedding")
        inputs = [inputs32[0], inputs32[1], lookups[word][0].inputs[0], pos_name, seg_table or "", gamma_name, beta_name]
        if explicit:
            inputs += ["", inputs32[2]]  # no mask; position_ids
        outputs = [ln.outputs[0], "", s if keep_sum else ""]
        if not keep_sum:
            outputs.pop()
        attrs = {"epsilon": float(ln.attr("epsilon", 1e-5))}
        node = replace_with(graph, nodes, "EmbedLayerNormalization", inputs, outputs, attrs, name=name)
        for value in (outputs[0], s if keep_sum else ""):
            if value:
                record_shape(graph, prover.shapes, value, out_shape, 1)
        ctx.absorbed(node, absorbed)
        return True
