"""Push Transposes down through layout-agnostic ops until they cancel, merge or vanish (level 1).

TF/Keras exports (keras2onnx, tf2onnx) wrap every NHWC region in Transposes: ``Transpose → Mul →
Add → Sqrt → Log → Unsqueeze → Transpose`` or ``Transpose → ReduceMax(keepdims=0)``. Moving the
first Transpose past the ops between them lets it meet the second (``chains`` then merges the two
into one, ``eliminate`` drops an identity) or disappear into a reduction. onnxruntime's level 1
runs its transpose optimizer for the same reason.

``y = op(Transpose(x, p))`` becomes ``y = Transpose(op'(x), q)`` for:

1. elementwise ops (unary activations, Cast, Clip, Q/DQ per tensor; Add, Mul, …, Where, PRelu):
   every non-constant input must be a Transpose with the same perm read only by this op (they
   merge into one), a constant of rank ≤ the output's is transposed to match (a one-element
   constant stays as it is), q = p;
2. Unsqueeze and Squeeze with known axes: the axes stay / map through p, q is p with the new or
   removed axes accounted for;
3. reductions (ReduceMax/Min/Sum/Mean/Prod/L1/L2/LogSum/LogSumExp/SumSquare, ArgMax/ArgMin) with
   known axes: axes map through p; with keepdims=0 q drops the reduced axes (often the identity);
4. Concat (every input a same-perm Transpose read only by it): axis = p[axis]; Slice with constant
   axes (or none: all axes in order) and Pad with constant pads: axes / pads map through p.

A Transpose moves only when it *pays*: a walk down its chain of sole readers (a step at a time,
the same rules) reaches another Transpose or an op where q becomes the identity — so a Transpose
that would only travel (an attention's ``Transpose → Mul → MatMul``) stays where exporters and
fusion patterns expect it. Refused: a Transpose whose output has other readers or is a graph
output, ops of other domains, unknown ranks, non-constant axes/pads, Squeeze or a reduction
without axes.
"""

from __future__ import annotations

import numpy as np

from graphtool.ir.graph import Graph, Node
from graphtool.pass_manager import Pass, PassContext, PassResult, register
from graphtool.passes._fuse_common import attr_protos

UNARY = frozenset({"Relu", "Sqrt", "Log", "Exp", "Neg", "Abs", "Sigmoid", "Tanh", "Erf", "Reciprocal", "Floor", "Ceil",
                   "Round", "Sign", "Sin", "Cos", "Softplus", "Softsign", "HardSigmoid", "HardSwish", "LeakyRelu", "Elu",
                   "Selu", "Celu", "ThresholdedRelu", "Not", "IsNaN", "IsInf", "Cast", "Identity", "Clip", "Gelu",
                   "Mish", "QuantizeLinear", "DequantizeLinear"})
BINARY = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mean", "Sum", "Equal", "Greater", "Less",
                    "GreaterOrEqual", "LessOrEqual", "And", "Or", "Xor", "Where", "PRelu", "Mod", "BitShift"})
REDUCE = frozenset({"ReduceMax", "ReduceMin", "ReduceSum", "ReduceMean", "ReduceProd", "ReduceL1", "ReduceL2",
                    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"})
MAX_WALK = 32


def _perm(node: Node, rank: int | None) -> list[int] | None:
    perm = node.attr("perm")
    if perm is not None:
        return [int(v) for v in perm]
    return list(range(rank - 1, -1, -1)) if rank is not None else None


def _ints(graph: Graph, value: str) -> list[int] | None:
    array = graph.const(value) if value else None
    return None if array is None else [int(v) for v in np.asarray(array).reshape(-1)]


def _axes(graph: Graph, node: Node, opset: int) -> tuple[list[int] | None, bool]:
    """A node's axes and whether they are an input (else an attribute); None when unknown."""
    as_input = (node.op_type in ("Squeeze", "Unsqueeze") and opset >= 13) or (
        node.op_type == "ReduceSum" and opset >= 13) or (node.op_type in REDUCE and opset >= 18)
    if as_input:
        return (_ints(graph, node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else None), True
    axes = node.attr("axes")
    return ([int(a) for a in axes] if axes is not None else None), False


class _Step:
    """How ``Transpose(p)`` moves below ``node``: the output perm and the edits to make."""

    def __init__(self, perm: list[int], axes: list[int] | None = None, axis: int | None = None,
                 pads: list[int] | None = None, slice_axes: list[int] | None = None):
        self.perm, self.axes, self.axis, self.pads, self.slice_axes = perm, axes, axis, pads, slice_axes


def _norm(axes: list[int], rank: int) -> list[int] | None:
    out = [a + rank if a < 0 else a for a in axes]
    return out if all(0 <= a < rank for a in out) and len(set(out)) == len(out) else None


def _squeezed(p: list[int], removed: list[int]) -> list[int]:
    """q for ``Squeeze(Transpose(x, p), removed)`` = ``Transpose(Squeeze(x, p[removed]), q)``."""
    gone = {p[i] for i in removed}
    kept = [k for k in range(len(p)) if k not in gone]
    return [kept.index(p[i]) for i in range(len(p)) if i not in removed]


def _unsqueezed(p: list[int], added: list[int]) -> list[int]:
    rank = len(p) + len(added)
    rest = [r for r in range(rank) if r not in added]
    q = list(range(rank))
    for j, r in enumerate(rest):
        q[r] = rest[p[j]]
    return q


def step(graph: Graph, node: Node, p: list[int], sources: set[str], opset: int) -> _Step | None:
    """The move of ``Transpose(p)`` (its outputs: ``sources``) below ``node``, or None."""
    if node.domain not in ("", "ai.onnx") or len(node.outputs) != 1:
        return None
    n, kind = len(p), node.op_type
    if kind in UNARY or kind in BINARY:
        if kind in ("QuantizeLinear", "DequantizeLinear") and node.attr("axis") is not None and any(
                (c := graph.const(v)) is None or c.size != 1 for v in node.inputs[1:] if v):
            return None
        for slot, value in enumerate(node.inputs):
            if not value or value in sources:
                continue
            array = graph.const(value)
            if array is None or array.ndim > n or (kind in UNARY and slot == 0):
                return None
        return _Step(p) if node.inputs and node.inputs[0] in sources or kind in BINARY else None
    if kind in ("Unsqueeze", "Squeeze"):
        axes, _ = _axes(graph, node, opset)
        if axes is None:
            return None
        if kind == "Unsqueeze":
            axes = _norm(axes, n + len(axes))
            return _Step(_unsqueezed(p, axes), axes=axes) if axes is not None else None
        axes = _norm(axes, n)
        return _Step(_squeezed(p, axes), axes=sorted(p[a] for a in axes)) if axes else None
    if kind in REDUCE or kind in ("ArgMax", "ArgMin"):
        if kind in REDUCE:
            axes, _ = _axes(graph, node, opset)
            if axes is None or node.attr("noop_with_empty_axes", 0):
                return None
            axes = _norm(axes, n)
        else:
            axes = _norm([int(node.attr("axis", 0))], n)
        if not axes:
            return None
        keep = node.attr("keepdims", 1)
        new_axes = [p[a] for a in axes]
        q = p if keep else _squeezed(p, axes)
        return _Step(q, axes=sorted(new_axes) if kind in REDUCE else None,
                     axis=new_axes[0] if kind not in REDUCE else None)
    if kind == "Concat":
        if not all(v in sources for v in node.inputs):
            return None
        axis = _norm([int(node.attr("axis"))], n)
        return _Step(p, axis=p[axis[0]]) if axis else None
    if kind == "Slice" and opset >= 10:
        starts = _ints(graph, node.inputs[1]) if len(node.inputs) > 1 else None
        axes = _ints(graph, node.inputs[3]) if len(node.inputs) > 3 and node.inputs[3] else (
            list(range(len(starts))) if starts is not None else None)
        if any(v in sources for v in node.inputs[1:]) or axes is None:
            return None
        axes = _norm(axes, n)
        return _Step(p, slice_axes=[p[a] for a in axes]) if axes is not None else None
    if kind == "Pad" and 11 <= opset:
        pads = _ints(graph, node.inputs[1]) if len(node.inputs) > 1 else None
        if pads is None or len(pads) != 2 * n or (len(node.inputs) > 3 and node.inputs[3]):
            return None
        new = [0] * (2 * n)
        for i in range(n):
            new[p[i]], new[n + p[i]] = pads[i], pads[n + i]
        return _Step(p, pads=new)
    return None


class _Walker:
    def __init__(self, graph: Graph, ctx: PassContext):
        self.graph, self.opset = graph, ctx.opset("")

    def sole_reader(self, value: str) -> Node | None:
        if self.graph.is_output(value):
            return None
        readers = {u.id: u for u, _ in self.graph.uses(value)}
        return next(iter(readers.values())) if len(readers) == 1 else None

    def same_perm_inputs(self, node: Node, p: list[int], value: str, depth: int = 4) -> set[str]:
        """``value`` plus the inputs of ``node`` that are (or will be, once pushed) Transposes by p."""
        found = {value}
        for other in node.inputs:
            if other and other != value and self.upstream(other, p, node, depth):
                found.add(other)
        return found

    def upstream(self, value: str, p: list[int], reader: Node, depth: int) -> bool:
        if depth <= 0 or self.sole_reader(value) is None or self.sole_reader(value).id != reader.id:
            return False
        producer = self.graph.producer(value)
        if producer is None or producer.domain not in ("", "ai.onnx"):
            return False
        if producer.op_type == "Transpose":
            return _perm(producer, len(p)) == p
        if producer.op_type in UNARY or producer.op_type in BINARY:
            live = [v for v in producer.inputs if v and self.graph.const(v) is None]
            return bool(live) and all(self.upstream(v, p, producer, depth - 1) for v in dict.fromkeys(live))
        return False

    def pays(self, tr: Node, p: list[int]) -> bool:
        value = tr.outputs[0]
        for _ in range(MAX_WALK):
            node = self.sole_reader(value)
            if node is None:
                return False
            if node.op_type == "Transpose" and node.domain in ("", "ai.onnx"):
                return True
            move = step(self.graph, node, p, self.same_perm_inputs(node, p, value), self.opset)
            if move is None:
                return False
            if move.perm == list(range(len(move.perm))):
                return True
            value, p = node.outputs[0], move.perm
        return False


def push(graph: Graph, ctx: PassContext, tr: Node, p: list[int], walker: _Walker) -> Node | None:
    """Move ``tr`` below its sole reader; returns the new Transpose (None when it vanished, ``tr``
    itself when it cannot move yet)."""
    node = walker.sole_reader(tr.outputs[0])
    sources = {v for v in walker.same_perm_inputs(node, p, tr.outputs[0], depth=1)}
    move = step(graph, node, p, sources, walker.opset)
    if move is None:  # another input is still on its way (its Transpose is pushed later): wait
        return tr
    n, opset = len(p), walker.opset
    inverse = list(np.argsort(p))
    inputs, attrs = list(node.inputs), attr_protos(node)
    removed = []
    for slot, value in enumerate(inputs):
        if value in sources:
            source = graph.producer(value)
            inputs[slot] = source.inputs[0]
            removed.append(source)
        elif value and (node.op_type in UNARY or node.op_type in BINARY):
            array = graph.const(value)
            if array is not None and array.size > 1:
                full = array.reshape((1,) * (n - array.ndim) + array.shape)
                inputs[slot] = graph.add_initializer(np.ascontiguousarray(full.transpose(inverse)), f"{value}_perm")
    if move.axes is not None:
        axes_as_input = _axes(graph, node, opset)[1]
        if axes_as_input:
            inputs[1] = graph.add_initializer(np.array(move.axes, np.int64), "axes")
        else:
            attrs["axes"] = move.axes
    if move.axis is not None:
        attrs["axis"] = move.axis
    if move.slice_axes is not None:
        while len(inputs) < 4:
            inputs.append("")
        inputs[3] = graph.add_initializer(np.array(move.slice_axes, np.int64), "axes")
    if move.pads is not None:
        inputs[1] = graph.add_initializer(np.array(move.pads, np.int64), "pads")
    out = node.outputs[0]
    info = graph.value_info.get(out)
    new = graph.add_node(node.op_type, inputs, 1, attrs, domain=node.domain, name=node.name, near=node)
    identity = move.perm == list(range(len(move.perm)))
    moved = None if identity else graph.add_node("Transpose", [new.outputs[0]], 1, {"perm": move.perm},
                                                 name=tr.name, near=node)
    last = new.outputs[0] if identity else moved.outputs[0]
    graph.replace_all_uses(out, last)
    graph.remove_nodes([node])
    for source in dict.fromkeys(removed):
        if graph.has_node(source) and not graph.uses(source.outputs[0]) and not graph.is_output(source.outputs[0]):
            graph.value_info.pop(source.outputs[0], None)
            graph.remove_nodes([source])
    graph.rename_value(last, out)
    if info is not None:
        graph.set_value_info(out, info)
    return moved


@register(level=1, priority=38)
class PushTransposes(Pass):
    """Move Transposes below elementwise ops, Unsqueeze/Squeeze, reductions, Concat, Slice and Pad
    when that brings them to another Transpose or makes them the identity."""

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        if not graph.has_op("Transpose"):
            return PassResult(False, {"pushed": 0})
        walker, pushed = _Walker(graph, ctx), 0
        for tr in graph.nodes("Transpose"):
            steps = 0
            while tr is not None and graph.has_node(tr) and tr.domain in ("", "ai.onnx") and steps < MAX_WALK:
                p = _perm(tr, len(tr.attr("perm") or []) or (graph.shape(tr.inputs[0]) and len(graph.shape(tr.inputs[0]))) or None)
                if p is None or not walker.pays(tr, p):
                    break
                reader = walker.sole_reader(tr.outputs[0])
                if reader.op_type == "Transpose":
                    break  # chains merges the two
                moved = push(graph, ctx, tr, p, walker)
                if moved is tr:
                    break
                tr = moved
                pushed += 1
                steps += 1
        return PassResult(pushed > 0, {"pushed": pushed})
