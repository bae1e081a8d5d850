"""Quantized CNN kernels in channels-last layout (``--target ort`` level 2), as onnxruntime's
``NhwcTransformer`` does at its "all" level.

onnxruntime's uint8 convolution (MLAS) computes in NHWC: an NCHW ``QLinearConv`` transposes its
input and its output around every call. The com.microsoft ``QLinearConv`` with ``channels_last=1``
takes NHWC directly, as do ``NhwcMaxPool`` and ``QLinearGlobalAveragePool`` / ``QLinearAveragePool``
with ``channels_last=1``. This pass rewrites each of those ops ``op(x)`` as
``Transpose(op_nhwc(Transpose(x, [0,2,3,1])), [0,3,1,2])``; ``push-transposes`` (level 1, every
iteration) then moves the [0,3,1,2] Transposes down through Q/DQ, PRelu, QLinearAdd/QLinearMul,
QLinearSigmoid and other elementwise ops until they meet the next op's [0,2,3,1] and cancel, so a
chain of quantized convolutions keeps one Transpose at each end (a Keras model's own NHWC↔NCHW
Transposes cancel against them too: fewer nodes than before).

Converted: a 2-D ``QLinearConv`` with a constant 4-D weight (rank-4 input); a uint8/int8 ``MaxPool``
with one output, storage_order 0 and 2-D kernel; ``QLinearGlobalAveragePool`` / ``QLinearAveragePool``
(channels_last 0, rank-4 input). Refused: other ranks, unknown ranks, a MaxPool with an Indices
output or over float. Weights keep their OIHW layout (the NHWC kernel reads them so).

The change is tried first on a copy of the graph (with push-transposes, merge-chains, eliminate and
DCE until nothing moves): when more than one Transpose would be added (a region's exit as well as its entry —
a channel shuffle, a Concat or a float op between convolutions keeps a pair each), the graph
stays in NCHW and the report's notes say so; the kernels are then the ones ORT's extended level runs.
One Transpose is allowed: the entry an NCHW graph input needs (its exit vanishes into the Flatten
after a global pool) — and only where it pays, measured (bench/results/stop31-qdq.md): onnxruntime's
NCHW QLinearConv is slow on dense k×k kernels (the NCHW form of ResNet-18 runs 1.31-1.35× the
original under ORT "all", MTCNN O-net 1.7×, DNSMOS 2×) but as fast on 1×1 and depthwise ones
(MobileNetV3 / EfficientNet-B0 in NCHW: 0.82-0.95× of ORT "all", the channels-last form 0.76-0.93×).
So the entry Transpose is taken when dense k×k kernels hold at least half the convolution weights
(ResNet-18: 98 %, 35 nodes vs ORT extended's 34 — the one node every channels-last form of an NCHW
input needs; ORT's own "all" level has 36), and refused below (MobileNetV3: 0 %, EfficientNet-B0:
0 %: 202 / 241 nodes, ORT extended's counts).
"""

from __future__ import annotations

from onnx import TensorProto

from graphtool.ir.graph import Graph, Node
from graphtool.pass_manager import Pass, PassContext, PassResult, register
from graphtool.passes._fuse_common import attr_protos
from graphtool.passes._ort_common import MS_DOMAIN, Shapes, contrib_allowed, use_ms_domain

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
    """QLinearConv / uint8 MaxPool / QLinear(Global)AveragePool → their channels-last com.microsoft forms."""

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        if not (graph.has_op("QLinearConv") or graph.has_op("QLinearGlobalAveragePool")):
            return PassResult(False, {"converted": 0})
        if not contrib_allowed(graph, ctx, "QLinearConv", "NhwcMaxPool", "QLinearGlobalAveragePool"):
            return PassResult(False, {"converted": 0})
        plan = self.plan(graph, ctx)
        if not plan:
            return PassResult(False, {"converted": 0})
        refused = getattr(ctx, "_nhwc_refused", {})
        if refused.get(id(graph)) == len(plan):
            return PassResult(False, {"converted": 0})
        added = self.trial(graph, ctx, plan)
        why = None
        if added > MAX_ADDED:
            why = f"it would add {added} nodes (more than {MAX_ADDED}, the entry Transpose)"
        elif added > 0:
            share = dense_share(graph, plan)
            if share < DENSE_SHARE:
                why = (f"it would add the entry Transpose, and only {share:.0%} of the convolution weights are dense "
                       f"k×k kernels (below {DENSE_SHARE:.0%}: 1×1 and depthwise convolutions run as fast in NCHW)")
        if why:
            refused[id(graph)] = len(plan)
            ctx._nhwc_refused = refused
            ctx.notes.append(f"ort-qdq-nhwc: channels-last layout refused: {why}")
            return PassResult(False, {"converted": 0, "refused": 1})
        apply(graph, ctx, plan)
        return PassResult(True, {"converted": len(plan)})

    @staticmethod
    def plan(graph: Graph, ctx: PassContext) -> list[tuple[int, str, dict]]:
        shapes, plan = Shapes(graph, ctx), []
        for node in graph.nodes():
            if len(node.outputs) != 1 or not node.inputs or shapes.rank(node.inputs[0]) != 4:
                continue
            kind, domain = node.op_type, node.domain
            attrs = attr_protos(node)
            if kind == "QLinearConv" and domain in ("", "ai.onnx"):
                w = graph.const(node.inputs[3])
                if w is None or w.ndim != 4:
                    continue
                attrs["channels_last"] = 1
                plan.append((node.id, "QLinearConv", attrs))
            elif kind == "MaxPool" and domain in ("", "ai.onnx"):
                if shapes.dtype(node.inputs[0]) not in (TensorProto.UINT8, TensorProto.INT8) or node.attr("storage_order", 0):
                    continue
                plan.append((node.id, "NhwcMaxPool", {k: v for k, v in attrs.items() if k != "storage_order"}))
            elif kind in ("QLinearGlobalAveragePool", "QLinearAveragePool") and domain == MS_DOMAIN:
                if not node.attr("channels_last", 0):
                    attrs["channels_last"] = 1
                    plan.append((node.id, kind, attrs))
        return plan

    @staticmethod
    def trial(graph: Graph, ctx: PassContext, plan: list[tuple[int, str, dict]]) -> int:
        """Nodes the layout change adds once the Transposes have moved and cancelled, on a copy."""
        from graphtool.pass_manager import REGISTRY

        cleanup = [REGISTRY[name]() for name in ("push-transposes", "merge-chains", "eliminate-no-ops",
                                                 "dead-code-elimination") if name in REGISTRY]

        def settled(convert: bool) -> int:
            copy = graph.copy(graph.parent)
            if convert:
                apply(copy, None, plan)
            for _ in range(8):
                if not any([p.run(copy, ctx).changed for p in cleanup]):
                    break
            return len(copy)

        # both sides cleaned alike: a node the cleanup removes anyway is not credited to the layout
        return settled(True) - settled(False)


MAX_ADDED = 1  # the entry Transpose an NCHW graph input needs; anything more stays NCHW
DENSE_SHARE = 0.5  # the entry Transpose is paid for only where dense k×k convolutions dominate


def dense_share(graph: Graph, plan: list[tuple[int, str, dict]]) -> float:
    """The share of the planned QLinearConvs' weight elements in dense (group 1) kernels larger
    than 1×1 — a proxy for their share of the multiply-adds that needs no spatial shapes."""
    dense = total = 0
    for node_id, op_type, _ in plan:
        if op_type != "QLinearConv":
            continue
        node = graph.node(node_id)
        w = graph.const(node.inputs[3])
        if w is None or w.ndim != 4:
            continue
        total += w.size
        if int(node.attr("group", 1)) == 1 and w.shape[2] * w.shape[3] > 1:
            dense += w.size
    return dense / total if total else 0.0


def apply(graph: Graph, ctx: PassContext | None, plan: list[tuple[int, str, dict]]) -> None:
    for node_id, op_type, attrs in plan:
        _wrap(graph, ctx, graph.node(node_id), op_type, attrs)
