"""Patterns, checks and replacement of the rotary-embedding rules (``rotary.py``).

The check proves three things the pattern cannot say:

* the halves: the two Slices (or the Split) cut x's last axis at exactly D/2, and the Concat
  puts ``-x[h:]`` before ``x[:h]`` on that axis;
* the tables: cos and sin broadcast over the heads only (shape [1|B, 1, S, D], or fewer leading
  dims), so row ``b*S + s`` of their first half is the angle of token (b, s);
* the duplicated angles: every row of cos (and sin) has equal halves — the kernel reads one half
  and uses it for both. Proven on the graph that computes them (``halves_equal``): a constant is
  compared number for number; ``Concat(f, f)`` on the last axis has them by construction; an
  elementwise op of such values (or of values constant along the last axis), a MatMul whose right
  operand has them, a Gather/Slice/Unsqueeze/Transpose/Reshape/Expand that leaves the last axis
  alone, keep them. Anything else is not proven, and the rule refuses.

The replacement never assumes a largest position: the kernel's cache is the model's own cos/sin
values, reshaped to [rows, D/2], and its position ids are the row numbers ``arange(rows)``
reshaped to cos's [1|B, S] and expanded to x's [B, S]. So the fused op computes exactly what the
graph did, for any positions, and the angles are still computed once per step (shared by every
layer after CSE). With static shapes both are constants.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto

from graphtool.ir.graph import Graph
from graphtool.passes._fuse_common import graph_opset
from graphtool.passes._ort_common import MS_DOMAIN, use_ms_domain
from graphtool.rewrite import Match, Rewrite, Var, either, op

INT64_MAX = np.iinfo(np.int64).max
DTYPES = (TensorProto.FLOAT, TensorProto.FLOAT16)

# ---------------------------------------------------------------------- patterns


def _slice(x: Any, tag: str) -> Any:
    return op.Slice(x, Var(f"{tag}_start"), Var(f"{tag}_end"), Var(f"{tag}_axes", omittable=True),
                    Var(f"{tag}_steps", omittable=True), _name=tag)


def rotate_half(x: Any) -> Any:
    """``Concat(-x[..., h:], x[..., :h])``: the halves cut by two Slices or by one Split."""
    split = op.Split(x, Var("split_sizes", omittable=True), _name="split")
    return either(op.Concat(op.Neg(_slice(x, "hi")), _slice(x, "lo"), _name="rot"),
                  op.Concat(op.Neg(split.output(1)), split.output(0), _name="rot"))


def rotate_pairs(x: Any) -> Any:
    """GPT-J's ``stack((-x[..., 1::2], x[..., ::2]), -1).flatten(-2)``: every pair (a, b) becomes (-b, a)."""
    # the Unsqueezes' axes are their own variables: a Slice's axes ([3]) and an Unsqueeze's ([-1]) are
    # different constants in a dynamo export (the check reads the Unsqueeze axes from the node)
    stacked = op.Concat(op.Unsqueeze(op.Neg(_slice(x, "odd")), Var("odd_new_axis", omittable=True)),
                        op.Unsqueeze(_slice(x, "even"), Var("even_new_axis", omittable=True)), _name="rot")
    return op.Reshape(stacked, Var("flat_shape"), _name="flat")


def apply_rotary(x: Any, rotate: Any = rotate_half) -> Any:
    """``x * cos + rotate(x) * sin`` (each product in either operand order)."""
    return op.Add(op.Mul(x, Var("cos"), _name="mul_cos"), op.Mul(rotate(x), Var("sin"), _name="mul_sin"),
                  _name="add")


FULL = apply_rotary(Var("x"))
INTERLEAVED = apply_rotary(Var("x"), rotate_pairs)
# partial rotary: the first rd channels rotate, the rest pass through
_part = _slice(Var("q"), "part")
PARTIAL = op.Concat(apply_rotary(_part), _slice(Var("q"), "pass"), _name="outer")
# GPT-J / CodeGen: the first rotary_dim channels rotate in pairs, the rest pass through
PARTIAL_INTERLEAVED = op.Concat(apply_rotary(_part, rotate_pairs), _slice(Var("q"), "pass"), _name="outer")

# ---------------------------------------------------------------------- proofs


def _ints(graph: Graph, value: str | None) -> list[int] | None:
    if value is None:
        return None
    array = graph.const(value)
    if array is None or array.dtype.kind not in "iu" or array.ndim > 1:
        return None
    return [int(v) for v in array.reshape(-1)]


def _last_axis(axis: int | None, rank: int) -> bool:
    return axis is not None and (axis == -1 or axis == rank - 1)


def slice_bounds(m: Match, tag: str, rank: int) -> tuple[int, int] | str:
    """(start, end) of a Slice on x's last axis with step 1, or the reason it is not one."""
    g = m.graph
    starts, ends = _ints(g, m.get(f"{tag}_start")), _ints(g, m.get(f"{tag}_end"))
    axes = _ints(g, m.get(f"{tag}_axes")) if m.get(f"{tag}_axes") else [rank - 1]
    steps = _ints(g, m.get(f"{tag}_steps")) if m.get(f"{tag}_steps") else [1]
    if starts is None or ends is None or axes is None or steps is None:
        return f"the {tag} Slice's starts/ends/axes/steps are not constants"
    if len(starts) != 1 or len(axes) != 1 or not _last_axis(axes[0], rank) or steps != [1]:
        return f"the {tag} Slice is not one step-1 cut of the last axis (axes {axes}, steps {steps})"
    return starts[0], ends[0]


def halves_equal(graph: Graph, shapes: Any, value: str, depth: int = 0, pairs: bool = False) -> bool:
    """Every row of ``value`` (along its last axis, of even length) has two equal halves — or, with
    ``pairs``, equal neighbours (2i, 2i+1): the interleaved kernel's one angle per pair."""
    if depth > 24:
        return False
    array = graph.const(value)
    if array is not None:
        if array.ndim == 0 or array.shape[-1] % 2:
            return array.size == 1
        if pairs:
            return bool(np.array_equal(array[..., 0::2], array[..., 1::2]))
        h = array.shape[-1] // 2
        return bool(np.array_equal(array[..., :h], array[..., h:]))
    node = graph.producer(value)
    if node is None or node.domain not in ("", "ai.onnx"):
        return False
    rank = shapes.rank(value)
    t, ins = node.op_type, node.inputs

    def last_dim_one(v: str) -> bool:
        shape = shapes.shape(v)
        return shape is not None and (len(shape) == 0 or shape[-1] == 1)

    def rec(v: str) -> bool:
        return last_dim_one(v) or halves_equal(graph, shapes, v, depth + 1, pairs)

    if t == "Concat":
        if rank is not None and _last_axis(node.attr("axis"), rank):
            return len(ins) == 2 and ins[0] == ins[1] and (not pairs or last_dim_one(ins[0]))
        return all(rec(v) for v in ins)
    if pairs and t == "Reshape":  # repeat_interleave: [..., h, 2] rows of equal pairs flattened to [..., 2h]
        out_shape, in_shape = shapes.shape(value), shapes.shape(ins[0])
        if (out_shape and in_shape and len(out_shape) == len(in_shape) - 1 and in_shape[-1] == 2
                and isinstance(in_shape[-2], int) and out_shape[-1] == 2 * in_shape[-2]):
            return halves_equal(graph, shapes, ins[0], depth + 1, False)
    if t in ("Cos", "Sin", "Cast", "Neg", "Identity", "Sqrt", "Exp", "Reciprocal", "Abs", "Tanh", "Sigmoid"):
        return rec(ins[0])
    if t in ("Mul", "Div", "Add", "Sub", "Pow", "Max", "Min"):
        return all(rec(v) for v in ins if v)
    if t == "Where":
        return last_dim_one(ins[0]) and rec(ins[1]) and rec(ins[2])
    if t == "Tile":  # a row repeated an even number of times has equal halves; odd: the row's own
        repeats = _ints(graph, ins[1])
        if not repeats or rank is None or len(repeats) != rank:
            return False
        return (repeats[-1] % 2 == 0 and not pairs) or rec(ins[0])
    if t == "MatMul":  # out[..., j] = sum_k a[..., k] b[k, j]: b's column halves carry over
        return rec(ins[1])
    if t in ("Expand", "Unsqueeze", "Squeeze", "Reshape", "Transpose", "Slice", "Gather"):
        src_rank = shapes.rank(ins[0])
        if rank is None or src_rank is None:
            return False
        if t == "Transpose":
            perm = node.attr("perm")
            if perm is None or int(perm[-1]) != src_rank - 1:
                return False
        elif t == "Gather":
            axis = node.attr("axis", 0)
            if _last_axis(axis, src_rank):
                return False
        elif t == "Slice":
            axes = _ints(graph, ins[3]) if len(ins) > 3 and ins[3] else list(range(len(_ints(graph, ins[1]) or [])))
            if axes is None or any(_last_axis(a, src_rank) for a in axes) or not axes:
                return False
        elif t in ("Reshape", "Unsqueeze", "Squeeze", "Expand"):
            out_shape, in_shape = shapes.shape(value), shapes.shape(ins[0])
            if t == "Expand" and last_dim_one(ins[0]):
                return True
            if out_shape is None or in_shape is None or not out_shape or not in_shape:
                return False
            if not (isinstance(out_shape[-1], int) and out_shape[-1] == in_shape[-1]):
                return False  # the last axis must be the same rows of the same length
        return rec(ins[0])
    return False


def _pairs(m: Match, x: str, d: int) -> str | None:
    """The interleaved rotation's two step-2 Slices, Unsqueezes to a new last axis, and the flatten back."""
    g = m.graph
    for tag, first in (("even", 0), ("odd", 1)):
        starts, ends = _ints(g, m.get(f"{tag}_start")), _ints(g, m.get(f"{tag}_end"))
        axes = _ints(g, m.get(f"{tag}_axes")) if m.get(f"{tag}_axes") else [3]
        steps = _ints(g, m.get(f"{tag}_steps")) if m.get(f"{tag}_steps") else [1]
        if starts != [first] or not ends or ends[0] < d or axes is None or len(axes) != 1 \
                or not _last_axis(axes[0], 4) or steps != [2]:
            return f"the {tag} Slice is not x[..., {first}::2]"
    for tag, slot in (("odd", 0), ("even", 1)):
        unsq = g.producer(m.node("rot").inputs[slot])
        axes_u = unsq.attr("axes")
        axes_u = [int(a) for a in axes_u] if axes_u is not None else _ints(g, unsq.inputs[1] if len(unsq.inputs) > 1 else None)
        if axes_u not in ([-1], [4]):
            return f"the {tag} half is not unsqueezed at a new last axis (axes {axes_u})"
    if not _last_axis(m.node("rot").attr("axis"), 5):
        return "the stacking Concat is not on the new last axis"
    # [B, ., ., d/2, 2] -> [B, ., ., d]: dims 0-2 of the stacked value are x's (Slices and the Concat cut
    # and join only the last axes), so the target proves the flatten when it is x's dims 0-2 and d (a 0
    # copies, a Shape(x)[i] piece is x's dim i, one -1 is fixed by the element count)
    flat = m.node("flat")
    if not m.facts.dims.target_is(m.get("flat_shape"), flat.attr("allowzero", 0), [(x, 0), (x, 1), (x, 2), d],
                                  {i: (x, i) for i in range(3)}):
        return f"the flatten's shape {_ints(g, m.get('flat_shape'))} is not provably x's [·, ·, ·, {d}]"
    return None


def check(m: Match, partial: bool, interleaved: bool = False) -> str | None:
    g, facts = m.graph, m.facts
    x = m.node("part").outputs[0] if partial else m["x"]
    q = m["q"] if partial else x
    qs = facts.shapes.shape(q)
    if qs is None or len(qs) != 4:
        return f"the rotated input has no known rank-4 shape [B, N, S, D] or [B, S, N, D] (it has {qs})"
    if facts.shapes.dtype(q) not in DTYPES or facts.shapes.dtype(m["cos"]) != facts.shapes.dtype(q):
        return "x, cos and sin are not all float32 (or all float16)"
    head = qs[3]
    if partial:
        bounds = slice_bounds(m, "part", 4)
        if isinstance(bounds, str):
            return bounds
        rest = slice_bounds(m, "pass", 4)
        if isinstance(rest, str):
            return rest
        if not isinstance(head, int) or bounds[0] != 0 or rest[0] != bounds[1] or rest[1] < head:
            return f"the rotated part {bounds} and the passed part {rest} do not split [0, {head})"
        d = bounds[1]
        if facts.shapes.rank(x) != 4 or not _last_axis(m.node("outer").attr("axis"), 4):
            return "the outer Concat is not on the last axis"
    else:
        d = head
    if not isinstance(d, int) or d % 2 or d <= 0:
        return f"the rotated size {d} is not a static even number"
    h = d // 2
    rot = m.node("rot")
    if interleaved:
        why = _pairs(m, x, d)
        if why:
            return why
    elif not _last_axis(rot.attr("axis"), 4):
        return f"the rotate-half Concat is on axis {rot.attr('axis')}, not the last"
    elif m.node("split") is not None:
        split = m.node("split")
        sizes = _ints(g, m.get("split_sizes")) if m.get("split_sizes") else list(split.attr("split") or [])
        if not _last_axis(split.attr("axis", 0), 4) or len(split.outputs) != 2 or (sizes and sizes != [h, h]):
            return f"the Split does not cut the last axis into two halves of {h}"
    else:
        lo, hi = slice_bounds(m, "lo", 4), slice_bounds(m, "hi", 4)
        for bounds in (lo, hi):
            if isinstance(bounds, str):
                return bounds
        if lo[0] != 0 or lo[1] != h or hi[0] != h or hi[1] < d:
            return f"the halves {lo} and {hi} are not [0, {h}) and [{h}, {d})"
    # the layout: [B, N, S, D] (cos/sin broadcast over axis 1), or GPT-J's [B, S, N, D] — rotated before
    # the heads move forward, cos/sin broadcast over axis 2; the kernel then reads x as [B, S, N*D]
    first = None
    for seq in (2, 1):
        tables = {}
        for table in ("cos", "sin"):
            fit = _table_fit(m, facts, table, q, [qs[0], qs[1], qs[2], d], seq)
            if isinstance(fit, str):
                break
            tables[table] = fit
        else:
            break
        first = fit if first is None else f"{first}; as [B, S, N, D]: {fit}"
    else:
        return first
    heads = qs[3 - seq]
    if (partial or seq == 1) and not isinstance(heads, int):
        return "partial rotary, or x as [B, S, N, D], needs a static number of heads (the kernel's num_heads)"
    for table in ("cos", "sin"):
        if not halves_equal(g, facts.shapes, m[table], pairs=interleaved):
            return (f"{table}'s neighbouring pairs are not provably equal (the kernel reads one angle per pair)"
                    if interleaved else f"{table}'s two halves are not provably equal (the kernel reads one half for both)")
    # every dim of a table is 1 or proven x's (``_table_fit``): the same pattern of ones is the same shape
    if [v == 1 for v in tables["cos"]] != [v == 1 for v in tables["sin"]]:
        return f"cos and sin have different shapes ({tables['cos']} and {tables['sin']})"
    static = all(isinstance(v, int) for v in (tables["cos"][0], tables["cos"][seq], qs[0], qs[seq]))
    if not static and graph_opset(g, m.ctx) < 15:
        return "dynamic shapes below opset 15 (the position ids need Shape(start, end))"
    m.extra.update(d=d, h=h, heads=heads, table=tables["cos"], static=static, q=q, partial=partial,
                   interleaved=interleaved, seq=seq)
    return None


def _table_fit(m: Match, facts: Any, table: str, q: str, xd: list[Any], seq: int = 2) -> list[Any] | str:
    """cos/sin padded to rank 4 when they fit x's layout (``seq``: x's sequence axis, the heads are the
    other of axes 1 and 2), else why not."""
    shape = facts.shapes.shape(m[table])
    if shape is None or len(shape) > 4:
        return f"{table} has no known shape of rank <= 4"
    pad = 4 - len(shape)
    padded = [1] * pad + list(shape)
    if padded[3 - seq] != 1:
        return f"{table} varies along the heads axis ({padded[3 - seq]}): the kernel has one angle table for all heads"
    if padded[3] != xd[3]:
        return f"{table}'s last dim {padded[3]} is not the rotated size {xd[3]}"
    if padded[0] != 1 and not (pad == 0 and facts.dims.equal((m[table], 0), (q, 0))):
        return f"{table}'s batch dim {padded[0]} is neither 1 nor provably x's batch {xd[0]}"
    if padded[seq] == 1 and xd[seq] != 1:
        return f"{table} holds one position for every token (seq dim 1, x has {xd[seq]})"
    if padded[seq] != 1 and not (pad <= seq and facts.dims.equal((m[table], seq - pad), (q, seq))):
        return f"{table}'s sequence dim {padded[seq]} is not provably x's {xd[seq]}"
    return padded


# ---------------------------------------------------------------------- replacement


def _cache(rw: Rewrite, value: str, h: int, tag: str, pairs: bool = False) -> str:
    """[rows, h]: the first half of each row of the angle table, or (interleaved) every other entry."""
    array = rw.graph.const(value)
    if array is not None:
        picked = array[..., 0::2] if pairs else array[..., :h]
        return rw.initializer(np.ascontiguousarray(picked.reshape(-1, h)), f"{tag}_cache")
    cut_inputs = [value, rw.initializer(np.array([0], np.int64), "zero"),
                  rw.initializer(np.array([2 * h if pairs else h], np.int64), "half"),
                  rw.initializer(np.array([-1], np.int64), "last")]
    if pairs:
        cut_inputs.append(rw.initializer(np.array([2], np.int64), "step"))
    cut = rw.add("Slice", cut_inputs, suffix=f"{tag}_half").outputs[0]
    return rw.add("Reshape", [cut, rw.initializer(np.array([-1, h], np.int64), "rows")],
                  suffix=f"{tag}_cache").outputs[0]


def _dim(rw: Rewrite, value: str, axis: int, static: Any, tag: str) -> str:
    if isinstance(static, int):
        return rw.initializer(np.array([static], np.int64), tag)
    return rw.add("Shape", [value], attrs={"start": axis, "end": axis + 1}, suffix=tag).outputs[0]


def _positions(rw: Rewrite, m: Match, cos: str, cache: str) -> str:
    """Row numbers of the cache, shaped as the tokens: arange(rows).reshape(c0, cS), expanded to [B, S]."""
    seq = m.extra["seq"]
    c0, cs = m.extra["table"][0], m.extra["table"][seq]
    q = m.extra["q"]
    qs = m.facts.shapes.shape(q)
    if m.extra["static"]:
        ids = np.arange(c0 * cs, dtype=np.int64).reshape(c0, cs)
        return rw.initializer(np.ascontiguousarray(np.broadcast_to(ids, (qs[0], qs[seq]))), "position_ids")
    pad = 4 - (m.facts.shapes.rank(cos) or 4)
    rows = rw.add("Shape", [cache], attrs={"start": 0, "end": 1}, suffix="rows").outputs[0]
    count = rw.add("Reshape", [rows, rw.initializer(np.array([], np.int64), "scalar")], suffix="count").outputs[0]
    ids = rw.add("Range", [rw.initializer(np.array(0, np.int64), "start"), count,
                           rw.initializer(np.array(1, np.int64), "step")], suffix="range").outputs[0]
    grid = rw.add("Concat", [_dim(rw, cos, 0 - pad, c0, "rows_b") if c0 != 1 else rw.initializer(np.array([1], np.int64), "one"),
                             _dim(rw, cos, seq - pad, cs, "rows_s")], attrs={"axis": 0}, suffix="grid").outputs[0]
    ids = rw.add("Reshape", [ids, grid], suffix="ids").outputs[0]
    if c0 == qs[0] and cs == qs[seq] and isinstance(c0, int):
        return ids
    tokens = rw.add("Concat", [_dim(rw, q, 0, qs[0], "batch"), _dim(rw, q, seq, qs[seq], "seq")], attrs={"axis": 0},
                    suffix="tokens").outputs[0]
    return rw.add("Expand", [ids, tokens], suffix="position_ids").outputs[0]


def emit(target: str):
    def replace(m: Match, rw: Rewrite) -> str:
        h = m.extra["h"]
        pairs = m.extra["interleaved"]
        cos_cache = _cache(rw, m["cos"], h, "cos", pairs)
        sin_cache = _cache(rw, m["sin"], h, "sin", pairs)
        positions = _positions(rw, m, m["cos"], cos_cache)
        attrs: dict[str, Any] = {"interleaved": int(pairs)}
        if m.extra["partial"]:
            attrs.update(rotary_embedding_dim=m.extra["d"], num_heads=m.extra["heads"])
        x = m.extra["q"]
        bsnd = m.extra["seq"] == 1
        if bsnd:  # [B, S, N, D] is the kernel's 3-D [B, S, N*D] (same memory); num_heads says how to cut it
            attrs["num_heads"] = m.extra["heads"]
            x = rw.add("Reshape", [x, rw.initializer(np.array([0, 0, -1], np.int64), "bs_hidden")],
                       suffix="hidden").outputs[0]
        elif target != "ort":
            attrs.pop("num_heads", None)  # only for 3-D input in the ONNX op
        if target == "ort":
            use_ms_domain(rw.ctx)
            node = rw.add("RotaryEmbedding", [x, positions, cos_cache, sin_cache], attrs=attrs, domain=MS_DOMAIN)
        else:
            node = rw.add("RotaryEmbedding", [x, cos_cache, sin_cache, positions], attrs=attrs)
        if not bsnd:
            return node.outputs[0]
        qs = m.facts.shapes.shape(m.extra["q"])
        return rw.add("Reshape", [node.outputs[0], rw.initializer(np.array([0, 0, m.extra["heads"], qs[3]], np.int64),
                                                                  "bsnd")], suffix="bsnd").outputs[0]

    return replace
