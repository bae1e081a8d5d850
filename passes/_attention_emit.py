"""The replacements of the attention rules (``passes/attention.py``): what a match becomes once its
checks (``_attention_parts.py``) proved it — com.microsoft Attention / MultiHeadAttention, ONNX
Attention — with the mask turned into the fused op's bias or key padding and the lengths a
cached attention needs built from Shape pieces.
"""

from __future__ import annotations

import numpy as np
from graphtool.passes._attention_dims import Dim, same_dim
from graphtool.passes._attention_parts import kv_value
from graphtool.passes._ort_common import MS_DOMAIN, record_shape, use_ms_domain
from onnx import TensorProto, helper

from graphtool.rewrite import Match, Rewrite


def _dim_tensor(rw: Rewrite, value: str, axis: int, suffix: str) -> str:
    """A [1] int64 tensor holding dim ``axis`` of ``value`` (nodes named ``suffix``: unique per rewrite)."""
    if rw.ctx.opset("") >= 15:
        return rw.add("Shape", [value], attrs={"start": axis, "end": axis + 1}, suffix=suffix).outputs[0]
    full = rw.add("Shape", [value], suffix=f"{suffix}_shape").outputs[0]  # no start/end before opset 15
    index = rw.initializer(np.array([axis], dtype=np.int64), "axis")
    return rw.add("Gather", [full, index], attrs={"axis": 0}, suffix=suffix).outputs[0]


def _length(m: Match, rw: Rewrite, pieces: list[tuple[str, int]], suffix: str) -> str:
    """A [1] int64 tensor: the sum of the dims ``pieces`` (a static number when all are known)."""
    static = [m.facts.dims.static(*p) for p in pieces]
    if all(s is not None for s in static):
        return rw.initializer(np.array([sum(static)], dtype=np.int64), suffix)
    total = _dim_tensor(rw, *pieces[0], suffix=f"{suffix}0")
    for i, piece in enumerate(pieces[1:], 1):
        total = rw.add("Add", [total, _dim_tensor(rw, *piece, suffix=f"{suffix}{i}")], suffix=f"{suffix}_sum{i}").outputs[0]
    return total


def _bias(m: Match, rw: Rewrite, q_seq: tuple[str, int], kv: list[tuple[str, int]], whole: Dim | None = None) -> str:
    """The additive mask expanded to [·, ·, S, T], as the kernels require (shared by every layer):
    S the query length (the dim ``q_seq``), T the key length, the sum of the dims ``kv`` (the new
    keys', plus the past's when there is one). Cross-attention has T != S: expanding to [S, S]
    wrote a model that fails whenever decoder and encoder lengths differ."""
    mask, facts, graph = m["mask"], m.facts, m.graph
    dims = facts.dims
    rank = facts.shapes.rank(mask)
    whole = whole or (kv[0] if len(kv) == 1 else None)  # a value whose dim is T, for the proof only
    if rank == 4 and whole is not None and same_dim(m, (mask, 2), q_seq) and same_dim(m, (mask, 3), whole):
        return mask
    key = "|".join([mask, repr(dims.root(*q_seq))] + [repr(dims.root(*p)) for p in kv])
    if key in facts.expanded and graph.has_value(facts.expanded[key]):
        return facts.expanded[key]
    q_len = _length(m, rw, [q_seq], "q_len")
    kv_len = q_len if len(kv) == 1 and dims.equal(kv[0], q_seq) else _length(m, rw, kv, "kv_len")
    if graph.const(q_len) is not None and graph.const(kv_len) is not None:
        sizes = [1, 1, int(graph.const(q_len)[0]), int(graph.const(kv_len)[0])]
        target = rw.initializer(np.array(sizes, dtype=np.int64), "bias_shape")
    else:
        ones = rw.initializer(np.array([1, 1], np.int64), "ones")
        target = rw.add("Concat", [ones, q_len, kv_len], attrs={"axis": 0}, suffix="bias_shape").outputs[0]
    facts.expanded[key] = rw.add("Expand", [mask, target], suffix="attention_bias").outputs[0]
    return facts.expanded[key]


def _onnx_mask(m: Match, rw: Rewrite, q_seq: tuple[str, int], kv: list[tuple[str, int]], whole: Dim | None = None) -> str:
    """``_bias`` for ONNX Attention, its entries at the float type's lowest value raised one ulp
    (shared by every layer): onnxruntime 1.32's CPU kernel zeroes a row whose scores are all that
    value, where the graph's Softmax over equal values averages v. One ulp up they stay equal
    (s + min is min for |s| < 1e31), so that row, and every other, is the graph's."""
    bias = _bias(m, rw, q_seq, kv, whole)
    key = f"{bias}|raised"
    if key in m.facts.expanded and m.graph.has_value(m.facts.expanded[key]):
        return m.facts.expanded[key]
    dtype = helper.tensor_dtype_to_np_dtype(m.extra.get("dtype", TensorProto.FLOAT))
    lowest = np.array(np.finfo(dtype).min, dtype)
    is_lowest = rw.add("Equal", [bias, rw.initializer(lowest, "lowest")], suffix="mask_is_lowest").outputs[0]
    raised = rw.initializer(np.nextafter(lowest, np.array(0, dtype)), "lowest_raised")
    m.facts.expanded[key] = rw.add("Where", [is_lowest, raised, bias], suffix="mask_raised").outputs[0]
    return m.facts.expanded[key]


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
    dtype = m.extra.get("dtype", TensorProto.FLOAT)
    (b, b_axis), (s, s_axis) = m.extra["q_dims"]
    b_shape, s_shape = m.facts.shapes.shape(b), m.facts.shapes.shape(s)
    dims = [b_shape[b_axis] if b_shape else None, s_shape[s_axis] if s_shape else None,
            m.extra["heads"] * m.extra["head_size"]]
    record_shape(m.graph, m.facts.shapes, fused, dims, dtype)
    if m.extra["guard"]:  # shapes recorded too: later proofs walk through the guard to the fused op
        nan = rw.add("IsNaN", [fused], suffix="is_nan").outputs[0]
        record_shape(m.graph, m.facts.shapes, nan, dims, TensorProto.BOOL)
        zero = rw.initializer(np.zeros((), helper.tensor_dtype_to_np_dtype(dtype)), "zero")
        fused = rw.add("Where", [nan, zero, fused], suffix="nan_guard").outputs[0]
        record_shape(m.graph, m.facts.shapes, fused, dims, dtype)
    if m.get("empty_rows") is not None:  # the rows no key was visible to stay 0, now after the merge
        rows = m["empty_rows"]
        if m.ctx.opset("") >= 13:
            axes = rw.initializer(np.array([1], np.int64), "empty_rows_axes")
            rows = rw.add("Squeeze", [rows, axes], suffix="empty_rows").outputs[0]
        else:
            rows = rw.add("Squeeze", [rows], attrs={"axes": [1]}, suffix="empty_rows").outputs[0]
        zero = rw.initializer(np.zeros((), helper.tensor_dtype_to_np_dtype(dtype)), "empty_fill")
        fused = rw.add("Where", [rows, zero, fused], suffix="empty_rows_where").outputs[0]
        record_shape(m.graph, m.facts.shapes, fused, dims, dtype)
    for reader in m.extra["other_readers"]:  # same element order: only the Reshape's input changes
        m.graph.set_input(reader, 0, fused)
    if m.extra["out_identity"]:
        return fused
    out = m.node("out")
    return rw.add("Reshape", [fused, out.inputs[1]], attrs={"allowzero": out.attr("allowzero", 0)},
                  suffix="reshape").outputs[0]


def emit_attention(m: Match, rw: Rewrite) -> str:
    use_ms_domain(m.ctx)
    x = m["x"]
    widths = [w.shape[1] for w in m.extra["weights"]]
    weight = rw.initializer(np.concatenate(m.extra["weights"], axis=1).astype(np.float32), "qkv_weight")
    biases = [b if b is not None else np.zeros(n, np.float32) for b, n in zip(m.extra["biases"], widths)]
    bias = rw.initializer(np.concatenate(biases).astype(np.float32), "qkv_bias")
    inputs = [x, weight, bias] + (["", "", _bias(m, rw, (x, 1), [(x, 1)])] if m.get("mask") else [])
    attrs = _attrs(m)
    if len(set(widths)) > 1:
        attrs["qkv_hidden_sizes"] = widths
    return _finish(m, rw, rw.add("Attention", inputs, attrs=attrs, domain=MS_DOMAIN).outputs[0])


def emit_multi_head(m: Match, rw: Rewrite) -> str:
    """MultiHeadAttention on q, k, v [B, S, H]: ``q`` before a pre-scaling Mul (Whisper scales q
    first), whose factor the ``scale`` attribute already holds; the head split reads the Mul's output."""
    use_ms_domain(m.ctx)
    q_in = m.extra["q_in"]
    inputs = [m["q"], m["k"], m["v"]] + (["", "", _bias(m, rw, (q_in, 1), [(m["k"], 1)])] if m.get("mask") else [])
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
    inputs = qkv + ([_onnx_mask(m, rw, (x, 1), [(x, 1)])] if m.get("mask") else [])
    return _finish(m, rw, rw.add("Attention", inputs, attrs=attrs).outputs[0])


def emit_onnx_projected(m: Match, rw: Rewrite) -> str:
    """ONNX Attention on q, k, v [B, S, H] as they are (cross-attention: k and v from the
    encoder); ``q`` before a pre-scaling Mul, whose factor the scale holds."""
    n, q_in = m.extra["heads"], m.extra["q_in"]
    attrs = {"q_num_heads": n, "kv_num_heads": n, "scale": float(m.extra["scale"])}
    if m.extra["causal"] is not None:
        attrs["is_causal"] = 1
    inputs = [m["q"], m["k"], m["v"]] + ([_onnx_mask(m, rw, (q_in, 1), [(m["k"], 1)])] if m.get("mask") else [])
    return _finish(m, rw, rw.add("Attention", inputs, attrs=attrs).outputs[0])


def emit_onnx_cached(m: Match, rw: Rewrite) -> str:
    """ONNX Attention on what ``check_onnx_cached`` found: q, k, v all 3-D (unsplit, the output
    [B, S, N·h]) or all 4-D (the output merged back: Transpose, Reshape [0, 0, N·h]); k and v
    before repeat_kv with kv_num_heads; the cache as past/present under the Concats' names."""
    n, h, kv = m.extra["heads"], m.extra["head_size"], m.extra["kv_heads"]
    three_d, past, sources = m.extra["three_d"], m.extra["onnx_past"], m.extra["onnx_kv"]
    if three_d:
        query = m["q3"]
    else:
        query = m.node("q_head").outputs[0] if m.get("q3") else m["q4"]
    length = 1 if three_d else 2
    inputs = [query, sources["k"], sources["v"]]
    if m.get("mask"):
        pieces = [(m["past_k"], 2), (sources["k"], length)] if past else [(sources["k"], length)]
        inputs.append(_onnx_mask(m, rw, m.extra["q_dims"][1], pieces, whole=(kv_value(m, "k"), 2)))
    attrs = {"q_num_heads": n, "kv_num_heads": kv, "scale": float(m.extra["scale"])}
    if past:
        inputs = (inputs + [""])[:4] + [m["past_k"], m["past_v"]]
        present = [rw.take_over(m.node(f"cat_{t}").outputs[0]) for t in "kv"]
        node = rw.add("Attention", inputs, [rw.graph.fresh_name(f"{rw.name}_out"), *present], attrs=attrs)
    else:
        node = rw.add("Attention", inputs, attrs=attrs)
    fused = node.outputs[0]
    if not three_d:
        merged = rw.add("Transpose", [fused], attrs={"perm": [0, 2, 1, 3]}, suffix="merge").outputs[0]
        target = rw.initializer(np.array([0, 0, n * h], np.int64), "merged_shape")
        fused = rw.add("Reshape", [merged, target], suffix="merged").outputs[0]
    return _finish(m, rw, fused)


def emit_cached(m: Match, rw: Rewrite) -> str:
    """MultiHeadAttention on q [B, S, N·h] and k, v [B, N, T, h] as they are (the kernel's 4-D
    key/value form: T may be anything — past and new keys, encoder states). Queries that are
    not a head split of a [B, S, N·h] value get the merge back: Transpose, Reshape [0, 0, N·h]."""
    use_ms_domain(m.ctx)
    n, h = m.extra["heads"], m.extra["head_size"]
    if m.get("q3"):
        query = m["q3"]
    else:
        merged = rw.add("Transpose", [m["q4"]], attrs={"perm": [0, 2, 1, 3]}, suffix="query_merge").outputs[0]
        target = rw.initializer(np.array([0, 0, n * h], np.int64), "query_shape")
        query = rw.add("Reshape", [merged, target], suffix="query").outputs[0]
    q_seq, k4 = m.extra["q_dims"][1], kv_value(m, "k")
    if m.extra["past"]:  # the cache goes in, the present comes out under the Concats' names
        kv = [(m["past_k"], 2), (m["k3"], 1)]
        bias = _bias(m, rw, q_seq, kv, whole=(k4, 2)) if m.get("mask") else ""
        present = [rw.take_over(m.node(f"cat_{t}").outputs[0]) for t in "kv"]
        out = rw.graph.fresh_name(f"{rw.name}_out")
        inputs = [query, m["k3"], m["v3"], "", "", bias, m["past_k"], m["past_v"]]
        node = rw.add("MultiHeadAttention", inputs, [out, *present], attrs=_attrs(m), domain=MS_DOMAIN)
        return _finish(m, rw, node.outputs[0])
    bias = ["", "", _bias(m, rw, q_seq, [(k4, 2)])] if m.get("mask") else []
    node = rw.add("MultiHeadAttention", [query, k4, kv_value(m, "v")] + bias, attrs=_attrs(m), domain=MS_DOMAIN)
    return _finish(m, rw, node.outputs[0])


def _alibi_bias(m: Match, rw: Rewrite, onnx_mask: bool = False) -> str:
    """The alibi as [B, N, 1|S, T] (or [1, 1, ·, ·] when it has one row) plus the mask expanded to
    [·, ·, S, T] (for ONNX Attention, its finfo.min raised one ulp: ``_onnx_mask``), or the alibi
    expanded to [·, ·, S, T] when there is no mask."""
    n, q4, k4 = m.extra["heads"], m["q4"], kv_value(m, "k")
    alibi = m["alibi"]
    if m.extra["alibi_rows"]:
        lead = [_dim_tensor(rw, q4, 0, "alibi_batch"), rw.initializer(np.array([n, -1], np.int64), "alibi_heads")]
    else:
        lead = [rw.initializer(np.array([1, 1, -1], np.int64), "alibi_one")]
    target = rw.add("Concat", [*lead, _dim_tensor(rw, alibi, 2, "alibi_keys")], attrs={"axis": 0},
                    suffix="alibi_shape").outputs[0]
    alibi4 = rw.add("Reshape", [alibi, target], suffix="alibi4").outputs[0]
    q_seq = m.extra["q_dims"][1]
    if m.get("mask"):
        spread = (_onnx_mask if onnx_mask else _bias)(m, rw, q_seq, [(k4, 2)])
        return rw.add("Add", [alibi4, spread], suffix="attention_bias").outputs[0]
    sizes = [rw.initializer(np.array([1, 1], np.int64), "ones"), _dim_tensor(rw, *q_seq, "q_len"),
             _dim_tensor(rw, k4, 2, "kv_len")]
    return rw.add("Expand", [alibi4, rw.add("Concat", sizes, attrs={"axis": 0}, suffix="bias_shape").outputs[0]],
                  suffix="alibi_spread").outputs[0]


def _query_merged(m: Match, rw: Rewrite, value: str, tag: str) -> str:
    n, h = m.extra["heads"], m.extra["head_size"]
    merged = rw.add("Transpose", [value], attrs={"perm": [0, 2, 1, 3]}, suffix=f"{tag}_merge").outputs[0]
    return rw.add("Reshape", [merged, rw.initializer(np.array([0, 0, n * h], np.int64), f"{tag}_shape")],
                  suffix=tag).outputs[0]


def emit_alibi(m: Match, rw: Rewrite) -> str:
    """MultiHeadAttention on BLOOM's folded attention (``check_alibi``): the queries merged back to
    [B, S, N·h], k and v [B, N, T, h] as they are, attention_bias = alibi + mask (``_alibi_bias``)."""
    use_ms_domain(m.ctx)
    query = _query_merged(m, rw, m["q4"], "query")
    bias = _alibi_bias(m, rw)
    node = rw.add("MultiHeadAttention", [query, kv_value(m, "k"), kv_value(m, "v"), "", "", bias], attrs=_attrs(m),
                  domain=MS_DOMAIN)
    return _finish(m, rw, node.outputs[0])


def emit_onnx_alibi(m: Match, rw: Rewrite) -> str:
    """ONNX Attention on BLOOM's folded attention: q, k, v [B, N, ·, h] as they are (4-D), attn_mask =
    alibi + the raised mask, the [B, N, S, h] output merged back to [B, S, N·h]."""
    n = m.extra["heads"]
    attrs = {"q_num_heads": n, "kv_num_heads": n, "scale": float(m.extra["scale"])}
    node = rw.add("Attention", [m["q4"], kv_value(m, "k"), kv_value(m, "v"), _alibi_bias(m, rw, onnx_mask=True)],
                  attrs=attrs)
    return _finish(m, rw, _query_merged(m, rw, node.outputs[0], "merged"))
