"""Decoder layers as transformers' exports write them, with symbolic dims (for the attention tests).

Each builder returns one layer's attention (the projections, the head split, the cache, the
masks, Softmax, the merge) the way the TorchScript/dynamo exports of Llama/Qwen/Mistral (rotary,
grouped KV heads repeated by ``repeat_kv``), BART/Whisper (self-attention with a past, cross-
attention over the encoder's states with the encoder's padding mask) and GPT-2 (one packed
projection, a past) write it. Every dim is its own symbol, so tests can feed distinct sizes:
decoder 5 / encoder 12, past 8 / new 4, a decode step.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

H, N, HD = 32, 4, 8
F32 = TensorProto.FLOAT
MIN = float(np.finfo(np.float32).min)


class _Builder:
    def __init__(self, seed: int = 0, dtype: int = F32):
        self.dtype = dtype  # floats in the graph: float32, or float16 (constants and inputs)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self.rng = np.random.default_rng(seed)
        self.count = 0

    def const(self, array, name: str | None = None) -> str:
        self.count += 1
        name = name or f"c{self.count}"
        array = np.asarray(array)
        if array.dtype.kind == "f":
            array = array.astype(np.float16 if self.dtype == TensorProto.FLOAT16 else np.float32)
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def op(self, op_type: str, inputs: list[str], n_out: int = 1, **attrs) -> str | list[str]:
        self.count += 1
        outs = [f"{op_type.lower()}_{self.count}" + (f"_{i}" if n_out > 1 else "") for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=f"/{op_type}_{self.count}", **attrs))
        return outs[0] if n_out == 1 else outs

    def linear(self, x: str, out: int, bias: bool = True) -> str:
        w = self.const((self.rng.standard_normal((H, out)) * 0.2).astype(np.float32))
        y = self.op("MatMul", [x, w])
        return self.op("Add", [y, self.const((self.rng.standard_normal(out) * 0.1).astype(np.float32))]) if bias else y

    def dim(self, value: str, axis: int) -> str:
        return self.op("Shape", [value], start=axis, end=axis + 1)

    def heads(self, proj: str, n: int, like: str, heads_inferred: bool = False) -> str:
        """[B, S, n·h] -> [B, n, S, h], the target built from the input's shape (as exporters do):
        [B, -1, n, h], or with ``heads_inferred`` [B, S, -1, h] (transformers 5's
        ``view(*input_shape, -1, head_dim)``)."""
        if heads_inferred:
            target = self.op("Concat", [self.dim(like, 0), self.dim(like, 1),
                                        self.const(np.array([-1, HD], np.int64))], axis=0)
        else:
            target = self.op("Concat", [self.dim(like, 0), self.const(np.array([-1], np.int64)),
                                        self.const(np.array([n, HD], np.int64))], axis=0)
        return self.op("Transpose", [self.op("Reshape", [proj, target])], perm=[0, 2, 1, 3])

    def input(self, name: str, dims: list, dtype: int = F32) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, self.dtype if dtype == F32 else dtype, dims))
        return name

    def output(self, value: str, name: str, dims: list | None = None) -> str:
        """``value`` becomes the graph output ``name`` (renamed, as exporters name present.*)."""
        for node in self.nodes:
            node.output[:] = [name if v == value else v for v in node.output]
            node.input[:] = [name if v == value else v for v in node.input]
        self.outputs.append(helper.make_tensor_value_info(name, self.dtype, dims))
        return name

    def model(self, opset: int = 17) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, "decoder", self.inputs, self.outputs, self.inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])

    # ------------------------------------------------------------------ attention pieces

    def sdpa(self, q4: str, k4: str, v4: str, mask: str | None, like: str, scale_form: str = "div",
             zero_empty_rows: bool = False) -> str:
        """softmax(q·kᵀ/√h + mask)·v, merged back to [B, S, H]. ``zero_empty_rows``: the rows of
        queries that see no key (every bias of the row < 0) are set to 0, as transformers 5's sdpa
        writes it: Where(ReduceSum(visible, -1) < 1, 0, ·)."""
        kt = self.op("Transpose", [k4], perm=[0, 1, 3, 2])
        if scale_form == "div":
            scores = self.op("Div", [self.op("MatMul", [q4, kt]), self.const(np.array(np.sqrt(HD), np.float32))])
        else:  # dynamo's sdpa: √c on both sides
            c = self.const(np.array(HD ** -0.25, np.float32))
            scores = self.op("MatMul", [self.op("Mul", [q4, c]), self.op("Mul", [kt, c])])
        if mask is not None:
            scores = self.op("Add", [scores, mask])
        ctx = self.op("MatMul", [self.op("Softmax", [scores], axis=-1), v4])
        if zero_empty_rows:
            visible = self.op("Cast", [self.op("Equal", [mask, self.const(np.array(0.0, np.float32))])], to=self.dtype)
            seen = self.op("ReduceSum", [visible, self.const(np.array([-1], np.int64))], keepdims=1)
            ctx = self.op("Where", [self.op("Less", [seen, self.const(np.array(1.0, np.float32))]),
                                    self.const(np.array(0.0, np.float32)), ctx])
        target = self.op("Concat", [self.dim(like, 0), self.dim(like, 1), self.const(np.array([H], np.int64))], axis=0)
        return self.op("Reshape", [self.op("Transpose", [ctx], perm=[0, 2, 1, 3]), target])

    def rotary(self, x4: str, cos: str, sin: str) -> str:
        """Llama's half-split rotary on [B, N, S, h]: x·cos + rotate_half(x)·sin."""
        half = HD // 2
        lo = self.op("Slice", [x4, self.const(np.array([0], np.int64)), self.const(np.array([half], np.int64)),
                               self.const(np.array([3], np.int64))])
        hi = self.op("Slice", [x4, self.const(np.array([half], np.int64)), self.const(np.array([HD], np.int64)),
                               self.const(np.array([3], np.int64))])
        rot = self.op("Concat", [self.op("Neg", [hi]), lo], axis=-1)
        return self.op("Add", [self.op("Mul", [x4, cos]), self.op("Mul", [rot, sin])])

    def repeat_kv(self, x4: str, groups: int, kv_heads: int) -> str:
        """[B, kv, T, h] -> [B, kv·groups, T, h] (transformers' repeat_kv: Unsqueeze, Expand, Reshape)."""
        up = self.op("Unsqueeze", [x4, self.const(np.array([2], np.int64))])
        b, t = self.dim(x4, 0), self.dim(x4, 2)
        shape = self.op("Concat", [b, self.const(np.array([kv_heads, groups], np.int64)), t,
                                   self.const(np.array([HD], np.int64))], axis=0)
        target = self.op("Concat", [b, self.const(np.array([kv_heads * groups], np.int64)), t,
                                    self.const(np.array([HD], np.int64))], axis=0)
        return self.op("Reshape", [self.op("Expand", [up, shape]), target])

    def padding_bias(self, mask2d: str, queries: str) -> str:
        """transformers' _prepare_4d_attention_mask: [B, T] of 1/0 -> [B, 1, S, T] of 0/min."""
        m4 = self.op("Cast", [self.op("Unsqueeze", [mask2d, self.const(np.array([1, 2], np.int64))])], to=self.dtype)
        shape = self.op("Concat", [self.dim(mask2d, 0), self.const(np.array([1], np.int64)), self.dim(queries, 1),
                                   self.dim(mask2d, 1)], axis=0)
        inverted = self.op("Sub", [self.const(np.array(1.0, np.float32)), self.op("Expand", [m4, shape])])
        return self.op("Mul", [inverted, self.const(np.array(MIN, np.float32))])


def llama_layer(kv_heads: int = 2, rotary: bool = True, scale_form: str = "div", dtype: int = F32,
                zero_empty_rows: bool = False) -> onnx.ModelProto:
    """Llama/Qwen/Mistral self-attention with a KV cache: rotary on q and k, past concat, grouped
    KV heads repeated, the causal + padding mask given as [B, 1, S, P+S] (what the model's mask
    code computes from attention_mask and cache positions)."""
    b = _Builder(dtype=dtype)
    x = b.input("x", ["batch", "seq", H])
    mask = b.input("mask", ["batch", 1, "seq", "total"])
    past_k = b.input("past_key", ["batch", kv_heads, "past", HD])
    past_v = b.input("past_value", ["batch", kv_heads, "past", HD])
    cos = sin = None
    if rotary:
        cos = b.op("Unsqueeze", [b.input("cos", ["batch", "seq", HD]), b.const(np.array([1], np.int64))])
        sin = b.op("Unsqueeze", [b.input("sin", ["batch", "seq", HD]), b.const(np.array([1], np.int64))])
    q4 = b.heads(b.linear(x, H, bias=False), N, x)
    k4 = b.heads(b.linear(x, kv_heads * HD, bias=False), kv_heads, x)
    v4 = b.heads(b.linear(x, kv_heads * HD, bias=False), kv_heads, x)
    if rotary:
        q4, k4 = b.rotary(q4, cos, sin), b.rotary(k4, cos, sin)
    k_all = b.op("Concat", [past_k, k4], axis=2)
    v_all = b.op("Concat", [past_v, v4], axis=2)
    k_all = b.output(k_all, "present_key", ["batch", kv_heads, "total", HD])
    v_all = b.output(v_all, "present_value", ["batch", kv_heads, "total", HD])
    if kv_heads != N:
        k_all, v_all = b.repeat_kv(k_all, N // kv_heads, kv_heads), b.repeat_kv(v_all, N // kv_heads, kv_heads)
    y = b.sdpa(q4, k_all, v_all, mask, x, scale_form, zero_empty_rows)
    b.output(b.linear(y, H, bias=False), "y", ["batch", "seq", H])
    return b.model()


def _rms(b: _Builder, x: str, width: int, one_plus: bool = True) -> str:
    """Gemma's RMSNorm as TorchScript writes it: x / Sqrt(mean(x²) + eps) · (1 + w)."""
    two = b.const(np.array(2.0, np.float32))
    mean = b.op("ReduceMean", [b.op("Pow", [x, two])], axes=[-1], keepdims=1)
    inv = b.op("Div", [b.const(np.array(1.0, np.float32)),
                       b.op("Sqrt", [b.op("Add", [mean, b.const(np.array(1e-6, np.float32))])])])
    w = b.rng.standard_normal(width).astype(np.float32) * 0.1 + (0.0 if one_plus else 1.0)
    return b.op("Mul", [b.op("Mul", [x, inv]), b.const(1.0 + w if one_plus else w)])


def _gelu_tanh(b: _Builder, x: str) -> str:
    cube = b.op("Mul", [b.op("Pow", [x, b.const(np.array(3.0, np.float32))]), b.const(np.array(0.044715, np.float32))])
    inner = b.op("Mul", [b.op("Add", [x, cube]), b.const(np.array(np.sqrt(2 / np.pi), np.float32))])
    one_plus = b.op("Add", [b.op("Tanh", [inner]), b.const(np.array(1.0, np.float32))])
    return b.op("Mul", [b.op("Mul", [x, b.const(np.array(0.5, np.float32))]), one_plus])


def gemma_layer(kv_heads: int = 2, qk_norm: bool = True) -> onnx.ModelProto:
    """A Gemma 3 decoder layer: (1 + w) RMSNorms before and after attention and MLP, q/k RMSNorms
    over the head dim before the rotary, grouped KV heads with a past, a GELU-tanh gated MLP. The
    residual stream's batch reaches q only through shape plumbing (the heads' Reshape target is
    Concat(Shape(x)[0], Shape(x)[1], -1, h)) and the norms' ReduceMean."""
    b = _Builder(2)
    x = b.input("x", ["batch", "seq", H])
    mask = b.input("mask", ["batch", 1, "seq", "total"])
    past_k = b.input("past_key", ["batch", kv_heads, "past", HD])
    past_v = b.input("past_value", ["batch", kv_heads, "past", HD])
    cos, sin = _rotary_tables(b, b.input("position_ids", ["batch", "seq"], TensorProto.INT64))
    h = _rms(b, x, H)
    q4 = b.heads(b.linear(h, H, bias=False), N, x, True)
    k4 = b.heads(b.linear(h, kv_heads * HD, bias=False), kv_heads, x, True)
    if qk_norm:  # Gemma 3 / Qwen 3; without: Llama's layer with Gemma's norms around it
        q4, k4 = _rms(b, q4, HD), _rms(b, k4, HD)
    v4 = b.heads(b.linear(h, kv_heads * HD, bias=False), kv_heads, x, True)
    q4, k4 = b.rotary(q4, cos, sin), b.rotary(k4, cos, sin)
    k_all = b.output(b.op("Concat", [past_k, k4], axis=2), "present_key", ["batch", kv_heads, "total", HD])
    v_all = b.output(b.op("Concat", [past_v, v4], axis=2), "present_value", ["batch", kv_heads, "total", HD])
    groups = N // kv_heads
    y = b.sdpa(q4, b.repeat_kv(k_all, groups, kv_heads), b.repeat_kv(v_all, groups, kv_heads), mask, x)
    r1 = b.op("Add", [x, _rms(b, b.linear(y, H, bias=False), H)])
    m = _rms(b, r1, H)
    act = b.op("Mul", [_gelu_tanh(b, b.linear(m, H, bias=False)), b.linear(m, H, bias=False)])
    out = b.op("Add", [r1, _rms(b, b.linear(act, H, bias=False), H)])
    b.output(out, "y", ["batch", "seq", H])
    return b.model()


def _rotary_tables(b: _Builder, positions: str) -> tuple[str, str]:
    """The model's rotary_emb: inv_freq @ positions, Concat(f, f), Cos / Sin, Unsqueeze to [B, 1, S, h]."""
    inv = b.const((1.0 / 10000 ** (np.arange(0, HD, 2) / HD)).reshape(1, HD // 2, 1).astype(np.float32))
    p3 = b.op("Cast", [b.op("Unsqueeze", [positions, b.const(np.array([1], np.int64))])], to=F32)
    f = b.op("Transpose", [b.op("MatMul", [inv, p3])], perm=[0, 2, 1])
    emb = b.op("Concat", [f, f], axis=-1)
    return (b.op("Unsqueeze", [b.op("Cos", [emb]), b.const(np.array([1], np.int64))]),
            b.op("Unsqueeze", [b.op("Sin", [emb]), b.const(np.array([1], np.int64))]))


def falcon_layer() -> onnx.ModelProto:
    """Falcon's self-attention as transformers 5's TorchScript export writes it: the mask built in
    the graph from attention_mask [B, P+S] — causal LessOrEqual of aranges, padding looked up by a
    flattened Gather at arange(B)·(P+S) + arange(P+S), And-ed, then Expand to TorchScript's target
    Where(Equal(t, -1), 1, t) of t = [B, -1, S, P+S] (P + S is a sum: the vector is not traceable as
    a whole) — rotary on q and k, the past concat, sdpa, and Falcon's ``view(B, N, S, h)`` after the
    product with v (a no-op Reshape whose target comes from x's shape). Proving that view a no-op
    needs P·V's batch = x's: through the mask's Expand, And, the Gather's Reshape to the index's
    shape, and Range(0, B, 1)."""
    b = _Builder(3)
    x = b.input("x", ["batch", "seq", H])
    attention_mask = b.input("attention_mask", ["batch", "total"], TensorProto.INT64)
    past_k = b.input("past_key", ["batch", N, "past", HD])
    past_v = b.input("past_value", ["batch", N, "past", HD])
    cos, sin = _rotary_tables(b, b.input("position_ids", ["batch", "seq"], TensorProto.INT64))
    zero, one = b.const(np.array(0, np.int64)), b.const(np.array(1, np.int64))

    def scalar_dim(value: str, axis: int) -> str:
        return b.op("Gather", [b.op("Shape", [value]), b.const(np.array(axis, np.int64))])

    batch, seq, past = scalar_dim(x, 0), scalar_dim(x, 1), scalar_dim(past_k, 2)
    total = b.op("Add", [past, seq])
    kv_idx = b.op("Unsqueeze", [b.op("Range", [zero, total, one]), b.const(np.array([0, 1, 2], np.int64))])
    q_pos = b.op("Unsqueeze", [b.op("Add", [b.op("Range", [zero, seq, one]), past]),
                               b.const(np.array([0, 1, 3], np.int64))])
    causal = b.op("LessOrEqual", [kv_idx, q_pos])  # [1, 1, S, T]
    rows = b.op("Unsqueeze", [b.op("Range", [zero, batch, one]), b.const(np.array([1, 2, 3], np.int64))])
    width = b.op("Gather", [b.op("Shape", [attention_mask]), b.const(np.array([1], np.int64))])
    index = b.op("Add", [kv_idx, b.op("Mul", [rows, width])])  # [B, 1, 1, T]
    flat = b.op("Flatten", [b.op("Cast", [attention_mask], to=TensorProto.BOOL)], axis=2)
    looked = b.op("Reshape", [b.op("Gather", [flat, index]), b.const(np.array([-1], np.int64))])
    padding = b.op("Reshape", [looked, b.op("Shape", [index])])  # [B, 1, 1, T]
    allowed = b.op("And", [causal, padding])

    def vec(v: str) -> str:
        return b.op("Unsqueeze", [v, b.const(np.array([0], np.int64))])

    t = b.op("Concat", [vec(batch), b.const(np.array([-1], np.int64)), vec(seq), vec(total)], axis=0)
    t = b.op("Where", [b.op("Equal", [t, b.const(np.array([-1, -1, -1, -1], np.int64))]),
                       b.const(np.array([1, 1, 1, 1], np.int64)), t])
    mask = b.op("Where", [b.op("Expand", [allowed, t]), b.const(np.array(0.0, np.float32)),
                          b.const(np.array(MIN, np.float32))])
    q4 = b.rotary(b.heads(b.linear(x, H, bias=False), N, x, True), cos, sin)
    k4 = b.rotary(b.heads(b.linear(x, H, bias=False), N, x, True), cos, sin)
    v4 = b.heads(b.linear(x, H, bias=False), N, x, True)
    k_all = b.output(b.op("Concat", [past_k, k4], axis=2), "present_key", ["batch", N, "total", HD])
    v_all = b.output(b.op("Concat", [past_v, v4], axis=2), "present_value", ["batch", N, "total", HD])
    c = b.const(np.array(HD ** -0.25, np.float32))
    scores = b.op("MatMul", [b.op("Mul", [q4, c]), b.op("Mul", [b.op("Transpose", [k_all], perm=[0, 1, 3, 2]), c])])
    probs = b.op("Softmax", [b.op("Add", [scores, mask])], axis=-1)
    ctx = b.op("MatMul", [probs, v_all])
    view = b.op("Concat", [vec(batch), b.const(np.array([N], np.int64)), vec(seq), b.const(np.array([HD], np.int64))],
                axis=0)
    ctx = b.op("Reshape", [ctx, view])  # Falcon's attn_output.view(B, N, S, h)
    target = b.op("Concat", [b.dim(x, 0), b.dim(x, 1), b.const(np.array([H], np.int64))], axis=0)
    y = b.op("Reshape", [b.op("Transpose", [ctx], perm=[0, 2, 1, 3]), target])
    b.output(b.linear(y, H, bias=False), "y", ["batch", "seq", H])
    return b.model()


def bloom_layer(shared_lead: bool = True, torchscript: bool = False, layers: int = 1) -> onnx.ModelProto:
    """BLOOM's self-attention as transformers 5's exports write it: heads folded into the batch —
    q, k, v [B, N, ·, h] reshaped to [B·N, ·, h] by targets that lead with one computed B·N —,
    ``baddbmm(alibi, q, kᵀ, alpha=1/√h)`` with the ALiBi bias [B·N, 1, T] (slopes · positions from
    the attention mask's cumsum), the scores unfolded to [B, N, S, T] for the mask and Softmax,
    folded again for the product with v, unfolded, merged. ``shared_lead=False``: the probabilities'
    fold computes its own B·N from the mask's batch (equal at run time, but no proof says so).
    ``torchscript``: TorchScript's form — q, k, v are Gathers at axis 3 of one packed projection
    viewed [B, S, N, 3, h], each fold computes B·N from its layer input's shape, and the merge's
    target reads B as Shape(folded context)[0] / N (``_merge_heads``). ``layers`` stacked layers
    share the alibi; a fused layer's output has no inferred shape, so the next layer's dims are
    proven through the Gathers."""
    b = _Builder(5)
    x = b.input("x", ["batch", "seq", H])
    # declared with its own batch symbol when the fold reads it: no declared shape ties the two
    attention_mask = b.input("attention_mask", ["batch" if shared_lead else "mask_batch", "total"], TensorProto.INT64)
    mask = b.input("mask", ["batch", 1, "seq", "total"])

    def scalar_dim(value: str, axis: int) -> str:
        return b.op("Gather", [b.op("Shape", [value]), b.const(np.array(axis, np.int64))])

    def lead(source: str = x) -> str:  # B·N as a [1] tensor
        return b.op("Unsqueeze", [b.op("Mul", [scalar_dim(source, 0), b.const(np.array(N, np.int64))]),
                                  b.const(np.array([0], np.int64))])

    bn = lead()
    slopes = b.const((2.0 ** (-8.0 * np.arange(1, N + 1) / N)).astype(np.float32).reshape(N, 1))
    cum = b.op("Sub", [b.op("CumSum", [attention_mask, b.const(np.array(1, np.int64))]), b.const(np.array(1, np.int64))])
    positions = b.op("Cast", [b.op("Unsqueeze", [b.op("Mul", [cum, attention_mask]), b.const(np.array([1], np.int64))])],
                     to=TensorProto.FLOAT)  # [B, 1, T]
    alibi = b.op("Reshape", [b.op("Mul", [slopes, positions]),
                             b.op("Concat", [bn, b.const(np.array([1], np.int64)), b.dim(attention_mask, 1)], axis=0)])
    for layer in range(layers):
        past_k = b.input(f"past_key{layer}" if layers > 1 else "past_key", ["batch", N, "past", HD])
        past_v = b.input(f"past_value{layer}" if layers > 1 else "past_value", ["batch", N, "past", HD])
        layer_lead = lead(x) if torchscript else bn
        if torchscript:
            packed = b.linear(x, 3 * H)
            view = b.op("Concat", [b.dim(x, 0), b.dim(x, 1), b.const(np.array([N, 3, HD], np.int64))], axis=0)
            qkv = b.op("Reshape", [packed, view])
            q4, k_new, v_new = (b.op("Transpose", [b.op("Gather", [qkv, b.const(np.array(i, np.int64))], axis=3)],
                                     perm=[0, 2, 1, 3]) for i in range(3))
        else:
            q4, k_new, v_new = (b.heads(b.linear(x, H), N, x) for _ in range(3))
        suffix = str(layer) if layers > 1 else ""
        k_all = b.output(b.op("Concat", [past_k, k_new], axis=2), f"present_key{suffix}", ["batch", N, "total", HD])
        v_all = b.output(b.op("Concat", [past_v, v_new], axis=2), f"present_value{suffix}", ["batch", N, "total", HD])

        def fold(v: str, middle: str | None = None, first: str | None = None) -> str:
            rest = [middle, b.const(np.array([-1], np.int64))] if middle else [b.const(np.array([-1, HD], np.int64))]
            return b.op("Reshape", [v, b.op("Concat", [first or layer_lead, *rest], axis=0)])

        kt = b.op("Transpose", [fold(k_all)], perm=[0, 2, 1])
        scores = b.op("Mul", [b.op("MatMul", [fold(q4), kt]), b.const(np.array(HD ** -0.5, np.float32))])
        scores = b.op("Add", [scores, alibi])
        unfold = b.op("Concat", [b.dim(x, 0), b.const(np.array([N], np.int64)), b.dim(x, 1),
                                 b.const(np.array([-1], np.int64))], axis=0)
        probs = b.op("Softmax", [b.op("Add", [b.op("Reshape", [scores, unfold]), mask])], axis=-1)
        ctx3 = b.op("MatMul", [fold(probs, b.dim(x, 1), None if shared_lead else lead(attention_mask)), fold(v_all)])
        ctx = b.op("Reshape", [ctx3, b.op("Concat", [b.dim(x, 0), b.const(np.array([N], np.int64)), b.dim(x, 1),
                                                     b.const(np.array([HD], np.int64))], axis=0)])
        if torchscript:  # batch_size = batch_size_and_num_heads // num_heads
            batch = b.op("Unsqueeze", [b.op("Div", [scalar_dim(ctx3, 0), b.const(np.array(N, np.int64))]),
                                       b.const(np.array([0], np.int64))])
        else:
            batch = b.dim(x, 0)
        target = b.op("Concat", [batch, b.dim(x, 1), b.const(np.array([H], np.int64))], axis=0)
        y = b.op("Reshape", [b.op("Transpose", [ctx], perm=[0, 2, 1, 3]), target])
        x = b.op("Add", [x, b.linear(y, H, bias=False)])
    b.output(x, "y", ["batch", "seq", H])
    return b.model()


def bart_decoder_layer(cached_cross: bool = False, encoder_mask: bool = True,
                       tiled_positions: bool = False) -> onnx.ModelProto:
    """BART/Whisper decoder layer: self-attention over past + new keys (causal + padding mask
    [B, 1, S, P+S]), then cross-attention over the encoder's states (projected here, or the
    cached [B, N, L, h] keys and values of a decode step) with the encoder's padding mask.
    ``tiled_positions``: the layer's input is x + embed_positions(Tile(positions [1, S], [B, 1])),
    as Whisper's TorchScript export writes it (the batch dim reaches q through the Tile)."""
    b = _Builder(1)
    x = b.input("x", ["batch", "seq", H])
    if tiled_positions:
        seq = b.op("Squeeze", [b.dim(x, 1), b.const(np.array([0], np.int64))])
        positions = b.op("Unsqueeze", [b.op("Range", [b.const(np.array(0, np.int64)), seq,
                                                      b.const(np.array(1, np.int64))]),
                                       b.const(np.array([0], np.int64))])
        repeats = b.op("Concat", [b.dim(x, 0), b.const(np.array([1], np.int64))], axis=0)
        table = b.const((b.rng.standard_normal((64, H)) * 0.1).astype(np.float32))
        x = b.op("Add", [x, b.op("Gather", [table, b.op("Tile", [positions, repeats])])])
    mask = b.input("mask", ["batch", 1, "seq", "total"])
    past_k = b.input("past_key", ["batch", N, "past", HD])
    past_v = b.input("past_value", ["batch", N, "past", HD])
    q = b.op("Mul", [b.linear(x, H), b.const(np.array(HD ** -0.5, np.float32))])  # BART scales q first
    k_all = b.op("Concat", [past_k, b.heads(b.linear(x, H), N, x)], axis=2)
    v_all = b.op("Concat", [past_v, b.heads(b.linear(x, H), N, x)], axis=2)
    k_all = b.output(k_all, "present_key", ["batch", N, "total", HD])
    v_all = b.output(v_all, "present_value", ["batch", N, "total", HD])
    kt = b.op("Transpose", [k_all], perm=[0, 1, 3, 2])
    scores = b.op("Add", [b.op("MatMul", [b.heads(q, N, x), kt]), mask])
    ctx = b.op("MatMul", [b.op("Softmax", [scores], axis=-1), v_all])
    target = b.op("Concat", [b.dim(x, 0), b.dim(x, 1), b.const(np.array([H], np.int64))], axis=0)
    h1 = b.op("Add", [x, b.linear(b.op("Reshape", [b.op("Transpose", [ctx], perm=[0, 2, 1, 3]), target]), H)])
    # cross-attention
    enc_mask = b.input("encoder_mask", ["batch", "enc_seq"], TensorProto.INT64) if encoder_mask else None
    if cached_cross:
        ck = b.input("cross_key", ["batch", N, "enc_seq", HD])
        cv = b.input("cross_value", ["batch", N, "enc_seq", HD])
    else:
        enc = b.input("encoder_states", ["batch", "enc_seq", H])
        ck, cv = b.heads(b.linear(enc, H), N, enc), b.heads(b.linear(enc, H), N, enc)
    cq = b.heads(b.op("Mul", [b.linear(h1, H), b.const(np.array(HD ** -0.5, np.float32))]), N, h1)
    bias = b.padding_bias(enc_mask, h1) if encoder_mask else None
    scores = b.op("MatMul", [cq, b.op("Transpose", [ck], perm=[0, 1, 3, 2])])
    if bias is not None:
        scores = b.op("Add", [scores, bias])
    ctx = b.op("MatMul", [b.op("Softmax", [scores], axis=-1), cv])
    target = b.op("Concat", [b.dim(h1, 0), b.dim(h1, 1), b.const(np.array([H], np.int64))], axis=0)
    y = b.op("Add", [h1, b.linear(b.op("Reshape", [b.op("Transpose", [ctx], perm=[0, 2, 1, 3]), target]), H)])
    b.output(y, "y", ["batch", "seq", H])
    return b.model()


def feeds(model: onnx.ModelProto, batch: int = 2, seq: int = 4, past: int = 8, enc: int = 12,
          seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs at the given sizes: a causal mask over past + new keys with the second sequence's
    first keys padded (left padding), an encoder mask with the second sequence's last keys padded."""
    rng = np.random.default_rng(seed)
    out = _feeds(model, batch, seq, past, enc, rng)
    half = {i.name for i in model.graph.input if i.type.tensor_type.elem_type == TensorProto.FLOAT16}
    low = float(np.finfo(np.float16).min)  # a float16 mask hides with float16's min, as transformers writes it
    return {k: np.maximum(v, low).astype(np.float16) if k in half else v for k, v in out.items()}


def _feeds(model, batch, seq, past, enc, rng) -> dict[str, np.ndarray]:
    total = past + seq
    out: dict[str, np.ndarray] = {}
    for i in model.graph.input:
        sizes = {"batch": batch, "seq": seq, "past": past, "total": total, "enc_seq": enc}
        shape = [sizes.get(d.dim_param, d.dim_value) for d in i.type.tensor_type.shape.dim]
        if i.name == "mask":
            hidden = np.triu(np.ones((seq, total), bool), k=past + 1)[None, None].repeat(batch, 0)
            hidden[1:, ..., : min(2, total - 1)] = True
            out[i.name] = np.where(hidden, MIN, 0).astype(np.float32)
        elif i.name == "encoder_mask":
            m = np.ones((batch, enc), np.int64)
            m[1:, enc - 3:] = 0
            out[i.name] = m
        elif i.name == "attention_mask":  # 1 over past + new keys, the second sequence left-padded
            m = np.ones((batch, total), np.int64)
            m[1:, : min(2, total - 1)] = 0
            out[i.name] = m
        elif i.name == "position_ids":
            out[i.name] = np.tile(np.arange(past, past + seq, dtype=np.int64), (batch, 1))
        elif i.name in ("cos", "sin"):
            angles = np.arange(past, past + seq)[:, None] * (1.0 / 10000 ** (np.arange(0, HD, 2) / HD))[None]
            angles = np.concatenate([angles, angles], -1)
            out[i.name] = np.broadcast_to(np.cos(angles) if i.name == "cos" else np.sin(angles), shape).astype(np.float32)
        else:
            out[i.name] = rng.standard_normal(shape).astype(np.float32)
    return out
