"""The check of ``onnx-cached-attention`` (``passes/attention.py``): a decoder's attention as ONNX
``Attention`` (opset 23). Besides what ``check_cached_shapes`` proves for every cached attention,
it finds what the op can take itself, each only where proven, else it is left in front:

* grouped KV heads: repeat_kv (Unsqueeze at axis 2, Expand by g, Reshape [B, kv·g, T, h]) of a
  [B, kv, T, h] value goes; the op reads that value with ``kv_num_heads`` = kv (query head i reads
  KV head i // g, as repeat_kv's output does);
* the cache: k and v both ``Concat(past [B, kv, P, h], new [B, kv, L, h])`` that only the match
  reads (and a graph output) become past_key/past_value in and present_key/present_value out;
* the 3-D form: queries and new keys/values that are head splits of [B, S, N·h] values go in
  unsplit (the output is then [B, S, N·h] too, no merge after it); otherwise all 4-D (the op
  wants q, k, v of one rank).

Why the mask is raised from finfo.min (``_attention_emit._onnx_mask``): onnxruntime 1.32's CPU
kernel returns zeros for a query row whose every score is the float type's lowest value
(left padding at prefill: a padded query sees no key), where the graph's Softmax over equal
values gives the mean of v. One ulp up, those scores are still equal (s + min rounds to min
for |s| < 1e31, s + next(min) to next(min)), the row gets the mean and every other row is
unchanged. float16 is refused unless the mask provably holds only 0 and -inf (TorchScript's
Where(visible, 0, -inf)): with finfo(float16).min, s·scale + min overflows to -inf for
s·scale <= -16 and rounds in steps of 32, so the graph's answer on a fully masked row depends on
three roundings the kernel does once (measured: rows differ by up to 1.2 with or without the
raise; qwen2_fp16's prefill 7.6e-3 where the rest of the model agrees to 4.9e-4). Also fused: a mask
that provably shows key 0 to every query (``_first_key_visible``: the exporters' causal
Where(arange(T) <= arange(S) + P, 0, min) without padding, a decoder's cross mask of a model given no
encoder mask) — no row is fully masked, so the three roundings never decide a row (mbart_fp16: 4 of 4,
2.4e-4).
"""

from __future__ import annotations

import numpy as np
from graphtool.passes._attention_dims import same_dim, static_size
from graphtool.passes._attention_parts import (
    _heads,
    check_alibi,
    check_cached_shapes,
    check_projected,
    check_self_attention,
    kv_value,
)
from onnx import TensorProto

from graphtool.rewrite import Match


def check_onnx_cached(m: Match) -> str | None:
    why = check_cached_shapes(m, kernel="ONNX Attention") or _mask_and_scale(m)
    if why:
        return why
    n, h = m.extra["heads"], m.extra["head_size"]
    kv_heads, sources = n, {t: kv_value(m, t) for t in "kv"}
    if m.node("rep_k") is not None or m.node("rep_v") is not None:
        groups = [_repeat_groups(m, t, n, h) for t in "kv"]
        if None in groups:
            t = "kv"[groups.index(None)]
            return f"{t}'s Unsqueeze/Expand/Reshape is not provably repeat_kv of [B, kv, T, {h}] (each KV head g times in a row)"
        if groups[0] != groups[1]:
            return f"k and v repeat their heads {groups[0]} and {groups[1]} times"
        kv_heads = n // groups[0]
        sources = {t: m.node(f"rep_{t}").inputs[0] for t in "kv"}
        sources = {t: m.graph.producer(m.graph.producer(v).inputs[0]).inputs[0] for t, v in sources.items()}
    past = _past(m, kv_heads, h)
    if past:
        sources = {t: m[f"new_{t}"] for t in "kv"}
    split = {t: _split_of(m, v, kv_heads, h) for t, v in sources.items()}
    three_d = m.get("q3") is not None and None not in split.values() and (past or m.node("cat_k") is None)
    if three_d:
        sources = split
    m.extra.update(kv_heads=kv_heads, onnx_past=past, onnx_kv=sources, three_d=three_d)
    return None


def check_onnx_alibi(m: Match) -> str | None:
    """``check_alibi`` (BLOOM's folded heads, the ALiBi bias), then what ONNX Attention needs: a
    positive scale, and float32 unless the mask holds only 0 and -inf (as ``check_onnx_cached``)."""
    return check_alibi(m) or _mask_and_scale(m)


def _mask_and_scale(m: Match) -> str | None:
    """What ONNX Attention needs of a cached or ALiBi match: a positive scale, and float32 unless the
    mask holds only 0 and -inf."""
    if m.extra["dtype"] != TensorProto.FLOAT and m.get("mask") and not _float16_safe(m.graph, m["mask"]):
        return ("q is float16 and the mask may hold finite values: onnxruntime's Attention rounds a fully masked "
                "row's scores once where the graph rounds three times")
    if m.extra["scale"] <= 0:
        return f"the scale {m.extra['scale']:g} is not > 0 (ONNX Attention's scale)"
    return None


def check_onnx_self_attention(m: Match) -> str | None:
    """``check_self_attention`` (an encoder's self-attention, constant projections) and ``_onnx_limits``."""
    return check_self_attention(m) or _onnx_limits(m)


def check_onnx_projected(m: Match) -> str | None:
    """``check_projected`` (q, k, v [B, S, H] computed by anything: cross-attention over the
    encoder's states) and ``_onnx_limits``."""
    return check_projected(m) or _onnx_limits(m)


def _onnx_limits(m: Match) -> str | None:
    """The scale positive, and no causal Where together with a mask: the kernel writes its causal
    mask with the float's lowest value, so a row whose every visible key is padding keeps only the
    padding where the graph averages over every key (GPT-2 without a cache, left padding: rows
    differed by 2.4 with fill finfo.min, 3.0 with -1e4). Causal alone is exact: the diagonal is
    always visible, and the future weighs exp(fill) = 0 in both."""
    if m.extra["scale"] <= 0:
        return f"the scale {m.extra['scale']:g} is not > 0 (ONNX Attention's scale)"
    if m.extra["causal"] is not None and m.get("mask"):
        return "causal and a mask: a row with no visible key would keep only the padded ones in the kernel"
    return None


def _repeat_groups(m: Match, t: str, n: int, h: int) -> int | None:
    """g when Reshape(Expand(Unsqueeze(x, 2), ·), ·) is x [B, kv, T, h] with each head repeated g
    times in a row: the Expand's output provably [B, kv, g, T, h] (x's B, kv, T, h; g static,
    kv·g = N) and the Reshape's [B, N, T, h] (static N, h and T as v's: ``check_cached_shapes``;
    its B as x's, so its T is x's by the element count)."""
    axes = m.const(f"rep_axes_{t}")
    if axes is None or axes.reshape(-1).tolist() not in ([2], [-3]):
        return None
    reshape = m.node(f"rep_{t}")
    expand = m.graph.producer(reshape.inputs[0])
    x = m.graph.producer(expand.inputs[0]).inputs[0]
    wide, kv = expand.outputs[0], static_size(m, x, 1)
    if kv is None or kv <= 0 or n % kv or static_size(m, x, 3) != h:
        return None
    g = n // kv
    if static_size(m, wide, 1) != kv or static_size(m, wide, 2) != g or static_size(m, wide, 4) != h:
        return None
    if not (same_dim(m, (wide, 0), (x, 0)) and same_dim(m, (wide, 3), (x, 2)) and same_dim(m, (reshape.outputs[0], 0), (x, 0))):
        return None
    return g


def _past(m: Match, kv: int, h: int) -> bool:
    """k and v are both Concat(past [B, kv, P, h], new [B, kv, L, h]) along the length, one P and
    one L for both, and nothing the op will read is computed from them (the op's present outputs
    take the Concats' names and their readers: a Shape of the cache that sizes repeat_kv dies
    with it, one that sizes the mask would close a cycle)."""
    if m.node("cat_k") is None or m.node("cat_v") is None:
        return False
    inside = {node.id for node in m.nodes}
    batch = m.extra["q_dims"][0]
    reads = {m.get("q3") or m.get("q4"), m["mask"] if m.get("mask") else None, batch[0], m.extra["q_dims"][1][0]}
    reads |= {m[f"{part}_{t}"] for part in ("past", "new") for t in "kv"}
    for t in "kv":
        if _reaches(m, m.node(f"cat_{t}").outputs[0], inside, reads - {None}):
            return False
        for value in (m[f"past_{t}"], m[f"new_{t}"]):
            if static_size(m, value, 1) != kv or static_size(m, value, 3) != h or not same_dim(m, (value, 0), batch):
                return False
    return same_dim(m, (m["past_k"], 2), (m["past_v"], 2)) and same_dim(m, (m["new_k"], 2), (m["new_v"], 2))


def _split_of(m: Match, value: str, kv: int, h: int) -> str | None:
    """x when ``value`` is the head split Transpose(Reshape(x [B, L, kv·h], [B, L, kv, h]), 0213)."""
    transpose = m.graph.producer(value)
    if transpose is None or transpose.op_type != "Transpose" or list(transpose.attr("perm") or []) != [0, 2, 1, 3]:
        return None
    reshape = m.graph.producer(transpose.inputs[0])
    if reshape is None or reshape.op_type != "Reshape" or m.facts.shapes.rank(reshape.inputs[0]) != 3:
        return None
    return reshape.inputs[0] if _heads(m, reshape, reshape.inputs[0]) == (kv, h) else None


def _reaches(m: Match, value: str, inside: set[int], targets: set[str], limit: int = 64) -> bool:
    """Whether something outside the match computes one of ``targets`` from ``value`` (or the
    walk, ``limit`` nodes at most, cannot tell)."""
    pending, seen = [value], set()
    while pending:
        for user, _ in m.graph.uses(pending.pop()):
            if user.id in inside or user.id in seen:
                continue
            seen.add(user.id)
            if len(seen) > limit or any(o in targets for o in user.outputs):
                return True
            pending.extend(o for o in user.outputs if o)
    return False


def _zero_or_minus_inf(graph, value: str) -> bool:
    """The mask provably holds only 0 and -inf (TorchScript's Where(visible, 0, -inf), through
    shape-only ops and sums of such): a masked score is -inf in the graph and in the kernel,
    whatever the float16 rounding of the rest; a row of only -inf is 0 in the kernel and NaN in
    the graph, which the exporters' IsNaN guard (kept after the op) makes 0."""
    def allowed(v: str) -> bool:
        const = graph.const(v)
        return const is not None and bool(np.all((const == 0) | np.isneginf(const)))

    pending, seen = [value], 0
    while pending:
        v = pending.pop()
        seen += 1
        if seen > 16:
            return False
        if allowed(v):
            continue
        node = graph.producer(v)
        if node is None or node.domain not in ("", "ai.onnx"):
            return False
        if node.op_type == "Where":  # either branch's values, whatever the condition
            pending.extend(node.inputs[1:])
        elif node.op_type in ("Expand", "Reshape", "Unsqueeze", "Squeeze", "Identity", "Cast"):
            pending.append(node.inputs[0])
        elif node.op_type in ("Add", "Min"):
            pending.extend(node.inputs)
        else:
            return False
    return True


def _float16_safe(graph, mask: str) -> bool:
    """A float16 mask whose fully masked rows cannot differ: it holds only 0 and -inf
    (``_zero_or_minus_inf``), or no row of it is fully masked (``_first_key_visible``) — then every
    row has a visible score, the masked ones weigh exp(≈ -65504 - max) = 0 in the graph and in the
    kernel alike, and only float16's own rounding of the visible ones remains."""
    return _zero_or_minus_inf(graph, mask) or _first_key_visible(graph, mask)


_SHAPE_ONLY = ("Expand", "Identity")


def _through(graph, value: str, ops: tuple[str, ...] = _SHAPE_ONLY):
    """The producer of ``value`` past ops that only broadcast (an expanded row is a copy of a row)."""
    node = graph.producer(value)
    while node is not None and node.op_type in ops and node.domain in ("", "ai.onnx"):
        node = graph.producer(node.inputs[0])
    return node


def _first_key_visible(graph, mask: str) -> bool:
    """Every row of the mask shows key 0: ``Where(cond, c, fill)`` with c one finite constant and cond
    ``kv ≤ q`` (LessOrEqual(kv, q) or GreaterOrEqual(q, kv)) where q is never negative and kv is at
    most 0 at the first key — the exporters' causal mask with a cache, ``arange(T) ≤ arange(S) + P``
    (and the cross-attention mask ``arange(S) ≥ 0`` of a decoder given no encoder mask). A padding
    mask And-ed in is not this form: a row of only padding is fully masked."""
    node = _through(graph, mask)
    if node is None or node.op_type != "Where" or node.domain not in ("", "ai.onnx"):
        return False
    shown = graph.const(node.inputs[1])
    if shown is None or shown.size != 1 or not np.all(np.isfinite(shown.astype(np.float64))):
        return False
    cond = _through(graph, node.inputs[0])
    if cond is None or cond.op_type not in ("LessOrEqual", "GreaterOrEqual") or cond.domain not in ("", "ai.onnx"):
        return False
    kv, q = cond.inputs if cond.op_type == "LessOrEqual" else reversed(cond.inputs)
    return _never_negative(graph, q) and _first_at_most_zero(graph, kv)


def _never_negative(graph, value: str, depth: int = 0) -> bool:
    """An integer value ≥ 0 everywhere: constants, dims (Shape), Range(start ≥ 0, ·, step > 0), and
    Add/Unsqueeze/Squeeze/Reshape/Expand/Gather/Concat/Cast of such."""
    if depth > 12:
        return False
    const = graph.const(value)
    if const is not None:
        return const.dtype.kind in "iu" and bool(np.all(const >= 0))
    node = graph.producer(value)
    if node is None or node.domain not in ("", "ai.onnx"):
        return False
    t, ins = node.op_type, node.inputs
    if t == "Shape":
        return True
    if t == "Range":
        start, step = graph.const(ins[0]), graph.const(ins[2])
        return start is not None and step is not None and start.size == 1 and step.size == 1 \
            and float(start.reshape(-1)[0]) >= 0 and float(step.reshape(-1)[0]) > 0
    if t in ("Add", "Concat"):
        return all(_never_negative(graph, v, depth + 1) for v in ins if v)
    if t in ("Unsqueeze", "Squeeze", "Reshape", "Expand", "Identity", "Gather"):
        return _never_negative(graph, ins[0], depth + 1)
    if t == "Cast":
        return node.attr("to") in (TensorProto.INT64, TensorProto.INT32) and _never_negative(graph, ins[0], depth + 1)
    return False


def _first_at_most_zero(graph, value: str) -> bool:
    """The keys' side is ≤ 0 at the first key of every row: a constant ≤ 0 everywhere, or
    ``Unsqueeze(Range(start ≤ 0, ·, ·))`` whose range lies on the last axis."""
    const = graph.const(value)
    if const is not None:
        return const.dtype.kind in "iu" and bool(np.all(const <= 0))
    node = graph.producer(value)
    if node is None or node.op_type != "Unsqueeze" or node.domain not in ("", "ai.onnx"):
        return False
    axes = node.attr("axes")
    axes = list(axes) if axes is not None else (graph.const(node.inputs[1]).reshape(-1).tolist()
                                                 if len(node.inputs) > 1 and graph.const(node.inputs[1]) is not None else None)
    rng = graph.producer(node.inputs[0])
    if axes is None or rng is None or rng.op_type != "Range":
        return False
    rank = len(axes) + 1
    kept = [a for a in range(rank) if a not in {x % rank for x in axes}]
    start = graph.const(rng.inputs[0])
    return kept == [rank - 1] and start is not None and start.size == 1 and float(start.reshape(-1)[0]) <= 0
