"""Scaled dot-product attention subgraphs → one attention op.

Exporters write multi-head self-attention as some twenty ops: three projections, three
head-splitting Reshape+Transpose pairs, Q·Kᵀ, a scale, an additive or causal mask, Softmax, the
product with V and a head-merging Transpose+Reshape. One fused kernel does all of it without
materializing the [B, N, S, S] scores twice, and packs the three projections into one GEMM.

The rule, anchored on each ``Softmax`` and walking producers/consumers only::

    proj_i = x_i @ W_i (+ b_i)                  i ∈ q, k, v  — or the three thirds of one Split
    h_i    = Transpose(Reshape(proj_i, [B, S, N, h]))       perms (0,2,1,3) for q, v; (0,2,3,1) for k
    s      = (h_q @ h_k) / c | * c                 (FusedMatMul with transB/alpha accepted too)
    s      = s + mask | Where(causal, s, fill)     (optional, in either order)
    y      = Reshape(Transpose(Softmax(s, -1) @ h_v, (0,2,1,3)), [B, S, N*h])

Checks (anything not proven leaves the subgraph alone):

1. every intermediate value is read only by the next op of the pattern and is no graph output;
2. x has rank 3 (declared, or by ONNX shape inference), the projections' weights are constant
   2-D [K, H] and their biases constant [H]; N·h = H; all three heads agree on N and h;
3. each head-splitting Reshape target provably is [x.dim0, x.dim1, N, h] — literal 0s copying the
   input's dims, dims traced back through Shape/Gather/Concat to the same dims of x, static dims
   equal to x's, and at most one -1 (``passes._ort_common.Dims``);
4. the head-merging Reshape target provably is [x.dim0, x.dim1, H] — then the fused op writes its
   value directly — or else it is kept after the fused op (its data has the same element order);
5. Softmax is over the last axis; the scale is a scalar constant;
6. an additive mask may broadcast (rank <= 4): the fused op gets it expanded to [·, ·, S, S], which
   is what ORT's kernels require. A causal ``Where`` is accepted only when its condition is the
   lower-triangular constant sliced to [0:S, 0:S] and its fill <= -1e4 (its exp underflows to 0
   exactly as the kernel's own causal mask does).

What it emits:

* ``--target ort`` (``fuse-attention-ort``): ``com.microsoft.Attention`` with the packed [K, 3H]
  weight when q, k, v project the same x with constant weights; otherwise
  ``com.microsoft.MultiHeadAttention`` on the three projections.
* ``--target onnx`` (``fuse-attention``): ONNX ``Attention`` (opset >= 23) on the three
  projections — packed into one MatMul + Split when their weights are constant — with
  ``is_causal`` / ``attn_mask``; models below opset 23 are left alone (see
  ``graphtool.opset_upgrade`` to raise the opset first).

Known limit: if an additive mask's batch is larger than the input's batch of 1 (the original
Add would broadcast the batch up), onnxruntime rejects the fused model rather than broadcasting.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from graphtool.ir.graph import Graph, Node
from graphtool.pass_manager import Pass, PassContext, PassResult, register
from graphtool.passes._fuse_common import Namer, drop_dead_constants, only_feeds
from graphtool.passes._ort_common import (
    MS_DOMAIN,
    Dims,
    Shapes,
    compose_perm,
    contrib_allowed,
    float_scalar,
    is_standard,
    producer_op,
    record_shape,
    shape_pieces,
    transpose_perm,
    use_ms_domain,
)

Q_PERM = [0, 2, 1, 3]
K_PERM = [0, 2, 3, 1]
MIN_CAUSAL_FILL = -1e4


@dataclass
class Projection:
    """proj = x @ W (+ b), or one third of a packed projection split along the last axis."""

    x: str
    weight: np.ndarray | None  # [K, H] when constant
    bias: np.ndarray | None  # [H] when constant (None: no bias, or not constant — see has_bias)
    out: str  # the [B, S, H] value the head split reads
    nodes: list[Node] = field(default_factory=list)
    matmul_out: str = ""  # x @ W, for MultiHeadAttention which takes the bias separately


@dataclass
class Match:
    q: Projection
    k: Projection
    v: Projection
    heads: int
    head_size: int
    hidden: int
    scale: float
    mask: str | None
    causal_fill: float | None
    nodes: list[Node]  # the attention core, without the projections (those are in q/k/v.nodes)
    out_reshapes: list[tuple[Node, bool]]  # head-merging Reshapes, and whether each is an identity
    dtype: np.dtype
    leftovers: list[str] = field(default_factory=list)


class _Matcher:
    def __init__(self, graph: Graph, ctx: PassContext):
        self.graph = graph
        self.ctx = ctx
        self.shapes = Shapes(graph, ctx)
        self.dims = Dims(graph, self.shapes)

    # ------------------------------------------------------------------ helpers

    def _single(self, value: str, reader: Node) -> bool:
        return only_feeds(self.graph, value, reader)

    def _unwind_transposes(self, value: str, reader: Node, nodes: list[Node]) -> tuple[str, list[int], Node] | None:
        """From a head tensor back through Transposes to its Reshape: (reshape output, composite
        perm, the Reshape node)."""
        perm: list[int] | None = None
        for _ in range(3):
            node = producer_op(self.graph, value, "Transpose", "Reshape")
            if node is None or not self._single(value, reader):
                return None
            if node.op_type == "Reshape":
                return value, perm if perm is not None else [0, 1, 2, 3], node
            p = transpose_perm(node, 4)
            if p is None or len(p) != 4:
                return None
            perm = p if perm is None else compose_perm(p, perm)
            nodes.append(node)
            reader, value = node, node.inputs[0]
        return None

    def _projection(self, value: str, reader: Node) -> Projection | None:
        """proj → (x, W, b): Add(MatMul(x, W), b) in either operand order, or bare MatMul."""
        graph = self.graph
        if not self._single(value, reader):
            return None
        node = graph.producer(value)
        nodes: list[Node] = []
        bias = None
        matmul_out = value
        if node is not None and is_standard(node) and node.op_type == "Add" and len(node.inputs) == 2:
            for mm_value, b_value in (node.inputs, node.inputs[::-1]):
                mm = producer_op(graph, mm_value, "MatMul")
                b = graph.const(b_value)
                if mm is not None and b is not None and b.ndim == 1 and self._single(mm_value, node):
                    nodes, bias, node, matmul_out = [node], b, mm, mm_value
                    break
            else:
                return None
        if node is None or not is_standard(node) or node.op_type != "MatMul":
            return None
        w = graph.const(node.inputs[1])
        if w is not None and w.ndim != 2:
            return None
        if w is not None and bias is not None and bias.shape[0] != w.shape[1]:
            return None
        nodes.append(node)
        return Projection(node.inputs[0], w, bias, value, nodes, matmul_out)

    def _packed(self, values: list[str], readers: list[Node]) -> list[Projection] | None:
        """q, k, v as the three equal thirds of Split(proj, axis=-1) of one projection."""
        graph = self.graph
        split = producer_op(graph, values[0], "Split")
        if split is None or split.outputs != values or len(values) != 3:
            return None
        if any(not self._single(v, r) for v, r in zip(values, readers)):
            return None
        r = self.shapes.rank(split.inputs[0])
        axis = split.attr("axis", 0)
        if r != 3 or axis not in (2, -1):
            return None
        proj = self._projection(split.inputs[0], split)
        if proj is None or proj.weight is None:
            return None
        hidden3 = proj.weight.shape[1]
        sizes = None
        if len(split.inputs) > 1 and split.inputs[1]:
            sizes = graph.const(split.inputs[1])
            sizes = None if sizes is None else [int(s) for s in sizes.reshape(-1)]
        elif split.attr("split") is not None:
            sizes = [int(s) for s in split.attr("split")]
        if hidden3 % 3 or (sizes is not None and sizes != [hidden3 // 3] * 3):
            return None
        h = hidden3 // 3
        out = []
        for i, value in enumerate(values):
            b = proj.bias[i * h:(i + 1) * h] if proj.bias is not None else None
            nodes = [split, *proj.nodes] if i == 0 else []
            out.append(Projection(proj.x, proj.weight[:, i * h:(i + 1) * h], b, value, nodes))
        return out

    def _heads(self, reshape: Node, proj_out: str, x: str) -> tuple[int, int] | None:
        """(N, h) when the Reshape target provably splits [B, S, H] into [B, S, N, h]."""
        graph = self.graph
        pieces = shape_pieces(graph, self.shapes, reshape.inputs[1])
        hidden = self.dims.static(proj_out, 2)
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
        expected = [(x, 0), (x, 1), n, h]
        copies = {0: (proj_out, 0), 1: (proj_out, 1)}
        if not self.dims.target_is(reshape.inputs[1], reshape.attr("allowzero", 0), expected, copies):
            return None
        return n, h

    def _leads_to_scores(self, value: str) -> bool:
        """``value`` is Q·Kᵀ behind at most a few Where/Cast/Div/Mul ops (the mask never is)."""
        for _ in range(4):
            node = self.graph.producer(value)
            if node is None:
                return False
            if (is_standard(node) and node.op_type == "MatMul") or (node.domain == MS_DOMAIN and node.op_type == "FusedMatMul"):
                a, b = node.inputs
                return self.graph.const(a) is None and self.graph.const(b) is None and self.shapes.rank(value) == 4
            if not is_standard(node) or node.op_type not in ("Where", "Cast", "Div", "Mul"):
                return False
            value = node.inputs[1] if node.op_type == "Where" else node.inputs[0]
            if node.op_type == "Mul" and self.graph.const(value) is not None:
                value = node.inputs[1]
        return False

    def _skip_noop_casts(self, value: str, reader: Node, nodes: list[Node]) -> tuple[Node, str]:
        """Step over Casts to float of a value that already is float (TorchScript emits them)."""
        while True:
            cast = producer_op(self.graph, value, "Cast")
            if cast is None or cast.attr("to") != 1 or not self.shapes.is_float(cast.inputs[0]):
                return reader, value
            if not self._single(value, reader):
                return reader, value
            nodes.append(cast)
            reader, value = cast, cast.inputs[0]

    # ------------------------------------------------------------------ the rule

    def match(self, softmax: Node) -> Match | None:
        graph, shapes = self.graph, self.shapes
        opset = self.ctx.opset("")
        axis = softmax.attr("axis", -1 if opset >= 13 else 1)
        if axis not in (-1, 3) or not softmax.outputs:
            return None
        nodes: list[Node] = [softmax]
        leftovers: list[str] = []
        reader, value = softmax, softmax.inputs[0]
        mask = None
        causal: tuple[str, float] | None = None
        for _ in range(2):  # mask Add and causal Where, in either order
            node = producer_op(graph, value, "Add", "Where")
            if node is None or not self._single(value, reader):
                break
            if node.op_type == "Where" and causal is None and len(node.inputs) == 3:
                fill = float_scalar(graph, node.inputs[2])
                if fill is None or fill > MIN_CAUSAL_FILL:
                    return None
                causal = (node.inputs[0], fill)
                leftovers.append(node.inputs[2])
                nodes.append(node)
                reader, value = node, node.inputs[1]
            elif node.op_type == "Add" and mask is None and len(node.inputs) == 2:
                sides = [(s_, m_) for s_, m_ in (node.inputs, node.inputs[::-1]) if self._leads_to_scores(s_)]
                if len(sides) != 1:
                    return None  # neither or both operands look like the scores: ambiguous
                scores_side = sides[0]
                mask = scores_side[1]
                nodes.append(node)
                reader, value = node, scores_side[0]
            else:
                break
        reader, value = self._skip_noop_casts(value, reader, nodes)
        scale = 1.0
        node = producer_op(graph, value, "Div", "Mul")
        if node is not None and self._single(value, reader) and len(node.inputs) == 2:
            if node.op_type == "Div":
                c = float_scalar(graph, node.inputs[1])
                s_value = node.inputs[0]
                scale = 1.0 / c if c else None
                leftovers.append(node.inputs[1])
            else:
                c0, c1 = float_scalar(graph, node.inputs[0]), float_scalar(graph, node.inputs[1])
                s_value, scale = (node.inputs[0], c1) if c1 is not None else (node.inputs[1], c0)
                leftovers.append(node.inputs[1] if c1 is not None else node.inputs[0])
            if scale is None or not np.isfinite(scale):
                return None
            nodes.append(node)
            reader, value = node, s_value
            reader, value = self._skip_noop_casts(value, reader, nodes)
        qk = graph.producer(value)
        if qk is None or not self._single(value, reader):
            return None
        k_swap = False
        if qk.op_type == "FusedMatMul" and qk.domain == MS_DOMAIN:
            if qk.attr("transA", 0) or qk.attr("transBatchA", 0) or qk.attr("transBatchB", 0):
                return None
            k_swap = bool(qk.attr("transB", 0))
            scale *= float(qk.attr("alpha", 1.0))
        elif not (is_standard(qk) and qk.op_type == "MatMul"):
            return None
        nodes.append(qk)

        # ---- heads
        q_head = self._unwind_transposes(qk.inputs[0], qk, nodes)
        k_head = self._unwind_transposes(qk.inputs[1], qk, nodes)
        probs = softmax.outputs[0]
        pv = graph.consumers(probs)
        if len(pv) != 1 or not is_standard(pv[0]) or pv[0].op_type != "MatMul" or pv[0].inputs[0] != probs:
            return None
        pv = pv[0]
        if not self._single(probs, pv):
            return None
        nodes.append(pv)
        v_head = self._unwind_transposes(pv.inputs[1], pv, nodes)
        if q_head is None or k_head is None or v_head is None:
            return None
        k_perm = k_head[1] if not k_swap else compose_perm(k_head[1], [0, 1, 3, 2])
        if q_head[1] != Q_PERM or k_perm != K_PERM or v_head[1] != Q_PERM:
            return None
        reshapes = [q_head[2], k_head[2], v_head[2]]
        if len({r.id for r in reshapes}) != 3:
            return None
        nodes += reshapes
        proj_values = [r.inputs[0] for r in reshapes]
        projs = self._packed(proj_values, reshapes)
        if projs is None:
            projs = [self._projection(v, r) for v, r in zip(proj_values, reshapes)]
            if any(p is None for p in projs):
                return None
        q, k, v = projs
        if q.x != k.x or k.x != v.x:
            return None  # self-attention only: the sequence dims of q and k must be the same
        x = q.x
        if shapes.rank(x) != 3:
            return None
        heads = [self._heads(r, p.out, x) for r, p in zip(reshapes, projs)]
        if any(h is None for h in heads) or len(set(heads)) != 1:
            return None
        n, h = heads[0]
        hidden = n * h

        # ---- output: Transpose(0,2,1,3) then Reshape to [B, S, H]
        ctx_value = pv.outputs[0]
        users = graph.consumers(ctx_value)
        if len(users) != 1 or not is_standard(users[0]) or users[0].op_type != "Transpose":
            return None
        tr = users[0]
        if not self._single(ctx_value, tr) or transpose_perm(tr, 4) != Q_PERM:
            return None
        merged = tr.outputs[0]
        out_reshapes: list[tuple[Node, bool]] = []
        for user, slot in graph.uses(merged):
            if slot != 0 or not is_standard(user) or user.op_type != "Reshape":
                return None
            out_reshapes.append((user, self._merges_heads(user, x, hidden)))
            if not out_reshapes[-1][1] and self._copies_head_dims(user):
                return None
        if not out_reshapes or graph.is_output(merged):
            return None
        nodes.append(tr)

        # ---- mask and causal condition
        if mask is not None:
            r = shapes.rank(mask)
            if r is None or r > 4 or not shapes.is_float(mask):
                return None
        if causal is not None and not self._is_causal(causal[0], x):
            return None

        dtype = shapes.dtype(x)
        if dtype != 1:  # float32: the dtype every target kernel supports
            return None
        everything = nodes + [n for p in projs for n in p.nodes]
        if len({n.id for n in everything}) != len(everything):
            return None
        return Match(q, k, v, n, h, hidden, scale, mask, causal[1] if causal else None, nodes,
                     out_reshapes, np.dtype(np.float32), leftovers)

    def _merges_heads(self, reshape: Node, x: str, hidden: int) -> bool:
        """The head-merging Reshape's target provably is [x.dim0, x.dim1, H] (check 4)."""
        expected = [(x, 0), (x, 1), hidden]
        return self.dims.target_is(reshape.inputs[1], reshape.attr("allowzero", 0), expected, {0: (x, 0), 1: (x, 1)})

    def _copies_head_dims(self, reshape: Node) -> bool:
        """A literal 0 past dim 1 copies N or h, which the fused [B, S, H] output does not have."""
        if reshape.attr("allowzero", 0):
            return False
        pieces = shape_pieces(self.graph, self.shapes, reshape.inputs[1])
        return pieces is None or any(p == 0 for p in pieces[2:])

    def _is_causal(self, cond: str, x: str) -> bool:
        """cond = tril(ones(n, n))[..., 0:S, 0:S] (Slices from 0 to x's sequence length)."""
        graph = self.graph
        value = cond
        ends: dict[int, str | int] = {}
        for _ in range(3):
            node = producer_op(graph, value, "Slice")
            if node is None:
                break
            ins = node.inputs
            starts = graph.const(ins[1])
            axes = graph.const(ins[3]) if len(ins) > 3 and ins[3] else None
            steps = graph.const(ins[4]) if len(ins) > 4 and ins[4] else None
            if starts is None or axes is None or (steps is not None and not np.all(steps == 1)) or np.any(starts != 0):
                return False
            end_pieces = shape_pieces(graph, self.shapes, ins[2])
            if end_pieces is None or len(end_pieces) != axes.size:
                return False
            for a, e in zip(axes.reshape(-1).tolist(), end_pieces):
                ends[int(a)] = e
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
            if e is None:
                return False
            if isinstance(e, int):
                if self.dims.static(x, 1) != e:
                    return False
            elif not self.dims.equal(e, (x, 1)):
                return False
        return True


# ---------------------------------------------------------------------- emitting


def _bias_for(graph: Graph, dims: Dims, match: Match, x: str, cache: dict[str, str], near: Node | None,
              opset: int) -> str:
    """The additive mask expanded to [·, ·, S, S] (shared by every layer that uses it)."""
    mask = match.mask
    assert mask is not None
    shape = dims.shapes.shape(mask)
    seq = dims.static(x, 1)
    if shape is not None and len(shape) == 4 and seq is not None and shape[2] == seq and shape[3] == seq:
        return mask
    key = f"{mask}|{seq}" if seq is not None else f"{mask}|{dims.root(x, 1)}"
    if key in cache and graph.has_value(cache[key]):
        return cache[key]
    if seq is not None:
        target = graph.add_initializer(np.array([1, 1, seq, seq], dtype=np.int64), "attention_bias_shape")
    else:
        base = match.nodes[0].name
        if opset >= 15:
            s = graph.add_node("Shape", [x], 1, {"start": 1, "end": 2}, name=f"{base}/seq_len", near=near).outputs[0]
        else:  # Shape has no start/end before opset 15
            full = graph.add_node("Shape", [x], 1, name=f"{base}/shape", near=near).outputs[0]
            one, two = (graph.add_initializer(np.array([v], dtype=np.int64), "axis") for v in (1, 2))
            s = graph.add_node("Slice", [full, one, two], 1, name=f"{base}/seq_len", near=near).outputs[0]
        ones = graph.add_initializer(np.array([1, 1], dtype=np.int64), "ones")
        target = graph.add_node("Concat", [ones, s, s], 1, {"axis": 0}, name=f"{base}/bias_shape", near=near).outputs[0]
    expanded = graph.add_node("Expand", [mask, target], 1, name=f"{match.nodes[0].name}/attention_bias", near=near)
    cache[key] = expanded.outputs[0]
    return expanded.outputs[0]


def _emit(graph: Graph, ctx: PassContext, dims: Dims, match: Match, flavour: str, namer: Namer,
          cache: dict[str, str]) -> Node:
    q, k, v = match.q, match.k, match.v
    x = q.x
    projections = [n for p in (q, k, v) for n in p.nodes]
    removed = list(match.nodes) + [r for r, _ in match.out_reshapes] + (projections if flavour == "ort" else [])
    name = namer(removed, "MultiHeadAttention" if flavour == "mha" else "Attention")
    absorbed = [n.name or n.op_type for n in removed]
    bias_input = (_bias_for(graph, dims, match, x, cache, graph.producer(x), ctx.opset(""))
                  if match.mask is not None else "")
    identities = [r.outputs[0] for r, identity in match.out_reshapes if identity]
    others = [(r.outputs[0], r.inputs[1], r.attr("allowzero", 0)) for r, identity in match.out_reshapes if not identity]
    x_shape = dims.shapes.shape(x)
    graph.remove_nodes(removed)
    anchor = graph.producer(x)  # placement in the saved order: right after x is computed
    fused_out = identities[0] if identities else graph.fresh_name(f"{name}_out")
    if flavour == "ort":
        use_ms_domain(ctx)
        weight = np.concatenate([q.weight, k.weight, v.weight], axis=1).astype(np.float32)
        biases = [p.bias if p.bias is not None else np.zeros(match.hidden, np.float32) for p in (q, k, v)]
        w_name = graph.add_initializer(weight, f"{name}_qkv_weight")
        b_name = graph.add_initializer(np.concatenate(biases).astype(np.float32), f"{name}_qkv_bias")
        attrs = {"num_heads": match.heads, "scale": float(match.scale)}
        if match.causal_fill is not None:
            attrs.update(unidirectional=1, mask_filter_value=float(match.causal_fill))
        inputs = [x, w_name, b_name, "", "", bias_input] if bias_input else [x, w_name, b_name]
        node = graph.add_node("Attention", inputs, [fused_out], attrs, domain=MS_DOMAIN, name=name, near=anchor)
    elif flavour == "mha":
        use_ms_domain(ctx)
        attrs = {"num_heads": match.heads, "scale": float(match.scale)}
        if match.causal_fill is not None:
            attrs.update(unidirectional=1, mask_filter_value=float(match.causal_fill))
        inputs = [q.out, k.out, v.out] + (["", "", bias_input] if bias_input else [])
        node = graph.add_node("MultiHeadAttention", inputs, [fused_out], attrs, domain=MS_DOMAIN, name=name, near=anchor)
    else:
        attrs = {"q_num_heads": match.heads, "kv_num_heads": match.heads, "scale": float(match.scale)}
        if match.causal_fill is not None:
            attrs["is_causal"] = 1
        qkv = [q.out, k.out, v.out]
        if _has_weights(match) and _packable(graph, match):
            qkv = _pack_projections(graph, match, name, anchor)
        inputs = qkv + ([bias_input] if bias_input else [])
        node = graph.add_node("Attention", inputs, [fused_out], attrs, name=name, near=anchor)
    if x_shape is not None:
        record_shape(graph, dims.shapes, fused_out, [x_shape[0], x_shape[1], match.hidden], 1)
    for same in identities[1:]:
        if graph.is_output(same):
            graph.add_node("Identity", [fused_out], [same], name=f"{name}/{same}", near=node)
        else:
            graph.replace_all_uses(same, fused_out)
    for out_value, target, allowzero in others:  # same element order: only the target differs
        graph.add_node("Reshape", [fused_out, target], [out_value], {"allowzero": allowzero},
                       name=f"{name}/reshape", near=node)
    ctx.absorbed(node, absorbed)
    drop_dead_constants(graph, match.leftovers)
    return node


def _packable(graph: Graph, match: Match) -> bool:
    """Three separate MatMul(+Add) projections (not already one packed Split)."""
    return all(p.nodes and p.nodes[-1].op_type == "MatMul" for p in (match.q, match.k, match.v))


def _pack_projections(graph: Graph, match: Match, name: str, near: Node | None) -> list[str]:
    """x @ Wq + bq, x @ Wk + bk, x @ Wv + bv  →  Split(x @ [Wq|Wk|Wv] + [bq|bk|bv]): one GEMM."""
    q, k, v = match.q, match.k, match.v
    graph.remove_nodes([n for p in (q, k, v) for n in p.nodes])
    weight = np.concatenate([q.weight, k.weight, v.weight], axis=1).astype(np.float32)
    w_name = graph.add_initializer(weight, f"{name}_qkv_weight")
    packed = graph.add_node("MatMul", [q.x, w_name], 1, name=f"{name}/qkv", near=near).outputs[0]
    if any(p.bias is not None for p in (q, k, v)):
        bias = np.concatenate([p.bias if p.bias is not None else np.zeros(match.hidden, np.float32) for p in (q, k, v)])
        b_name = graph.add_initializer(bias.astype(np.float32), f"{name}_qkv_bias")
        packed = graph.add_node("Add", [packed, b_name], 1, name=f"{name}/qkv_bias", near=near).outputs[0]
    sizes = graph.add_initializer(np.array([match.hidden] * 3, np.int64), f"{name}_qkv_split")
    split = graph.add_node("Split", [packed, sizes], 3, {"axis": -1}, name=f"{name}/qkv_split", near=near)
    return list(split.outputs)


def _run(graph: Graph, ctx: PassContext, flavour_of) -> PassResult:
    matcher = _Matcher(graph, ctx)
    namer = Namer(graph)
    cache: dict[str, str] = {}
    fused = 0
    for softmax in graph.nodes("Softmax"):
        if not graph.has_node(softmax) or not is_standard(softmax):
            continue
        match = matcher.match(softmax)
        if match is None or (match.mask is not None and ctx.opset("") < 10):
            continue  # (the mask's broadcast shape is built with opset-10 Slice)
        flavour = flavour_of(match)
        if flavour is None:
            continue
        _emit(graph, ctx, matcher.dims, match, flavour, namer, cache)
        fused += 1
    return PassResult(fused > 0, {"fused": fused})


def _has_weights(match: Match) -> bool:
    return all(p.weight is not None for p in (match.q, match.k, match.v))


@register(level=2, target="ort", priority=45)
class FuseAttentionOrt(Pass):
    """Fuse self-attention subgraphs into com.microsoft Attention (packed QKV) for onnxruntime."""

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        if not contrib_allowed(graph, ctx, "Attention", "MultiHeadAttention"):
            return PassResult(False, {"fused": 0})
        return _run(graph, ctx, lambda m: "ort" if _has_weights(m) else "mha")


@register(level=2, priority=46)
class FuseAttention(Pass):
    """Fuse self-attention subgraphs into the ONNX Attention op (opset >= 23)."""

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        if ctx.target == "ort" or ctx.opset("") < 23 or graph is not ctx.model.graph:
            return PassResult(False, {"fused": 0})
        return _run(graph, ctx, lambda m: "onnx")
