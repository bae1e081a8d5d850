"""The checks of the attention rules (``passes/attention.py``; their replacements: ``_attention_emit.py``).

A check proves what the pattern cannot say — head split and merge targets, the scale, the
mask, a causal condition — and leaves what it learned in ``match.extra`` for the replacement.
It returns None to accept, or the reason it refuses (what ``--explain`` prints).
"""

from __future__ import annotations

import numpy as np
from graphtool.passes._attention_dims import Dim, same_dim, static_size
from graphtool.passes._ort_common import (
    Dims,
    Shapes,
    shape_pieces,
)
from onnx import TensorProto

from graphtool.ir.graph import Graph
from graphtool.pass_manager import PassContext
from graphtool.rewrite import Match

MIN_CAUSAL_FILL = -1e4


class Facts:
    """Shapes and dim proofs for one pass run, plus the expanded masks layers share."""

    def __init__(self, graph: Graph, ctx: PassContext):
        self.shapes = Shapes(graph, ctx)
        self.dims = Dims(graph, self.shapes)
        self.expanded: dict[str, str] = {}

    def rank(self, value: str) -> int | None:
        return self.shapes.rank(value)


# ---------------------------------------------------------------------- checks


def check_self_attention_ort(m: Match) -> str | None:
    """``check_self_attention``, and v may have its own width (com.microsoft Attention's
    ``qkv_hidden_sizes``: onnxruntime's pruned-model test, q and k [K, Hqk], v [K, Hv])."""
    return check_self_attention(m, varied=True)


def check_self_attention(m: Match, varied: bool = False) -> str | None:
    """Constant projections of one x: weights [K, H] (or one [K, 3H] split in thirds), biases [H]."""
    if m.get("w_qkv"):
        w, b = m.const("w_qkv"), m.const("b_qkv")
        if w.ndim != 2 or w.shape[1] % 3:
            return f"the packed weight has shape {list(w.shape)}, not [K, 3H]"
        h = w.shape[1] // 3
        split = m.node("split")
        sizes = m.const("sizes") if m.get("sizes") else split.attr("split")
        if sizes is not None and [int(s) for s in np.reshape(sizes, -1)] != [h] * 3:
            return f"the Split sizes {list(np.reshape(sizes, -1))} are not three equal thirds"
        if len(split.outputs) != 3:
            return "the Split does not have three outputs"
        weights = [w[:, i * h:(i + 1) * h] for i in range(3)]
        biases = [None if b is None else b.reshape(-1)[i * h:(i + 1) * h] for i in range(3)]
        if b is not None and b.size != 3 * h:
            return f"the packed bias has {b.size} elements, not {3 * h}"
    else:
        weights = [m.const(f"w_{t}") for t in "qkv"]
        biases = [m.const(f"b_{t}") if m.get(f"b_{t}") else None for t in "qkv"]
        same = all(w.ndim == 2 for w in weights) and weights[0].shape == weights[1].shape
        if not same or (weights[2].shape != weights[0].shape and not (varied and weights[2].shape[0] == weights[0].shape[0])):
            return f"the projection weights have shapes {[list(w.shape) for w in weights]}, not three equal [K, H]"
        if any(b is not None and b.shape != (w.shape[1],) for b, w in zip(biases, weights)):
            return "a projection bias is not as wide as its weight"
    if m.facts.shapes.dtype(m["x"]) != 1:
        return "x is not float32 (the fused kernels' type)"
    m.extra.update(weights=weights, biases=biases)
    q_in, k_in, v_in = (m.node(f"rs_{t}").inputs[0] for t in "qkv")
    return _check_core(m, q_in, [q_in, k_in, v_in], varied=varied)


def check_projected(m: Match) -> str | None:
    """q, k, v computed by anything (weights that are inputs, cross-attention): same hidden size."""
    if m.facts.shapes.dtype(m["q"]) != 1:
        return "q is not float32 (the fused kernels' type)"
    q_in = m.node("rs_q").inputs[0]
    return _check_core(m, q_in, [q_in, m["k"], m["v"]])


def _check_core(m: Match, q_in: str, projections: list[str], varied: bool = False) -> str | None:
    heads = [_heads(m, m.node(f"rs_{t}"), p) for t, p in zip("qkv", projections)]
    if any(h is None for h in heads):
        t = "qkv"[[h is None for h in heads].index(True)]
        return f"the {t} head split's target is not provably [B, S, N, h] of its input"
    if len(set(heads)) != 1 and not (varied and heads[0] == heads[1] and heads[2][0] == heads[0][0]):
        return f"q, k and v split into different heads: {heads}"
    n, h = heads[2]  # the context has v's head size
    m.extra["qk_head_size"] = heads[0][1]
    if m.node("kt_unflat") is not None and not _swaps_last_two(m):
        return "the k transposition through Reshape/Transpose/Reshape is not provably kᵀ"
    scale = _scale(m)
    if scale is None:
        return "the scale is not a finite non-zero number"
    why = _check_mask(m)
    if why:
        return why
    guard = m.get("nan_fill") is not None and m.get("mask") is not None and not _finite(m.graph, m["mask"])
    causal = None
    if m.get("causal"):
        causal = m.scalar("fill")
        if causal is None or causal > MIN_CAUSAL_FILL:
            return f"the Where fill {causal} is not a hard mask (<= {MIN_CAUSAL_FILL:g})"
        if not _is_causal(m, m["causal"], q_in):
            return "the Where condition is not the lower-triangular causal mask sliced to [S, S]"
        if not m.facts.dims.equal((projections[1], 1), (q_in, 1)):
            return "causal, but the keys are not provably as many as the queries (the kernel's causal mask is not [S, S] then)"
    why = _check_merge(m, n, h, (q_in, 0), (q_in, 1))
    if why:
        return why
    _prove_dims(m, [m["x"]] * 3 if m.get("x") else [m["q"], m["k"], m["v"]], n, h)
    m.extra.update(heads=n, head_size=h, scale=scale, causal=causal, q_in=q_in, q_dims=((q_in, 0), (q_in, 1)),
                   guard=guard)
    return None


def _check_mask(m: Match) -> str | None:
    mask = m.get("mask")
    if mask is not None:
        r = m.facts.shapes.rank(mask)
        dtype = m.facts.shapes.dtype(mask)
        if r is None or r > 4 or dtype != m.extra.get("dtype", TensorProto.FLOAT):
            return f"the mask has rank {r} and type {dtype}; the kernels take rank <= 4 of the queries' type"
        if m.ctx.opset("") < 10:
            return "the mask's broadcast shape needs opset >= 10"
    if m.get("nan_fill") is not None and m.scalar("nan_fill") != 0:
        return "the NaN guard after Softmax fills with something other than 0"
    return None


def _target_is(m: Match, target: str, allowzero: int, expected: list, copies: dict[int, Dim]) -> bool:
    """``Dims.target_is`` with the walks of this module: a piece equals a wanted dim when
    ``same_dim`` proves it, or both are the same static size (``static_size``)."""
    if m.facts.dims.target_is(target, allowzero, expected, copies):
        return True
    pieces = shape_pieces(m.graph, m.facts.shapes, target)
    known = m.extra.get("known_pieces")
    if pieces is None and known:  # elements a check proved to be a dim (BLOOM's B = Shape(ctx)[0] / N)
        pieces = _elements(m, target)
        pieces = pieces and [known.get(p, p) if isinstance(p, str) else p for p in pieces]
        if pieces is None or any(isinstance(p, str) for p in pieces):
            return False
    if pieces is None or len(pieces) != len(expected):
        return False

    def size(p):
        return p if isinstance(p, int) else static_size(m, *p)

    unknown = 0
    for j, (piece, want) in enumerate(zip(pieces, expected)):
        if piece == -1:
            unknown += 1
            continue
        if piece == 0 and not allowzero:
            piece = copies.get(j)
            if piece is None:
                return False
        if isinstance(piece, tuple) and isinstance(want, tuple) and same_dim(m, piece, want):
            continue
        if size(piece) is None or size(piece) != size(want):
            return False
    return unknown <= 1


def _check_merge(m: Match, n: int, h: int, batch: tuple[str, int], seq: tuple[str, int]) -> str | None:
    """The context's optional no-op Reshape, then the head merge: readers and the [B, S, N·h] target."""
    ctx_reshape = m.node("ctx_reshape")
    if ctx_reshape is not None:
        ctx = ctx_reshape.inputs[0]
        copies = {j: (ctx, j) for j in range(4)}
        if not _target_is(m, ctx_reshape.inputs[1], ctx_reshape.attr("allowzero", 0), [(ctx, 0), n, seq, h], copies):
            return "the Reshape after the product with v is not provably a no-op [B, N, S, h]"
    merged = m.node("merge").outputs[0]
    readers = [u for u, _ in m.graph.uses(merged) if u != m.node("out")]
    if m.graph.is_output(merged) or any(u.op_type != "Reshape" or u.inputs[0] != merged or _copies_head_dims(m, u)
                                        for u in readers):
        return "the head-merging Transpose is read by something other than Reshapes to [B, S, ·]"
    out = m.node("out")
    identity = _target_is(m, out.inputs[1], out.attr("allowzero", 0), [batch, seq, n * h], {0: batch, 1: seq})
    if not identity and _copies_head_dims(m, out):
        return "the head-merging Reshape copies a head dim (a literal 0 past dim 1)"
    m.extra.update(out_identity=identity, other_readers=readers)
    return None


def check_cached(m: Match) -> str | None:
    """``check_cached_shapes``, then whether MultiHeadAttention takes the cache itself (``_past_form``)."""
    why = check_cached_shapes(m)
    if why:
        return why
    m.extra["past"] = _past_form(m, m.extra["heads"], m.extra["head_size"], m.extra["q_dims"][1])
    return None


def check_cached_shapes(m: Match, kernel: str = "MultiHeadAttention") -> str | None:
    """Queries [B, N, S, h] (q's head split, or anything 4-D: rotary's output), keys and values
    [B, N, T, h] made by anything (a KV cache's Concat, repeat_kv, a cache input): N, h static and
    equal on all three, the batch provably one dim, k and v provably one length T."""
    shapes = m.facts.shapes
    if m.get("q3"):
        q = m["q3"]
        heads = _heads(m, m.node("rs_q"), q)
        if heads is None:
            return "the q head split's target is not provably [B, S, N, h] of its input"
        (n, h), batch, seq = heads, (q, 0), (q, 1)
    else:
        q = m["q4"]
        n, h, batch, seq = static_size(m, q, 1), static_size(m, q, 3), (q, 0), (q, 2)
        if n is None or h is None:
            return "the queries' head count and head size are not static"
    dtype = shapes.dtype(q)
    if dtype not in (TensorProto.FLOAT, TensorProto.FLOAT16):
        return f"q is not float32 or float16 ({kernel}'s CPU types)"
    m.extra["dtype"] = dtype
    k4, v4 = kv_value(m, "k"), kv_value(m, "v")
    for name, value in (("k", k4), ("v", v4)):
        if static_size(m, value, 1) != n or static_size(m, value, 3) != h:
            return f"{name} is not provably [B, {n}, T, {h}] like the queries (shape {shapes.shape(value)})"
        if shapes.dtype(value) != dtype:
            return f"{name} is not of the queries' type"
    if not (same_dim(m, batch, (k4, 0)) and same_dim(m, batch, (v4, 0))):
        return "q, k and v do not provably share one batch dim"
    if not same_dim(m, (k4, 2), (v4, 2)):
        return "k and v do not provably have one length"
    if m.node("kt_unflat") is not None and not _swaps_last_two(m):
        return "the k transposition through Reshape/Transpose/Reshape is not provably kᵀ"
    scale = _scale(m)
    if scale is None:
        return "the scale is not a finite non-zero number"
    why = _check_mask(m) or _check_merge(m, n, h, batch, seq)
    if why:
        return why
    guard = m.get("nan_fill") is not None and m.get("mask") is not None and not _finite(m.graph, m["mask"])
    if m.get("empty_rows") is not None:
        if m.scalar("empty_fill") != 0:
            return "the rows of queries that see no key are filled with something other than 0"
        if static_size(m, m["empty_rows"], 1) != 1 or static_size(m, m["empty_rows"], 3) != 1:
            return "the condition zeroing rows is not provably [B, 1, S, 1] (one per query, for all heads)"
    if m.get("q3"):
        m.dims[m.node("rs_q").outputs[0]] = [batch, seq, n, h]
        m.dims[m.node("q_head").outputs[0]] = [batch, n, seq, h]
    for name in ("ctx_reshape", "merge"):
        if m.node(name) is not None:
            m.dims[m.node(name).inputs[0]] = [batch, n, seq, h]
    m.dims[m.node("merge").outputs[0]] = [batch, seq, n, h]
    m.extra.update(heads=n, head_size=h, scale=scale, causal=None, q_dims=(batch, seq), guard=guard)
    return None


def kv_value(m: Match, t: str) -> str:
    """The [B, N, T, h] keys (``t`` = "k") or values the scores read: repeat_kv's output, the
    cache Concat's output, or the 4-D value."""
    node = m.node(f"rep_{t}") if m.node(f"rep_{t}") is not None else m.node(f"cat_{t}")
    return node.outputs[0] if node is not None else m[f"{t}4"]


def _past_form(m: Match, n: int, h: int, seq: Dim) -> bool:
    """MultiHeadAttention can take the cache itself (past_key/past_value in, present out) when
    both k and v are Concat(past [B, N, P, h], head split of a new [B, S, N·h] projection) with
    S the queries' length, and nothing but the match reads the Concats (a graph output is fine:
    the fused op's present outputs take their names; a Shape reader could feed the mask and close
    a cycle through the fused op, so the 4-D form is used then)."""
    if m.node("cat_k") is None or m.node("cat_v") is None:
        return False
    inside = {node.id for node in m.nodes}
    for t in "kv":
        if _heads(m, m.node(f"rs_{t}"), m[f"{t}3"]) != (n, h):
            return False
        past = m[f"past_{t}"]
        if static_size(m, past, 1) != n or static_size(m, past, 3) != h:
            return False
        if not same_dim(m, (m[f"{t}3"], 1), seq):
            return False
        if any(user.id not in inside for user, _ in m.graph.uses(m.node(f"cat_{t}").outputs[0])):
            return False
    return True


def _prove_dims(m: Match, sources: list[str], n: int, h: int) -> None:
    """Dims of the values inside the match, for Shape readers (TorchScript reads a head split's
    or the context's shape to build later Reshape targets): the head splits, then through the
    Transposes and scalar Muls/Divs that follow them; the context and its merge. Each dim is
    read from a value outside the match (x, or the q/k/v inputs): the projections keep [B, S]."""
    for t, proj in zip("qkv", sources):
        size = h if t == "v" else m.extra.get("qk_head_size", h)
        m.dims[m.node(f"rs_{t}").outputs[0]] = [(proj, 0), (proj, 1), n, size]
    for node in reversed(m.nodes):  # producers first
        pieces = m.dims.get(node.inputs[0]) if node.inputs else None
        if pieces is None:
            continue
        if node.op_type == "Transpose" and node.attr("perm") and len(node.attr("perm")) == len(pieces):
            m.dims[node.outputs[0]] = [pieces[p] for p in node.attr("perm")]
        elif node.op_type in ("Mul", "Div") and m.graph.const(node.inputs[1]) is not None \
                and m.graph.const(node.inputs[1]).size == 1 and m.graph.const(node.inputs[1]).ndim <= len(pieces):
            m.dims[node.outputs[0]] = pieces
    batch, seq = (sources[0], 0), (sources[0], 1)
    for name in ("ctx_reshape", "merge"):
        if m.node(name) is not None:
            m.dims[m.node(name).inputs[0]] = [batch, n, seq, h]
    m.dims[m.node("merge").outputs[0]] = [batch, seq, n, h]


def _heads(m: Match, reshape, proj: str) -> tuple[int, int] | None:
    """(N, h) when the Reshape target provably splits [B, S, H] into [B, S, N, h]."""
    dims = m.facts.dims
    pieces = shape_pieces(m.graph, m.facts.shapes, reshape.inputs[1])
    hidden = dims.static(proj, 2)
    if pieces is None or len(pieces) != 4 or hidden is None:
        return None
    n, h = pieces[2], pieces[3]
    if isinstance(n, int) and isinstance(h, int):
        if n == -1 and h > 0 and hidden % h == 0:
            n = hidden // h
        elif h == -1 and n > 0 and hidden % n == 0:
            h = hidden // n
    if not (isinstance(n, int) and isinstance(h, int) and n > 0 and h > 0 and n * h == hidden):
        return None
    copies = {0: (proj, 0), 1: (proj, 1)}
    if not dims.target_is(reshape.inputs[1], reshape.attr("allowzero", 0), [(proj, 0), (proj, 1), n, h], copies):
        return None
    return n, h


def _swaps_last_two(m: Match) -> bool:
    """Reshape(Transpose(Reshape(kh, [-1, S, h]), 021), [B, N, h, S]) is kh with its last two dims swapped."""
    dims = m.facts.dims
    unflat = m.node("kt_unflat")
    flat = m.graph.producer(m.graph.producer(unflat.inputs[0]).inputs[0])
    kh = flat.inputs[0]
    if (dims.target_is(flat.inputs[1], flat.attr("allowzero", 0), [-1, (kh, 2), (kh, 3)], {})
            and dims.target_is(unflat.inputs[1], unflat.attr("allowzero", 0), [(kh, 0), (kh, 1), (kh, 3), (kh, 2)], {})):
        return True
    # every size static (an export at fixed shapes: BART's sdpa at batch 1): the literal targets
    # [B·N, S, h] (or -1 for B·N) and [B, N, h, S]
    b, n, s, h = (static_size(m, kh, i) for i in range(4))
    first, second = m.graph.const(flat.inputs[1]), m.graph.const(unflat.inputs[1])
    if None in (b, n, s, h) or first is None or second is None or 0 in first.tolist() + second.tolist():
        return False
    return first.tolist() in ([b * n, s, h], [-1, s, h]) and second.tolist() == [b, n, h, s]


_SCALAR_OPS = {"Sqrt": np.sqrt, "Reciprocal": lambda a: 1 / a, "Cast": lambda a: a, "CastLike": lambda a: a,
               "Identity": lambda a: a, "Div": np.divide, "Mul": np.multiply}


def scalar_value(graph: Graph, value: str, depth: int = 0) -> float | None:
    """A one-element number computed from constants by Sqrt/Reciprocal/Div/Mul/Cast/CastLike
    (CastLike reads only its second input's type): dynamo's sdpa scale, 1/√√h from the head
    size, before the level-1 folds could see through the CastLike."""
    array = graph.const(value)
    if array is not None:
        if array.size != 1 or array.dtype.kind not in "fiu":
            return None
        number = float(array.reshape(-1)[0])
        return number if np.isfinite(number) else None
    node = graph.producer(value)
    if depth > 8 or node is None or node.domain not in ("", "ai.onnx") or node.op_type not in _SCALAR_OPS:
        return None
    operands = node.inputs[:2] if node.op_type in ("Div", "Mul") else node.inputs[:1]
    values = [scalar_value(graph, v, depth + 1) for v in operands]
    if any(v is None for v in values):
        return None
    with np.errstate(all="ignore"):
        number = float(_SCALAR_OPS[node.op_type](*(np.float64(v) for v in values)))
    return number if np.isfinite(number) else None


def is_scalar(matcher, value: str) -> str | None:
    """A pattern's ``where``: the value is a number computed from constants (``scalar_value``)."""
    return None if scalar_value(matcher.graph, value) is not None else "not a number computed from constants"


def _scale(m: Match) -> float | None:
    scale = 1.0
    for name in ("pre_q", "s_q", "s_k", "s_mul"):
        if m.get(name) is not None:
            value = scalar_value(m.graph, m[name])
            if value is None:
                return None
            scale *= value
    fused = m.node("fused_scores")
    if fused is not None:
        scale *= float(fused.attr("alpha", 1.0))
    if m.get("s_div") is not None:
        value = scalar_value(m.graph, m["s_div"])
        if not value:
            return None
        scale /= value
    return scale if np.isfinite(scale) and scale != 0 else None


def _finite(graph: Graph, value: str) -> bool:
    """The mask is provably finite: Where(c, a, b) of finite constants, through shape-only ops.

    A mask that may hold -inf (TorchScript's sdpa fills with it) empties a row whose keys are all
    padding: Softmax makes it NaN, which the sdpa guard turns into 0 and the fused kernels do not.
    """
    for _ in range(6):
        const = graph.const(value)
        if const is not None:
            return bool(np.all(np.isfinite(const)))
        node = graph.producer(value)
        if node is None:
            return False
        if node.op_type == "Where":
            return all(graph.const(v) is not None and np.all(np.isfinite(graph.const(v))) for v in node.inputs[1:])
        if node.op_type not in ("Expand", "Reshape", "Unsqueeze", "Squeeze", "Identity"):
            return False
        value = node.inputs[0]
    return False


def _copies_head_dims(m: Match, reshape) -> bool:
    if reshape.attr("allowzero", 0):
        return False
    pieces = shape_pieces(m.graph, m.facts.shapes, reshape.inputs[1])
    return pieces is None or any(p == 0 for p in pieces[2:])


def _is_causal(m: Match, cond: str, x: str) -> bool:
    """cond = tril(ones(n, n))[..., 0:S, 0:S] (Slices from 0 to x's sequence length)."""
    graph, dims = m.graph, m.facts.dims
    value, ends = cond, {}
    for _ in range(3):
        node = graph.producer(value)
        if node is None or node.op_type != "Slice":
            break
        ins = node.inputs
        starts = graph.const(ins[1])
        axes = graph.const(ins[3]) if len(ins) > 3 and ins[3] else None
        steps = graph.const(ins[4]) if len(ins) > 4 and ins[4] else None
        if starts is None or axes is None or (steps is not None and not np.all(steps == 1)) or np.any(starts != 0):
            return False
        end_pieces = shape_pieces(graph, m.facts.shapes, ins[2])
        if end_pieces is None or len(end_pieces) != axes.size:
            return False
        ends.update({int(a): e for a, e in zip(axes.reshape(-1).tolist(), end_pieces)})
        value = ins[0]
    base = graph.const(value)
    if base is None or base.dtype != np.bool_ or base.ndim < 2:
        return False
    rows, cols = base.shape[-2:]
    if rows != cols or np.any(base.reshape(-1, rows, cols) != np.tril(np.ones((rows, cols), dtype=bool))):
        return False
    r = base.ndim
    for axis in (r - 2, r - 1):
        e = ends.get(axis, ends.get(axis - r))
        if e is None or (isinstance(e, int) and dims.static(x, 1) != e) or (not isinstance(e, int) and not dims.equal(e, (x, 1))):
            return False
    return True


# ---------------------------------------------------------------------- ALiBi (BLOOM): heads folded into the batch


def _elements(m: Match, target: str) -> list | None:
    """A 1-D shape tensor element by element: an int (a constant), a (value, axis) piece
    (``shape_pieces`` of a one-element part), or the name of a part nothing traces (one element:
    a ``B·N`` computed by Mul). None when it is neither a constant nor a Concat of such parts."""
    pieces = shape_pieces(m.graph, m.facts.shapes, target)
    if pieces is not None:
        return pieces
    node = m.graph.producer(target)
    if node is None or node.op_type != "Concat":
        return None
    out: list = []
    for part in node.inputs:
        sub = shape_pieces(m.graph, m.facts.shapes, part)
        if sub is not None:
            out.extend(sub)
        elif m.facts.shapes.shape(part) == [1]:
            out.append(part)
        else:
            return None
    return out


def _fits(m: Match, piece, want, allow_unknown: bool = True) -> bool:
    if piece == -1:
        return allow_unknown
    if isinstance(want, int):
        return (piece == want) if isinstance(piece, int) else (isinstance(piece, tuple) and static_size(m, *piece) == want)
    return isinstance(piece, tuple) and same_dim(m, piece, want)


def check_alibi(m: Match) -> str | None:
    """BLOOM's attention: q, k, v [B, N, ·, h] reshaped to [B·N, ·, h] (heads folded into the batch),
    ``baddbmm(alibi, q, kᵀ, alpha=scale)``, the scores back to [B, N, S, T], + mask, Softmax, the
    probabilities to [B·N, S, T] again, · v, back to [B, N, S, h], merged. MultiHeadAttention with
    attention_bias = alibi (as [B, N, 1, T]) + mask computes the same.

    Proof that the folds are the identity on memory order: the four [X, ·, ·] targets share one
    leading element X (the same constant, or the same computed value), q/k/v keep h last, and the
    scores are proven [B, N, S, T] again. Then X·S' = B·N·S and X·T' = B·N·T (q and k element counts)
    and X·S'·T' = B·N·S·T (the scores'), so T' = T, X = B·N, S' = S; the probabilities' [X, S'', T'']
    with S'' provably S (or -1, T'' provably T) and v's [X, T_v, h] contracted over T'' = T_v give
    T_v = T. Row b·N + n of every fold is (b, n). The alibi's rows: X (its target leads with X) or 1."""
    m.extra["known_pieces"] = _batch_from_folds(m)
    why = check_cached_shapes(m)
    if why:
        return why
    n, h = m.extra["heads"], m.extra["head_size"]
    (batch, seq), k4 = m.extra["q_dims"], kv_value(m, "k")
    total = (k4, 2)
    folds = {t: m.node(f"flat_{t}") for t in "qkvp"}
    elements = {t: _elements(m, node.inputs[1]) for t, node in folds.items()}
    if any(e is None or len(e) != 3 for e in elements.values()):
        return "a [B·N, ·, ·] fold's target is not three traceable elements"
    lead = elements["q"][0]
    if not all(_same_element(m, e[0], lead) for e in elements.values()) or lead in (0, -1) \
            or (isinstance(lead, int) and lead < 1):
        return "the four [B·N, ·, ·] folds do not provably share one leading dim"
    if any(node.attr("allowzero", 0) == 0 and 0 in elements[t][1:] for t, node in folds.items()):
        return "a fold copies a dim with a literal 0"
    for t in "qkv":
        if not _fits(m, elements[t][2], h, allow_unknown=False):
            return f"the {t} fold does not keep the head size {h} last"
    p = elements["p"]
    if not (_fits(m, p[1], seq) and _fits(m, p[2], total) and [p[1], p[2]].count(-1) <= 1):
        return "the probabilities' fold is not provably [B·N, S, T]"
    unflat = m.node("unflat")
    if not _target_is(m, unflat.inputs[1], unflat.attr("allowzero", 0), [batch, n, seq, total], {}):
        return "the scores' unfold is not provably [B, N, S, T]"
    ctx = m.node("unflat_ctx")
    if not _target_is(m, ctx.inputs[1], ctx.attr("allowzero", 0), [batch, n, seq, h], {}):
        return "the context's unfold is not provably [B, N, S, h]"
    alibi = m["alibi"]
    shapes = m.facts.shapes
    if shapes.rank(alibi) != 3 or shapes.dtype(alibi) != m.extra["dtype"]:
        return "the bias added to the folded scores is not rank 3 of the queries' type"
    producer = m.graph.producer(alibi)
    alibi_lead = _elements(m, producer.inputs[1]) if producer is not None and producer.op_type == "Reshape" else None
    per_row = alibi_lead is not None and len(alibi_lead) == 3 and _same_element(m, alibi_lead[0], lead)
    if not per_row and static_size(m, alibi, 0) != 1:
        return "the bias's first dim is not provably B·N (or 1)"
    folded_ctx = m.node("unflat_ctx").inputs[0]
    if per_row:  # a Shape reader of the folded context (TorchScript's _merge_heads) reads X = the alibi's rows
        m.dims[folded_ctx] = [(alibi, 0), seq, h]
    # its other dims need no proof: a bias [·, S_a, T_a] added to [X, S, T] that then unfolds to
    # [B, N, S, T] has S_a in {1, S} and T_a in {1, T} whenever the graph runs (a broadcast the other
    # way changes the element counts above: S_a > S' = 1 forces S = 1, T_a > T' = 1 forces T = 1)
    m.extra.update(past=False, alibi_rows=per_row)
    return None


def _batch_from_folds(m: Match) -> dict[str, Dim]:
    """Elements of the merge's target that are B: ``Unsqueeze(Div(Shape(v)[0], N))`` with v a folded
    value of the match (dim 0 = B·N once ``check_alibi`` proves the folds), as TorchScript writes
    BLOOM's ``_merge_heads`` (``batch_size = batch_size_and_num_heads // num_heads``)."""
    graph, q4 = m.graph, m["q4"]
    n = static_size(m, q4, 1)
    out = m.node("out")
    node = graph.producer(out.inputs[1]) if out is not None else None
    if n is None or node is None or node.op_type != "Concat":
        return {}
    folded = {m.node(f"flat_{t}").outputs[0] for t in "qkvp"} | {m.node("unflat_ctx").inputs[0]}
    known: dict[str, Dim] = {}
    for part in node.inputs:
        value = part
        step = graph.producer(value)
        while step is not None and step.op_type in ("Unsqueeze", "Cast", "Identity"):
            value = step.inputs[0]
            step = graph.producer(value)
        if step is None or step.op_type != "Div" or scalar_value(graph, step.inputs[1]) != n:
            continue
        gather = graph.producer(step.inputs[0])
        if gather is None or gather.op_type != "Gather" or graph.const(gather.inputs[1]) is None \
                or graph.const(gather.inputs[1]).reshape(-1).tolist() != [0]:
            continue
        shape = graph.producer(gather.inputs[0])
        if shape is not None and shape.op_type == "Shape" and shape.attr("start", 0) == 0 and shape.inputs[0] in folded:
            known[part] = (q4, 0)
    return known


def _same_element(m: Match, a, b, depth: int = 0) -> bool:
    """Two shape elements (``_elements``) provably equal: the same constant or piece, or the same
    computation — Unsqueeze/Squeeze/Cast/Identity, a Mul by one constant, ``Shape(v)[k]`` of provably
    equal dims (each layer of a TorchScript export computes B·N from its own input's shape)."""
    if repr(a) == repr(b):
        return True
    if isinstance(a, tuple) and isinstance(b, tuple):
        return same_dim(m, a, b)
    if not (isinstance(a, str) and isinstance(b, str)) or depth > 8:
        return False
    graph = m.graph
    ca, cb = graph.const(a), graph.const(b)
    if ca is not None or cb is not None:
        return ca is not None and cb is not None and ca.reshape(-1).tolist() == cb.reshape(-1).tolist()
    na, nb = graph.producer(a), graph.producer(b)
    if na is None or nb is None or na.op_type != nb.op_type:
        return False
    if na.op_type in ("Unsqueeze", "Squeeze", "Cast", "Identity"):
        return _same_element(m, na.inputs[0], nb.inputs[0], depth + 1) and \
            [graph.const(v) is not None and graph.const(v).tolist() for v in na.inputs[1:]] == \
            [graph.const(v) is not None and graph.const(v).tolist() for v in nb.inputs[1:]]
    if na.op_type == "Mul":
        def split(node):  # (the one-element constant factor, the other operand), or None
            for i in (0, 1):
                c = graph.const(node.inputs[i])
                if c is not None and c.size == 1 and graph.const(node.inputs[1 - i]) is None:
                    return float(c.reshape(-1)[0]), node.inputs[1 - i]
            return None
        fa, fb = split(na), split(nb)
        return fa is not None and fb is not None and fa[0] == fb[0] and _same_element(m, fa[1], fb[1], depth + 1)
    if na.op_type == "Gather":
        ka, kb = graph.const(na.inputs[1]), graph.const(nb.inputs[1])
        sa, sb = graph.producer(na.inputs[0]), graph.producer(nb.inputs[0])
        if ka is None or kb is None or ka.size != 1 or kb.size != 1 or sa is None or sb is None \
                or sa.op_type != "Shape" or sb.op_type != "Shape" or sa.attr("start", 0) or sb.attr("start", 0):
            return False
        return same_dim(m, (sa.inputs[0], int(ka.reshape(-1)[0])), (sb.inputs[0], int(kb.reshape(-1)[0])))
    return False
