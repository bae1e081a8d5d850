"""The checks and replacements of the attention rules (``passes/attention.py``).

A check proves what the pattern cannot say — head split and merge targets, the scale, the
mask, a causal condition — and leaves what it learned in ``match.extra`` for the replacement.
It returns None to accept, or the reason it refuses (what ``--explain`` prints).
"""

from __future__ import annotations

import numpy as np

from graphtool.ir.graph import Graph
from graphtool.pass_manager import PassContext
from graphtool.passes._ort_common import MS_DOMAIN, Dims, Shapes, record_shape, shape_pieces, use_ms_domain
from graphtool.rewrite import Match, Rewrite

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


def check_self_attention(m: Match) -> str | None:
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
        if weights[0].ndim != 2 or any(w.shape != weights[0].shape for w in weights):
            return f"the projection weights have shapes {[list(w.shape) for w in weights]}, not three equal [K, H]"
        h = weights[0].shape[1]
        if any(b is not None and b.shape != (h,) for b in biases):
            return f"a projection bias is not [{h}]"
    if m.facts.shapes.dtype(m["x"]) != 1:
        return "x is not float32 (the fused kernels' type)"
    m.extra.update(weights=weights, biases=biases)
    q_in, k_in, v_in = (m.node(f"rs_{t}").inputs[0] for t in "qkv")
    return _check_core(m, q_in, [q_in, k_in, v_in])


def check_projected(m: Match) -> str | None:
    """q, k, v computed by anything (weights that are inputs, cross-attention): same hidden size."""
    if m.facts.shapes.dtype(m["q"]) != 1:
        return "q is not float32 (the fused kernels' type)"
    q_in = m.node("rs_q").inputs[0]
    return _check_core(m, q_in, [q_in, m["k"], m["v"]])


def _check_core(m: Match, q_in: str, projections: list[str]) -> str | None:
    dims = m.facts.dims
    heads = [_heads(m, m.node(f"rs_{t}"), p) for t, p in zip("qkv", projections)]
    if any(h is None for h in heads):
        t = "qkv"[[h is None for h in heads].index(True)]
        return f"the {t} head split's target is not provably [B, S, N, h] of its input"
    if len(set(heads)) != 1:
        return f"q, k and v split into different heads: {heads}"
    n, h = heads[0]
    if m.node("kt_unflat") is not None and not _swaps_last_two(m):
        return "the k transposition through Reshape/Transpose/Reshape is not provably kᵀ"
    scale = _scale(m)
    if scale is None:
        return "the scale is not a finite non-zero number"
    mask = m.get("mask")
    if mask is not None:
        r = m.facts.shapes.rank(mask)
        if r is None or r > 4 or not m.facts.shapes.is_float(mask):
            return f"the mask has rank {r} (or is not float); the kernels take rank <= 4 float"
        if m.ctx.opset("") < 10:
            return "the mask's broadcast shape needs opset >= 10"
    if m.get("nan_fill") is not None and m.scalar("nan_fill") != 0:
        return "the NaN guard after Softmax fills with something other than 0"
    guard = m.get("nan_fill") is not None and mask is not None and not _finite(m.graph, mask)
    causal = None
    if m.get("causal"):
        causal = m.scalar("fill")
        if causal is None or causal > MIN_CAUSAL_FILL:
            return f"the Where fill {causal} is not a hard mask (<= {MIN_CAUSAL_FILL:g})"
        if not _is_causal(m, m["causal"], q_in):
            return "the Where condition is not the lower-triangular causal mask sliced to [S, S]"
    ctx_reshape = m.node("ctx_reshape")
    if ctx_reshape is not None:
        ctx = ctx_reshape.inputs[0]
        copies = {j: (ctx, j) for j in range(4)}
        if not dims.target_is(ctx_reshape.inputs[1], ctx_reshape.attr("allowzero", 0), [(ctx, 0), n, (q_in, 1), h], copies):
            return "the Reshape after the product with v is not provably a no-op [B, N, S, h]"
    merged = m.node("merge").outputs[0]
    readers = [u for u, _ in m.graph.uses(merged) if u != m.node("out")]
    if m.graph.is_output(merged) or any(u.op_type != "Reshape" or u.inputs[0] != merged or _copies_head_dims(m, u)
                                        for u in readers):
        return "the head-merging Transpose is read by something other than Reshapes to [B, S, ·]"
    out = m.node("out")
    identity = dims.target_is(out.inputs[1], out.attr("allowzero", 0), [(q_in, 0), (q_in, 1), n * h],
                              {0: (q_in, 0), 1: (q_in, 1)})
    if not identity and _copies_head_dims(m, out):
        return "the head-merging Reshape copies a head dim (a literal 0 past dim 1)"
    _prove_dims(m, [m["x"]] * 3 if m.get("x") else [m["q"], m["k"], m["v"]], n, h)
    m.extra.update(heads=n, head_size=h, scale=scale, causal=causal, out_identity=identity, q_in=q_in,
                   other_readers=readers, guard=guard)
    return None


def _prove_dims(m: Match, sources: list[str], n: int, h: int) -> None:
    """Dims of the values inside the match, for Shape readers (TorchScript reads a head split's
    or the context's shape to build later Reshape targets): the head splits, then through the
    Transposes and scalar Muls/Divs that follow them; the context and its merge. Each dim is
    read from a value outside the match (x, or the q/k/v inputs): the projections keep [B, S]."""
    for t, proj in zip("qkv", sources):
        m.dims[m.node(f"rs_{t}").outputs[0]] = [(proj, 0), (proj, 1), n, h]
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
    if not dims.target_is(flat.inputs[1], flat.attr("allowzero", 0), [-1, (kh, 2), (kh, 3)], {}):
        return False
    return dims.target_is(unflat.inputs[1], unflat.attr("allowzero", 0), [(kh, 0), (kh, 1), (kh, 3), (kh, 2)], {})


def _scale(m: Match) -> float | None:
    scale = 1.0
    for name in ("pre_q", "s_q", "s_k", "s_mul"):
        if m.get(name) is not None:
            value = m.scalar(name)
            if value is None:
                return None
            scale *= value
    fused = m.node("fused_scores")
    if fused is not None:
        scale *= float(fused.attr("alpha", 1.0))
    if m.get("s_div") is not None:
        value = m.scalar("s_div")
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


# ---------------------------------------------------------------------- replacements


def _bias(m: Match, rw: Rewrite, x: str) -> str:
    """The additive mask expanded to [·, ·, S, S], as the kernels require (shared by every layer)."""
    mask, facts, graph = m["mask"], m.facts, m.graph
    shape = facts.shapes.shape(mask)
    seq = facts.dims.static(x, 1)
    if shape is not None and len(shape) == 4 and seq is not None and shape[2] == seq and shape[3] == seq:
        return mask
    key = f"{mask}|{seq}" if seq is not None else f"{mask}|{facts.dims.root(x, 1)}"
    if key in facts.expanded and graph.has_value(facts.expanded[key]):
        return facts.expanded[key]
    if seq is not None:
        target = rw.initializer(np.array([1, 1, seq, seq], dtype=np.int64), "bias_shape")
    elif m.ctx.opset("") >= 15:
        s = rw.add("Shape", [x], attrs={"start": 1, "end": 2}, suffix="seq_len").outputs[0]
        target = rw.add("Concat", [rw.initializer(np.array([1, 1], np.int64), "ones"), s, s], attrs={"axis": 0},
                        suffix="bias_shape").outputs[0]
    else:  # Shape has no start/end before opset 15
        full = rw.add("Shape", [x], suffix="shape").outputs[0]
        one, two = (rw.initializer(np.array([v], dtype=np.int64), "axis") for v in (1, 2))
        s = rw.add("Slice", [full, one, two], suffix="seq_len").outputs[0]
        target = rw.add("Concat", [rw.initializer(np.array([1, 1], np.int64), "ones"), s, s], attrs={"axis": 0},
                        suffix="bias_shape").outputs[0]
    facts.expanded[key] = rw.add("Expand", [mask, target], suffix="attention_bias").outputs[0]
    return facts.expanded[key]


def _attrs(m: Match) -> dict:
    attrs = {"num_heads": m.extra["heads"], "scale": float(m.extra["scale"])}
    if m.extra["causal"] is not None:
        attrs.update(unidirectional=1, mask_filter_value=float(m.extra["causal"]))
    return attrs


def _finish(m: Match, rw: Rewrite, fused: str) -> str:
    """Record the fused value's shape; keep the merge Reshape when its target is not [B, S, H].

    Behind a mask that may hold -inf, the sdpa NaN guard moves to the fused output: a row with no
    visible key is NaN there and 0 in the original, and nowhere else does the output hold a NaN
    the original's product with v would not.
    """
    q_in = m.extra["q_in"]
    if m.extra["guard"]:
        nan = rw.add("IsNaN", [fused], suffix="is_nan").outputs[0]
        zero = rw.initializer(np.zeros((), np.float32), "zero")
        fused = rw.add("Where", [nan, zero, fused], suffix="nan_guard").outputs[0]
    shape = m.facts.shapes.shape(q_in)
    if shape is not None:
        record_shape(m.graph, m.facts.shapes, fused, [shape[0], shape[1], m.extra["heads"] * m.extra["head_size"]], 1)
    for reader in m.extra["other_readers"]:  # same element order: only the Reshape's input changes
        m.graph.set_input(reader, 0, fused)
    if m.extra["out_identity"]:
        return fused
    out = m.node("out")
    return rw.add("Reshape", [fused, out.inputs[1]], attrs={"allowzero": out.attr("allowzero", 0)},
                  suffix="reshape").outputs[0]


def emit_attention(m: Match, rw: Rewrite) -> str:
    use_ms_domain(m.ctx)
    x, hidden = m["x"], m.extra["heads"] * m.extra["head_size"]
    weight = rw.initializer(np.concatenate(m.extra["weights"], axis=1).astype(np.float32), "qkv_weight")
    biases = [b if b is not None else np.zeros(hidden, np.float32) for b in m.extra["biases"]]
    bias = rw.initializer(np.concatenate(biases).astype(np.float32), "qkv_bias")
    inputs = [x, weight, bias] + (["", "", _bias(m, rw, x)] if m.get("mask") else [])
    return _finish(m, rw, rw.add("Attention", inputs, attrs=_attrs(m), domain=MS_DOMAIN).outputs[0])


def emit_multi_head(m: Match, rw: Rewrite) -> str:
    """MultiHeadAttention on q, k, v [B, S, H]: ``q`` before a pre-scaling Mul (Whisper scales q
    first), whose factor the ``scale`` attribute already holds; the head split reads the Mul's output."""
    use_ms_domain(m.ctx)
    q_in = m.extra["q_in"]
    inputs = [m["q"], m["k"], m["v"]] + (["", "", _bias(m, rw, q_in)] if m.get("mask") else [])
    return _finish(m, rw, rw.add("MultiHeadAttention", inputs, attrs=_attrs(m), domain=MS_DOMAIN).outputs[0])


def emit_onnx_attention(m: Match, rw: Rewrite) -> str:
    """ONNX Attention on q, k, v [B, S, H], projected by one packed MatMul (+ Add) and a Split."""
    x, hidden = m["x"], m.extra["heads"] * m.extra["head_size"]
    weight = rw.initializer(np.concatenate(m.extra["weights"], axis=1).astype(np.float32), "qkv_weight")
    packed = rw.add("MatMul", [x, weight], suffix="qkv").outputs[0]
    if any(b is not None for b in m.extra["biases"]):
        biases = [b if b is not None else np.zeros(hidden, np.float32) for b in m.extra["biases"]]
        bias = rw.initializer(np.concatenate(biases).astype(np.float32), "qkv_bias")
        packed = rw.add("Add", [packed, bias], suffix="qkv_bias").outputs[0]
    sizes = rw.initializer(np.array([hidden] * 3, np.int64), "qkv_split")
    qkv = list(rw.add("Split", [packed, sizes], 3, {"axis": -1}, suffix="qkv_split").outputs)
    attrs = {"q_num_heads": m.extra["heads"], "kv_num_heads": m.extra["heads"], "scale": float(m.extra["scale"])}
    if m.extra["causal"] is not None:
        attrs["is_causal"] = 1
    inputs = qkv + ([_bias(m, rw, x)] if m.get("mask") else [])
    return _finish(m, rw, rw.add("Attention", inputs, attrs=attrs).outputs[0])
