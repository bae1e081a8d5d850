"""Exact QDQ cleanups in standard ops (level 1): a quantized model keeps its Q/DQ semantics.

A QDQ model says "this tensor is quantized with (scale, zero point)" by a QuantizeLinear followed
by a DequantizeLinear; a backend runs each DQ → op → Q *node unit* as one integer kernel. Every
rewrite here gives bit-identical outputs (the quantized values do not change), so it is safe at
level 1 and for any backend; none folds across a Q → DQ pair (that rounds) and none turns the
model into float or into QLinear ops (``--target ort`` level 2 does that, passes/ort_qdq.py).

* ``qdq-drop-clip`` — ``Q(Relu(x))`` → ``Q(x)`` when every zero point of Q is its type's lowest
  value: Q clamps below at ``(lo - zp) * scale = 0`` already. ``Q(Clip(x, a, b))`` → ``Q(x)`` when
  Q maps a to the lowest and b to the highest quantized value (with 0.01 of a step to spare for
  float rounding); otherwise the Clip narrows the range and stays. ``Max(x, c)`` / ``Min(x, c)``
  with a one-element constant ``c`` is a Clip from below / above (a Keras LeakyReLU's threshold
  exports so: openWakeWord's embedding has 19). The Relu/Clip stays while something else reads it.
  onnxruntime: ``ReluQuantFusion`` / ``ClipQuantFusion`` (not Max/Min).
* ``qdq-drop-pair`` — ``Q(DQ(q))`` with the same scale, zero point, axis and type is ``q``
  (dequantize-then-quantize of an integer is that integer). Not when Q's output is a graph output.
* ``qdq-drop-around`` — ``DQ → op → Q`` with equal per-tensor parameters on both sides, for ops
  that only move or select elements (Reshape, Transpose, Flatten, Squeeze, Unsqueeze, Gather,
  GatherElements, Slice, Expand, Tile, Concat — every data input from such a DQ —; MaxPool,
  ReduceMax, ReduceMin with a positive scale, which keeps order; Resize in ``nearest`` mode, which
  only picks elements — ``linear``/``cubic`` interpolate, and on integers would round differently):
  the op runs on the integers, as onnxruntime's QDQ "drop" rules do. ``DQ → Split → Q`` on every
  output, all with the split input's parameters, is a Split of the integers (onnxruntime's
  ``dropSplitQDQ``). Refused: per-channel parameters (the op may move the axis),
  different parameters (a requantization), the op's float output read by anything besides the Q
  or a graph output, an int op the opset does not type (MaxPool/ReduceMax/ReduceMin below 12, Resize
  below 10), an input of unknown quantized type; a Split output read by anything but its one Q. The
  DQ stays while something else reads it.
  ``DQ → Relu → Q`` with equal per-tensor parameters and a positive scale is ``Max(q, zero point)`` on
  the integers: ``Q(max((q - z)·s, 0)) = max(q, z)`` (the quantizer writes it so when activations are
  symmetric: the zero point sits mid-range, so Q does not clamp the Relu away as ``qdq-drop-clip`` needs).
  Max types 8-bit integers from opset 12; below, refused. onnxruntime leaves the float Relu between them.
"""

from __future__ import annotations

import numpy as np

from graphtool.ir.graph import Graph, Node
from graphtool.pass_manager import Pass, PassContext, PassResult, register
from graphtool.passes._qdq_parts import TYPE_RANGE, QParams, is_dq, is_q, qparams

MOVE_OPS = frozenset({"Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Gather", "GatherElements", "Slice",
                      "Expand", "Tile", "Concat"})
ORDER_OPS = frozenset({"MaxPool", "ReduceMax", "ReduceMin"})  # exact for a positive scale only
SELECT_OPS = frozenset({"Resize"})  # exact in nearest mode only (select_ok)
STEP_MARGIN = 0.01  # of a quantization step: float rounding room for the Clip bounds


def _std(node: Node | None, *types: str) -> bool:
    return node is not None and node.domain in ("", "ai.onnx") and node.op_type in types


def _keep_name_replace(graph: Graph, inner: str, q: Node) -> None:
    """Remove ``q`` and give ``inner`` (now the quantized value) q's output name and type."""
    out = q.outputs[0]
    info = graph.value_info.get(out)
    graph.remove_nodes([q])
    graph.rename_value(inner, out)
    if info is not None:
        graph.set_value_info(out, info)
    else:
        graph.value_info.pop(out, None)


def _drop_unused(graph: Graph, node: Node | None) -> None:
    if node is not None and graph.has_node(node) and not any(graph.uses(o) or graph.is_output(o) for o in node.outputs if o):
        graph.remove_nodes([node])


def _data_input(graph: Graph, node: Node) -> str:
    """The input a Relu/Clip/Max/Min passes on (Max/Min: the one that is not the bound)."""
    if node.op_type in ("Max", "Min") and graph.const(node.inputs[0]) is not None:
        return node.inputs[1]
    return node.inputs[0]


def _clip_bounds(graph: Graph, node: Node, opset: int, shapes=None) -> tuple[float, float] | None:
    if node.op_type == "Relu":
        return 0.0, float("inf")
    if node.op_type in ("Max", "Min"):
        if len(node.inputs) != 2:
            return None
        data = _data_input(graph, node)
        bound = graph.const(node.inputs[1] if data == node.inputs[0] else node.inputs[0])
        if bound is None or bound.size != 1 or graph.const(data) is not None or bound.dtype.kind != "f":
            return None
        rank = shapes.rank(data) if shapes is not None else None
        if bound.ndim and (rank is None or rank < bound.ndim):
            return None  # broadcasting the bound would change the output's shape
        value = float(bound.reshape(-1)[0])
        return (value, float("inf")) if node.op_type == "Max" else (float("-inf"), value)
    if opset < 11:
        return float(node.attr("min", -np.inf)), float(node.attr("max", np.inf))
    bounds = []
    for slot, default in ((1, -np.inf), (2, np.inf)):
        name = node.inputs[slot] if len(node.inputs) > slot else ""
        if not name:
            bounds.append(default)
            continue
        array = graph.const(name)
        if array is None or array.size != 1:
            return None
        bounds.append(float(array.reshape(-1)[0]))
    return bounds[0], bounds[1]


def clip_redundant(p: QParams, lo_bound: float, hi_bound: float) -> bool:
    """Q already maps everything at or below ``lo_bound`` to its lowest value and everything at or
    above ``hi_bound`` to its highest (so a Clip to those bounds before it changes nothing)."""
    if p.dtype not in TYPE_RANGE:
        return False
    lo, hi = TYPE_RANGE[p.dtype]
    scale, zero = p.scale.astype(np.float64), p.zero.astype(np.float64)
    if np.any(scale <= 0):
        return False
    low_ok = np.all(lo_bound / scale + zero <= lo + 0.5 - STEP_MARGIN) if np.isfinite(lo_bound) else lo_bound < 0
    high_ok = np.all(hi_bound / scale + zero >= hi - 0.5 + STEP_MARGIN) if np.isfinite(hi_bound) else hi_bound > 0
    return bool(low_ok and high_ok)


@register(level=1, priority=33)
class QdqDropClip(Pass):
    """Q(Relu(x)) / Q(Clip(x)) / Q(Max(x, c)) / Q(Min(x, c)) → Q(x) when Q's own clamping already does it."""

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        dropped = 0
        opset = ctx.opset("")
        for q in graph.nodes("QuantizeLinear"):
            if not graph.has_node(q) or not is_q(q):
                continue
            act = graph.producer(q.inputs[0])
            if not _std(act, "Relu", "Clip", "Max", "Min"):
                continue
            shapes = ctx_shapes(graph, ctx)
            bounds = _clip_bounds(graph, act, opset, shapes)
            p = qparams(graph, q, shapes)
            if bounds is None or p is None or not clip_redundant(p, *bounds):
                continue
            graph.set_input(q, 0, _data_input(graph, act))
            _drop_unused(graph, act)
            dropped += 1
        return PassResult(changed=dropped > 0, stats={"dropped": dropped})


@register(level=1, priority=34)
class QdqDropPair(Pass):
    """Q(DQ(q)) with the same quantization → q."""

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        dropped = 0
        for q in graph.nodes("QuantizeLinear"):
            if not graph.has_node(q) or not is_q(q) or graph.is_output(q.outputs[0]):
                continue
            dq = graph.producer(q.inputs[0])
            if not is_dq(dq):
                continue
            shapes = ctx_shapes(graph, ctx)
            rank = shapes.rank(dq.inputs[0])
            a, b = qparams(graph, dq, shapes, rank), qparams(graph, q, shapes, rank)
            if a is None or b is None or not a.same(b):
                continue
            graph.replace_all_uses(q.outputs[0], dq.inputs[0])
            graph.remove_nodes([q])
            _drop_unused(graph, dq)
            dropped += 1
        return PassResult(changed=dropped > 0, stats={"dropped": dropped})


@register(level=1, priority=35)
class QdqDropAround(Pass):
    """DQ → Reshape/Transpose/Gather/Slice/MaxPool/Concat/... → Q with equal parameters: the op runs on the integers
    (Relu: as Max with the zero point)."""

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        dropped = 0
        opset = ctx.opset("")
        for q in graph.nodes("QuantizeLinear"):
            if not graph.has_node(q) or not is_q(q):
                continue
            op = graph.producer(q.inputs[0])
            if _std(op, "Relu") and _relu_to_max(graph, op, q, ctx):
                dropped += 1
                continue
            if op is None or op.domain not in ("", "ai.onnx") or op.op_type not in MOVE_OPS | ORDER_OPS | SELECT_OPS:
                continue
            if op.op_type in SELECT_OPS and not select_ok(op, opset):
                continue
            if len(op.outputs) != 1 or graph.is_output(op.outputs[0]) or len(graph.uses(op.outputs[0])) != 1:
                continue
            shapes = ctx_shapes(graph, ctx)
            qp = qparams(graph, q, shapes)
            if qp is None or not qp.per_tensor:
                continue
            if op.op_type in ORDER_OPS and (opset < 12 or np.any(qp.scale <= 0)):
                continue
            slots = range(len(op.inputs)) if op.op_type == "Concat" else [0]
            dqs = [graph.producer(op.inputs[s]) for s in slots]
            if not all(is_dq(d) for d in dqs):
                continue
            params = [qparams(graph, d, shapes) for d in dqs]
            if not all(p is not None and p.per_tensor and p.same(qp) for p in params):
                continue
            for slot, dq in zip(slots, dqs):
                graph.set_input(op, slot, dq.inputs[0])
            _keep_name_replace(graph, op.outputs[0], q)
            for dq in dict.fromkeys(dqs):
                _drop_unused(graph, dq)
            dropped += 1
        for split in graph.nodes("Split"):
            if graph.has_node(split) and _drop_around_split(graph, split, ctx):
                dropped += 1
        return PassResult(changed=dropped > 0, stats={"dropped": dropped})


def _relu_to_max(graph: Graph, relu: Node, q: Node, ctx: PassContext) -> bool:
    """DQ → Relu → Q with equal per-tensor parameters (positive scale) → Max(q, zero point) of the integers."""
    if ctx.opset("") < 12 or graph.is_output(relu.outputs[0]) or len(graph.uses(relu.outputs[0])) != 1:
        return False
    dq = graph.producer(relu.inputs[0])
    if not is_dq(dq):
        return False
    shapes = ctx_shapes(graph, ctx)
    qp, dp = qparams(graph, q, shapes), qparams(graph, dq, shapes)
    if qp is None or dp is None or not qp.per_tensor or not qp.same(dp) or np.any(qp.scale <= 0):
        return False
    zero = graph.add_initializer(qp.zero.reshape(()).copy(), "relu_zero_point")
    new = graph.add_node("Max", [dq.inputs[0], zero], 1, {}, name=(relu.name or "relu") + "_int", near=relu)
    ctx.absorbed(new, [dq.name, relu.name, q.name])
    _keep_name_replace(graph, new.outputs[0], q)
    graph.remove_nodes([relu])
    _drop_unused(graph, dq)
    return True


def select_ok(node: Node, opset: int) -> bool:
    """Resize that only picks input elements (nearest mode, the default) at an opset typing it for 8-bit ints."""
    mode = node.attr("mode", "nearest")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    return opset >= 10 and mode == "nearest"


def _drop_around_split(graph: Graph, split: Node, ctx: PassContext) -> bool:
    """DQ → Split → Q on every output, all with DQ's per-tensor parameters → Split of the integers."""
    if not _std(split, "Split"):
        return False
    dq = graph.producer(split.inputs[0])
    if not is_dq(dq):
        return False
    shapes = ctx_shapes(graph, ctx)
    p = qparams(graph, dq, shapes)
    if p is None or not p.per_tensor:
        return False
    qs = []
    for out in split.outputs:
        if not out:
            return False
        uses = graph.uses(out)
        q = uses[0][0] if len(uses) == 1 and uses[0][1] == 0 else None
        if graph.is_output(out) or not is_q(q):
            return False
        qp = qparams(graph, q, shapes)
        if qp is None or not qp.per_tensor or not qp.same(p):
            return False
        qs.append(q)
    graph.set_input(split, 0, dq.inputs[0])
    for out, q in zip(split.outputs, qs):
        _keep_name_replace(graph, out, q)
    _drop_unused(graph, dq)
    return True


def ctx_shapes(graph: Graph, ctx: PassContext):
    from graphtool.passes._ort_common import Shapes

    return Shapes(graph, ctx)


PROPAGATE_OPS = frozenset({"Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Gather", "Slice", "Expand",
                           "Tile"}) | ORDER_OPS


@register(level=1, priority=36)
class QdqPropagate(Pass):
    """Q(op(x)) → op(Q(x)) for ops that only move elements or take maxima: the op runs on integers.

    Quantizing is elementwise and non-decreasing, so it commutes with moving elements
    (Reshape, Transpose, Flatten, Squeeze, Unsqueeze, Gather, Slice, Expand, Tile) and — for a
    positive scale — with MaxPool / ReduceMax / ReduceMin, bit for bit. Moving Q above them makes
    them run on 1-byte values and lets ``qdq-drop-around`` or a kernel take the unit (onnxruntime's
    QDQPropagationTransformer). Refused: per-channel Q (the op may move the axis), the op's
    output read by anything else or a graph output, an op whose data input already comes from a
    DQ (``qdq-drop-around``'s case), MaxPool with an Indices output, MaxPool/ReduceMax/ReduceMin
    below opset 12 (no 8-bit kernels)."""

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        moved = 0
        opset = ctx.opset("")
        for q in graph.nodes("QuantizeLinear"):
            if not graph.has_node(q) or not is_q(q):
                continue
            op = graph.producer(q.inputs[0])
            if not _std(op, *PROPAGATE_OPS) or len(op.outputs) != 1:
                continue
            if graph.is_output(op.outputs[0]) or len(graph.uses(op.outputs[0])) != 1 or is_dq(graph.producer(op.inputs[0])):
                continue
            qp = qparams(graph, q, ctx_shapes(graph, ctx))
            if qp is None or not qp.per_tensor:
                continue
            if op.op_type in ORDER_OPS and (opset < 12 or np.any(qp.scale <= 0)):
                continue
            new_q = graph.add_node("QuantizeLinear", [op.inputs[0], *q.inputs[1:]], 1,
                                   {k: q.attr_proto(k) or v for k, v in q.attrs.items()}, name=q.name, near=op)
            graph.set_input(op, 0, new_q.outputs[0])
            _keep_name_replace(graph, op.outputs[0], q)
            moved += 1
        return PassResult(changed=moved > 0, stats={"moved": moved})
