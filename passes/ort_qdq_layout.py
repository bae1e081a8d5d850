"""Quantized CNN kernels in channels-last layout (``--target ort``), as onnxruntime's
``NhwcTransformer`` does at its layout ("all") level.

onnxruntime's uint8 convolution (MLAS) computes in NHWC: an NCHW ``QLinearConv`` transposes its
input and its output around every call. The com.microsoft ``QLinearConv`` with ``channels_last=1``
takes NHWC directly, as do ``NhwcMaxPool`` and ``QLinearGlobalAveragePool`` / ``QLinearAveragePool``
with ``channels_last=1``. The rewrite turns each of those ops ``op(x)`` into
``Transpose(op_nhwc(Transpose(x, [0,2,3,1])), [0,3,1,2])``; ``push-transposes`` (level 1, every
iteration) then moves the [0,3,1,2] Transposes down through Q/DQ, PRelu, QLinearAdd/QLinearMul,
QLinearSigmoid, QLinearConcat, Resize and other elementwise ops until they meet the next op's
[0,2,3,1] and cancel, so a chain of quantized convolutions keeps one Transpose at each end (a Keras
model's own NHWC↔NCHW Transposes cancel against them too: fewer nodes than before).

Converted: a 2-D ``QLinearConv`` with a constant 4-D weight (rank-4 input); a uint8/int8 ``MaxPool``
with one output, storage_order 0 and 2-D kernel; ``QLinearGlobalAveragePool`` / ``QLinearAveragePool``
(channels_last 0, rank-4 input). Refused: other ranks, unknown ranks, a MaxPool with an Indices
output or over float. Weights keep their OIHW layout (the NHWC kernel reads them so).

Two levels, as onnxruntime's own (level 2 mirrors its extended level, level 3 its layout level):

* ``ort-qdq-nhwc`` (level 2) changes the layout only where that adds no node — where a Keras model's
  own Transposes cancel against the entry and exit. Elsewhere the graph stays NCHW, the form ORT's
  extended level runs, and the report's notes say what level 3 would write.
* ``ort-layout-nhwc`` (level 3) changes it wherever the kernels allow. Measured on 50 QDQ CNNs under
  onnxruntime 1.32 (bench/results/stop40-layout.md): the level-3 form under ORT basic runs 0.23-1.01×
  the original under ORT "all", the NCHW form up to 3.0× (GoogLeNet, SqueezeNet: every conv pays two
  transposes it cannot share). An NCHW graph input needs one
  entry Transpose (ResNet-18: 35 nodes against ORT extended's 34 and ORT "all"'s 36); a float op
  the layout cannot cross keeps a pair. Explicit Transposes cost what the NCHW kernel's own
  per-call transposes cost, so the form is not the slower one by construction: each converted op
  adds at most two.

Both try the change on copies of the graph first, cleaned with push-transposes, merge-chains, eliminate
and DCE until nothing moves, to count what it adds — once with the kernels only wrapped, once with the
layout also carried forward through every region of layout-agnostic ops between them
(``transpose_push.propagate``: a float residual ``Sum`` between DQ and Q, YOLO's Split/Concat fan-outs,
where no single Transpose's walk pays; ShuffleNet's channel shuffle runs on the channels-last tensor
with one 5-D Transpose) — and keep the form with fewer nodes (NudeNet's YOLOv8n: 397 nodes wrapped,
349 carried, ORT "all" 348; ShuffleNetV2: 176 wrapped, 141 carried, ORT "all" 171).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from graphtool.ir.graph import Graph, Node
from graphtool.pass_manager import Pass, PassContext, PassResult, register
from graphtool.passes._fuse_common import attr_protos
from graphtool.passes._ort_common import MS_DOMAIN, Shapes, contrib_allowed, use_ms_domain
from graphtool.passes.transpose_push import propagate

TO_NHWC, TO_NCHW = [0, 2, 3, 1], [0, 3, 1, 2]


def _wrap(graph: Graph, ctx: PassContext | None, node: Node, op_type: str, attrs: dict) -> None:
    x, out = node.inputs[0], node.outputs[0]
    info = graph.value_info.get(out)
    into = graph.add_node("Transpose", [x], 1, {"perm": TO_NHWC}, name=f"{node.name}/to_nhwc", near=node)
    new = graph.add_node(op_type, [into.outputs[0], *node.inputs[1:]], 1, attrs, domain=MS_DOMAIN,
                         name=node.name, near=node)
    back = graph.add_node("Transpose", [new.outputs[0]], 1, {"perm": TO_NCHW}, name=f"{node.name}/to_nchw", near=node)
    graph.replace_all_uses(out, back.outputs[0])
    graph.remove_nodes([node])
    graph.rename_value(back.outputs[0], out)
    if info is not None:
        graph.set_value_info(out, info)
    if ctx is not None:
        use_ms_domain(ctx)


@register(level=2, target="ort", priority=90, name="ort-qdq-nhwc")
class OrtQdqNhwc(Pass):
    """QLinearConv / uint8 MaxPool / QLinear(Global)AveragePool → their channels-last com.microsoft
    forms, where the change adds no node (level 2: ORT extended's node count stays the bound)."""

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        if self.level < ctx.level:  # at level 3 ort-layout-nhwc decides (what this pass converts, it converts too)
            return PassResult(False, {"converted": 0})
        if not (graph.has_op("QLinearConv") or graph.has_op("QLinearGlobalAveragePool")):
            return PassResult(False, {"converted": 0})
        if not contrib_allowed(graph, ctx, "QLinearConv", "NhwcMaxPool", "QLinearGlobalAveragePool"):
            return PassResult(False, {"converted": 0})
        todo = plan(graph, ctx)
        if not todo:
            return PassResult(False, {"converted": 0})
        refused = ctx.__dict__.setdefault("_nhwc_refused", {})  # the manager re-runs passes until nothing moves
        if refused.get(id(graph)) == len(todo):
            return PassResult(False, {"converted": 0})
        added, carry = trial(graph, ctx, todo)
        if not self.allowed(added):
            refused[id(graph)] = len(todo)
            ctx.notes.append(f"{self.name}: channels-last layout refused: it would add {added} node"
                             f"{'s' * (added != 1)} (Transposes; level 2 keeps onnxruntime extended's NCHW "
                             "form): --level 3 writes it, faster on onnxruntime's CPU kernels")
            return PassResult(False, {"converted": 0, "refused": 1})
        wrap(graph, ctx, todo)
        if carry:
            propagate(graph, ctx, TO_NCHW, Shapes(graph, ctx).rank)
        return PassResult(True, {"converted": len(todo), "added": added})

    def allowed(self, added: int) -> bool:
        return added <= 0


@register(level=3, target="ort", priority=91, name="ort-layout-nhwc")
class OrtLayoutNhwc(OrtQdqNhwc):
    """The same change wherever the kernels allow, Transposes and all (level 3, onnxruntime's
    layout level: the channels-last kernels are the faster ones, see the module docstring)."""

    def allowed(self, added: int) -> bool:
        return True


def plan(graph: Graph, ctx: PassContext) -> list[tuple[int, str, dict]]:
    """(node id, channels-last op type, its attributes) for every op the layout change converts."""
    shapes, found = Shapes(graph, ctx), []
    for node in graph.nodes():
        if len(node.outputs) != 1 or not node.inputs or node.domain not in ("", "ai.onnx", MS_DOMAIN):
            continue
        kind, attrs = node.op_type, attr_protos(node)
        if kind == "QLinearConv" and node.domain != MS_DOMAIN:
            w = graph.const(node.inputs[3])
            if w is None or w.ndim != 4:  # a convolution's input has its weight's rank
                continue
            attrs["channels_last"] = 1
            found.append((node.id, "QLinearConv", attrs))
        elif kind == "MaxPool" and node.domain != MS_DOMAIN:
            if len(node.attr("kernel_shape") or ()) != 2 or node.attr("storage_order", 0) or \
                    not _quantized(graph, shapes, node.inputs[0]):
                continue
            found.append((node.id, "NhwcMaxPool", {k: v for k, v in attrs.items() if k != "storage_order"}))
        elif kind in ("QLinearGlobalAveragePool", "QLinearAveragePool") and node.domain == MS_DOMAIN:
            if not node.attr("channels_last", 0) and _rank4(graph, shapes, node):
                attrs["channels_last"] = 1
                found.append((node.id, kind, attrs))
    return found


def _quantized(graph: Graph, shapes: Shapes, value: str, depth: int = 8) -> bool:
    """``value`` holds 8-bit integers: its inferred type says so, or a QuantizeLinear / QLinear*
    op (or an integer MaxPool) made it (onnx infers no types past com.microsoft ops)."""
    dtype = shapes.dtype(value)
    if dtype is not None:
        return dtype in (TensorProto.UINT8, TensorProto.INT8)
    producer = graph.producer(value)
    if producer is None or depth <= 0:
        return False
    if producer.op_type == "QuantizeLinear":  # 8-bit unless its zero point or output_dtype says otherwise
        zero = graph.const(producer.inputs[2]) if len(producer.inputs) > 2 and producer.inputs[2] else None
        if zero is not None:
            return zero.dtype in (np.uint8, np.int8)
        return int(producer.attr("output_dtype", TensorProto.UINT8)) in (TensorProto.UINT8, TensorProto.INT8)
    if producer.op_type.startswith("QLinear"):  # 8-bit kernels only
        return True
    return producer.op_type in ("MaxPool", "NhwcMaxPool") and _quantized(graph, shapes, producer.inputs[0], depth - 1)


# ops whose first data input (slot) has the output's rank: a rank is read through them
SAME_RANK = {"QLinearAdd": 0, "QLinearMul": 0, "QLinearSigmoid": 0, "QLinearLeakyRelu": 0, "QLinearConcat": 2,
             "MaxPool": 0, "NhwcMaxPool": 0, "QuantizeLinear": 0, "DequantizeLinear": 0, "Relu": 0, "Clip": 0}


def _rank4(graph: Graph, shapes: Shapes, node: Node, depth: int = 16) -> bool:
    """A pool's input is 4-D: its inferred rank says so, or its kernel (AveragePool), or it comes,
    through rank-keeping ops, from a 2-D convolution (onnx infers no shapes past com.microsoft ops,
    and a QOperator model is made of them)."""
    if node.attr("kernel_shape") is not None:
        return len(node.attr("kernel_shape")) == 2
    value = node.inputs[0]
    for _ in range(depth):
        rank = shapes.rank(value)
        if rank is not None:
            return rank == 4
        producer = graph.producer(value)
        if producer is None:
            return False
        if producer.op_type == "QLinearConv":
            w = graph.const(producer.inputs[3])
            return w is not None and w.ndim == 4
        slot = SAME_RANK.get(producer.op_type)
        if slot is None or len(producer.inputs) <= slot:
            return False
        value = producer.inputs[slot]
    return False


def trial(graph: Graph, ctx: PassContext, plan: list[tuple[int, str, dict]]) -> tuple[int, bool]:
    """Nodes the layout change adds once its Transposes have moved and cancelled, on copies, and
    whether carrying the layout through the regions between the kernels (``propagate``) is what
    gets there (else the kernels are wrapped and ``push-transposes`` alone moves the Transposes)."""
    from graphtool.pass_manager import REGISTRY

    cleanup = [REGISTRY[name]() for name in ("push-transposes", "merge-chains", "eliminate-no-ops",
                                             "dead-code-elimination") if name in REGISTRY]
    rank = Shapes(graph, ctx).rank

    def settled(convert: bool, carry: bool = False) -> int:
        copy = graph.copy(graph.parent)
        if convert:
            wrap(copy, None, plan)  # no ctx: the real model's opset imports stay as they are
        if carry:
            propagate(copy, ctx, TO_NCHW, rank)
        for _ in range(8):
            if not any([p.run(copy, ctx).changed for p in cleanup]):
                break
        return len(copy)

    # both sides cleaned alike: a node the cleanup removes anyway is not credited to the layout
    before = settled(False)
    wrapped, carried = settled(True), settled(True, carry=True)
    return min(wrapped, carried) - before, carried < wrapped


def wrap(graph: Graph, ctx: PassContext | None, plan: list[tuple[int, str, dict]]) -> None:
    """Each planned op in its channels-last form between two Transposes."""
    for node_id, op_type, attrs in plan:
        _wrap(graph, ctx, graph.node(node_id), op_type, attrs)
