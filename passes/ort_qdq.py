"""QDQ node units → the integer kernels onnxruntime's extended level runs on CPU (``--target ort``).

A QDQ model marks each quantized op as a *node unit*: DequantizeLinear on every quantized input,
the float op, QuantizeLinear on its output. onnxruntime's ``qdq_transformer`` selectors pick such
units and its actions replace each with one integer op; these rules do the same and keep its
conditions (``qdq_selectors.cc``), with one difference: a DQ another op also reads stays for that
op instead of being copied first (ORT's EnsureUniqueDQForNodeUnit), so no unit is refused for it.

    qlinear-conv      Q(Conv(DQ(x), DQ(w), DQ(b)?))          → QLinearConv
    qlinear-matmul    Q(MatMul(DQ(a), DQ(b)))                → QLinearMatMul
    qgemm             Q?(Gemm(DQ(a), DQ(b), DQ(c)?))         → com.microsoft QGemm (float out without Q)
    qlinear-unary     Q(op(DQ(x))) for AveragePool, GlobalAveragePool, LeakyRelu, Sigmoid, Softmax
                                                             → com.microsoft QLinear<op>
    qlinear-binary    Q(Add|Mul(DQ(a), DQ(b)))               → com.microsoft QLinearAdd / QLinearMul
    (a walk)          Q(Concat(DQ(x0), DQ(x1), ...))         → com.microsoft QLinearConcat

Every rule refuses (and says so under ``--explain``): parameters that are not constants (scale
float32, zero point in the quantized type), blocked quantization; an activation that is not
uint8 (int8 activations need s8s8 kernels that onnxruntime fuses only where MLAS has them — ORT's
``is_int8_allowed`` is off on x86), or whose output type differs from its input's; a per-channel
scale on an activation, or on a weight along any axis but the kernel's (Conv: output channels,
axis 0; Gemm: N; MatMul: the columns of a 2-D constant B, as onnxruntime's selector and kernel take
them); per-channel weight zero points that differ; a bias that
is not an int32 constant quantized with scale x_scale·w_scale and zero point 0 (the kernels
assume exactly that); Gemm with a bias and beta ≠ 1. The engine refuses a unit whose float
intermediate has another reader or is a graph output. A missing zero point becomes a zero of the
quantized type. QDQ pairs that are exact without a kernel (Reshape, Transpose, MaxPool, …) are
level 1's (passes/qdq_cleanup.py), as are Relu/Clip before a Q.

Level 1 and ``--target onnx`` keep standard QDQ: these rules are ``--target ort`` level 2 only.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from graphtool.ir.graph import Graph
from graphtool.pass_manager import Pass, PassContext, PassResult, register
from graphtool.passes._fuse_common import attr_protos
from graphtool.passes._ort_common import MS_DOMAIN, Shapes, contrib_allowed, record_shape, use_ms_domain
from graphtool.passes._qdq_parts import QParams, is_dq, is_q, qparams
from graphtool.rewrite import Match, Rewrite, Rule, RulePass, Var, either, op

ACTIVATION_TYPES = (TensorProto.UINT8,)
WEIGHT_TYPES = (TensorProto.UINT8, TensorProto.INT8)


class Facts:
    def __init__(self, graph: Graph, ctx: PassContext):
        self.shapes = Shapes(graph, ctx)

    def rank(self, value: str) -> int | None:
        return self.shapes.rank(value)


def dq(name: str, x: str) -> op:
    return op.DequantizeLinear(Var(x), Var(x + "_s"), Var(x + "_z", omittable=True), _name=name, _shared=True)


def quantize(inner, name: str = "q"):
    return op.QuantizeLinear(inner, Var("y_s"), Var("y_z", omittable=True), _name=name)


def _params(m: Match, name: str, rank: int | None = None) -> QParams | str:
    node = m.node(name)
    p = qparams(m.graph, node, m.facts.shapes, rank)
    return p if p is not None else f"the {node.op_type} '{node.name}' has parameters that are not constants (float32 scale, zero point in its type) or is blocked"


def _activation(m: Match, name: str) -> QParams | str:
    p = _params(m, name)
    if isinstance(p, str):
        return p
    if not p.per_tensor:
        return f"'{m.node(name).name}' quantizes an activation per channel"
    if p.dtype not in ACTIVATION_TYPES:
        return f"'{m.node(name).name}' quantizes to {helper.tensor_dtype_to_np_dtype(p.dtype).name}: only uint8 activations are fused on x86"
    return p


def _check_io(m: Match, inputs: tuple[str, ...], q: str | None = "q") -> str | dict[str, QParams]:
    found: dict[str, QParams] = {}
    for name in inputs + ((q,) if q else ()):
        p = _activation(m, name)
        if isinstance(p, str):
            return p
        found[name] = p
    dtypes = {p.dtype for p in found.values()}
    if len(dtypes) != 1:
        return "the input and output quantized types differ"
    return found


def _weight(m: Match, name: str, rank: int, axis: int, channels: int) -> QParams | str:
    p = _params(m, name, rank)
    if isinstance(p, str):
        return p
    if p.dtype not in WEIGHT_TYPES:
        return f"the weight is {helper.tensor_dtype_to_np_dtype(p.dtype).name} (the kernels take int8/uint8)"
    if not p.per_tensor:
        if p.axis != axis or p.scale.size != channels:
            return f"the weight is quantized per channel along axis {p.axis}, the kernel's channels are axis {axis}"
        if len(np.unique(p.zero)) != 1:
            return "the weight's per-channel zero points differ"
    return p


def _bias(m: Match, x: QParams, w: QParams, var: str = "b", dq_name: str = "dqb") -> str | None:
    """None when DQ(b) is the int32 bias the kernels assume: scale x_scale * w_scale, zero point 0."""
    if m.get(var) is None:
        return None
    b = m.graph.const(m[var])
    p = _params(m, dq_name)
    if b is None or b.dtype != np.int32 or isinstance(p, str):
        return "the bias is not a constant int32 dequantized with constant parameters"
    expected = (x.scale.astype(np.float64).reshape(-1)[0] * w.scale.astype(np.float64)).reshape(-1)
    if np.any(p.zero != 0) or not np.allclose(p.scale.astype(np.float64).reshape(-1) * np.ones_like(expected), expected,
                                              rtol=1e-5, atol=0):
        return "the bias is not quantized with scale x_scale * w_scale and zero point 0"
    return None


def _zero(rw: Rewrite, m: Match, var: str, p: QParams) -> str:
    zero = m.get(var)
    return zero if zero else rw.initializer(np.zeros((), helper.tensor_dtype_to_np_dtype(p.dtype)), "zero_point")


def _record(m: Match, out: str, like: str, dtype: int | None) -> None:
    record_shape(m.graph, m.facts.shapes, out, m.facts.shapes.shape(like), dtype)


# ---- Conv -------------------------------------------------------------------------------------------------

def check_conv(m: Match) -> str | None:
    io = _check_io(m, ("dqx",))
    if isinstance(io, str):
        return io
    w = m.graph.const(m["w"])
    if w is None:
        return "the weight is not a constant"
    pw = _weight(m, "dqw", w.ndim, 0, w.shape[0])
    if isinstance(pw, str):
        return pw
    why = _bias(m, io["dqx"], pw)
    if why:
        return why
    m.extra.update(x=io["dqx"], w=pw, y=io["q"])
    return None


def emit_conv(m: Match, rw: Rewrite) -> str:
    x, w, y = m.extra["x"], m.extra["w"], m.extra["y"]
    inputs = [m["x"], m["x_s"], _zero(rw, m, "x_z", x), m["w"], m["w_s"], _zero(rw, m, "w_z", w),
              m["y_s"], _zero(rw, m, "y_z", y)]
    if m.get("b"):
        inputs.append(m["b"])
    out = rw.add("QLinearConv", inputs, attrs=attr_protos(m.node("conv"))).outputs[0]
    _record(m, out, m.node("conv").outputs[0], y.dtype)
    return out


_x, _w, _b = dq("dqx", "x"), dq("dqw", "w"), dq("dqb", "b")
QLINEAR_CONV = Rule("qlinear-conv", quantize(either(op.Conv(_x, _w, _b, _name="conv"), op.Conv(_x, _w, _name="conv"))),
                    emit_conv, check_conv, emits="QLinearConv")

# ---- MatMul -----------------------------------------------------------------------------------------------


def check_matmul(m: Match) -> str | None:
    io = _check_io(m, ("dqa",))
    if isinstance(io, str):
        return io
    b = m.graph.const(m["b"])
    pb = _params(m, "dqb", b.ndim if b is not None else m.facts.rank(m["b"]))
    if isinstance(pb, str):
        return pb
    if pb.dtype not in WEIGHT_TYPES:
        return "B is not int8/uint8"
    if not pb.per_tensor:  # the kernel takes a scale per column of a 2-D B (a weight quantized per output channel)
        if b is None or b.ndim != 2:
            return "B is quantized per channel and is not a 2-D constant"
        if pb.axis != 1 or pb.scale.size != b.shape[1]:
            return f"B is quantized per channel along axis {pb.axis}; QLinearMatMul's channels are B's columns (axis 1)"
        if len(np.unique(pb.zero)) != 1:
            return "B's per-column zero points differ"
    m.extra.update(a=io["dqa"], b=pb, y=io["q"])
    return None


def emit_matmul(m: Match, rw: Rewrite) -> str:
    a, b, y = m.extra["a"], m.extra["b"], m.extra["y"]
    inputs = [m["a"], m["a_s"], _zero(rw, m, "a_z", a), m["b"], m["b_s"], _zero(rw, m, "b_z", b),
              m["y_s"], _zero(rw, m, "y_z", y)]
    out = rw.add("QLinearMatMul", inputs).outputs[0]
    _record(m, out, m.node("mm").outputs[0], y.dtype)
    return out


QLINEAR_MATMUL = Rule("qlinear-matmul", quantize(op.MatMul(dq("dqa", "a"), dq("dqb", "b"), _name="mm")),
                      emit_matmul, check_matmul, emits="QLinearMatMul")

# ---- Gemm -------------------------------------------------------------------------------------------------


def check_gemm(m: Match) -> str | None:
    if not contrib_allowed(m.graph, m.ctx, "QGemm"):
        return "onnxruntime's CPU provider has no QGemm kernel"
    io = _check_io(m, ("dqa",), "q" if m.node("q") is not None else None)
    if isinstance(io, str):
        return io
    gemm = m.node("gemm")
    b = m.graph.const(m["b"])
    if b is None or b.ndim != 2:
        return "B is not a 2-D constant"
    trans_b = gemm.attr("transB", 0)
    pb = _weight(m, "dqb", 2, 0 if trans_b else 1, b.shape[0 if trans_b else 1])
    if isinstance(pb, str):
        return pb
    if m.get("c") is not None and gemm.attr("beta", 1.0) != 1.0:
        return "Gemm has a bias and beta != 1"
    why = _bias(m, io["dqa"], pb, "c", "dqc")
    if why:
        return why
    m.extra.update(a=io["dqa"], b=pb, y=io.get("q"))
    return None


def emit_gemm(m: Match, rw: Rewrite) -> str:
    a, b, y = m.extra["a"], m.extra["b"], m.extra["y"]
    gemm = m.node("gemm")
    inputs = [m["a"], m["a_s"], _zero(rw, m, "a_z", a), m["b"], m["b_s"], _zero(rw, m, "b_z", b), m.get("c") or ""]
    if y is not None:
        inputs += [m["y_s"], _zero(rw, m, "y_z", y)]
    attrs = {k: v for k, v in attr_protos(gemm).items() if k in ("alpha", "transA", "transB")}
    use_ms_domain(m.ctx)
    out = rw.add("QGemm", inputs, attrs=attrs, domain=MS_DOMAIN).outputs[0]
    _record(m, out, gemm.outputs[0], y.dtype if y is not None else TensorProto.FLOAT)
    return out


_a, _bw, _c = dq("dqa", "a"), dq("dqb", "b"), dq("dqc", "c")
_gemm = either(op.Gemm(_a, _bw, _c, _name="gemm"), op.Gemm(_a, _bw, _name="gemm"))
QGEMM = Rule("qgemm", quantize(_gemm), emit_gemm, check_gemm, emits="QGemm")
QGEMM_FLOAT = Rule("qgemm-float-out", _gemm, emit_gemm, check_gemm, emits="QGemm")

# ---- unary and binary contrib ops --------------------------------------------------------------------------

UNARY = ("AveragePool", "GlobalAveragePool", "LeakyRelu", "Sigmoid", "Softmax")


def check_unary(m: Match) -> str | None:
    if not contrib_allowed(m.graph, m.ctx, "QLinear" + m.node("op").op_type):
        return f"onnxruntime's CPU provider has no QLinear{m.node('op').op_type} kernel"
    io = _check_io(m, ("dqx",))
    if isinstance(io, str):
        return io
    m.extra.update(x=io["dqx"], y=io["q"])
    return None


def _softmax_since(opset: int) -> int:
    return 13 if opset >= 13 else 11 if opset >= 11 else 1


def emit_unary(m: Match, rw: Rewrite) -> str:
    x, y, node = m.extra["x"], m.extra["y"], m.node("op")
    attrs = attr_protos(node)
    if node.op_type in ("AveragePool", "GlobalAveragePool"):
        attrs["channels_last"] = 0
    if node.op_type == "Softmax":
        attrs["opset"] = _softmax_since(m.ctx.opset(""))
    use_ms_domain(m.ctx)
    inputs = [m["x"], m["x_s"], _zero(rw, m, "x_z", x), m["y_s"], _zero(rw, m, "y_z", y)]
    out = rw.add("QLinear" + node.op_type, inputs, attrs=attrs, domain=MS_DOMAIN).outputs[0]
    _record(m, out, node.outputs[0], y.dtype)
    return out


QLINEAR_UNARY = Rule("qlinear-unary", quantize(op.Sigmoid(dq("dqx", "x"), _types=UNARY, _name="op")),
                     emit_unary, check_unary, emits="QLinear")


def check_binary(m: Match) -> str | None:
    if not contrib_allowed(m.graph, m.ctx, "QLinear" + m.node("op").op_type):
        return f"onnxruntime's CPU provider has no QLinear{m.node('op').op_type} kernel"
    io = _check_io(m, ("dqa", "dqb"))
    if isinstance(io, str):
        return io
    m.extra.update(a=io["dqa"], b=io["dqb"], y=io["q"])
    return None


def emit_binary(m: Match, rw: Rewrite) -> str:
    node = m.node("op")
    a, b, y = m.extra["a"], m.extra["b"], m.extra["y"]
    use_ms_domain(m.ctx)
    inputs = [m["a"], m["a_s"], _zero(rw, m, "a_z", a), m["b"], m["b_s"], _zero(rw, m, "b_z", b),
              m["y_s"], _zero(rw, m, "y_z", y)]
    out = rw.add("QLinear" + node.op_type, inputs, domain=MS_DOMAIN).outputs[0]
    _record(m, out, node.outputs[0], y.dtype)
    return out


QLINEAR_BINARY = Rule("qlinear-binary", quantize(op.Add(dq("dqa", "a"), dq("dqb", "b"), _types=("Add", "Mul"), _name="op")),
                      emit_binary, check_binary, emits="QLinear")


@register(level=2, target="ort", priority=30, name="ort-qdq-fusion")
class OrtQdqFusion(RulePass):
    """DQ → Conv/MatMul/Gemm/pooling/activation/Add/Mul → Q units → QLinear*/QGemm kernels."""

    rules = (QLINEAR_CONV, QLINEAR_MATMUL, QGEMM, QGEMM_FLOAT, QLINEAR_UNARY, QLINEAR_BINARY)

    def applies(self, graph: Graph, ctx: PassContext) -> bool:
        root = graph
        while root.parent is not None:
            root = root.parent
        return root is ctx.model.graph and graph.has_op("DequantizeLinear")

    def facts(self, graph: Graph, ctx: PassContext) -> Facts:
        return Facts(graph, ctx)


@register(level=2, target="ort", priority=31, name="ort-qlinear-concat")
class OrtQLinearConcat(Pass):
    """Q(Concat(DQ(x0), DQ(x1), ...)) → com.microsoft QLinearConcat (inputs' parameters may differ).

    Concat is variadic, so this is a walk rather than a rule: every input must come from a uint8
    per-tensor DQ with constant parameters, Q must be uint8 per tensor, and the Concat's float
    output must be read by the Q alone (not a graph output). Concats whose inputs all share Q's
    parameters are level 1's (``qdq-drop-around``: a plain Concat of the integers)."""

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        if not contrib_allowed(graph, ctx, "QLinearConcat"):
            return PassResult(False, {"fused": 0})
        shapes, fused = Shapes(graph, ctx), 0
        for q in graph.nodes("QuantizeLinear"):
            if not graph.has_node(q) or not is_q(q):
                continue
            cat = graph.producer(q.inputs[0])
            if cat is None or cat.op_type != "Concat" or cat.domain not in ("", "ai.onnx"):
                continue
            if graph.is_output(cat.outputs[0]) or len(graph.uses(cat.outputs[0])) != 1:
                continue
            py = qparams(graph, q, shapes)
            dqs = [graph.producer(v) for v in cat.inputs]
            params = [qparams(graph, d, shapes) if is_dq(d) else None for d in dqs]
            if py is None or not py.per_tensor or py.dtype not in ACTIVATION_TYPES or any(
                    p is None or not p.per_tensor or p.dtype != py.dtype for p in params):
                continue

            def zero(node, p: QParams) -> str:
                if len(node.inputs) > 2 and node.inputs[2]:
                    return node.inputs[2]
                return graph.add_initializer(np.zeros((), helper.tensor_dtype_to_np_dtype(p.dtype)), "zero_point")

            inputs = [q.inputs[1], zero(q, py)]
            for d, p in zip(dqs, params):
                inputs += [d.inputs[0], d.inputs[1], zero(d, p)]
            out, info = q.outputs[0], graph.value_info.get(q.outputs[0])
            use_ms_domain(ctx)
            new = graph.add_node("QLinearConcat", inputs, 1, {"axis": cat.attr("axis")}, domain=MS_DOMAIN,
                                 name=(cat.name or "concat") + "_QLinearConcat", near=cat)
            ctx.absorbed(new, [*dict.fromkeys(d.name for d in dqs), cat.name, q.name])
            graph.remove_nodes([q, cat])
            graph.rename_value(new.outputs[0], out)
            if info is not None:
                graph.set_value_info(out, info)
            for d in dict.fromkeys(dqs):
                if graph.has_node(d) and not graph.uses(d.outputs[0]) and not graph.is_output(d.outputs[0]):
                    graph.remove_nodes([d])
            fused += 1
        return PassResult(fused > 0, {"fused": fused})
