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
4. Softmax / LogSoftmax / Hardmax (opset ≥ 13: one axis) and com.microsoft QLinearSoftmax with
   that semantics: axis = p[axis]. Concat (every input a same-perm Transpose read only by it): axis = p[axis]; Split: axis =
   p[axis], its sizes unchanged, a Transpose below each part; Slice with constant axes (or none:
   all axes in order) and Pad with constant pads: axes / pads map through p. com.microsoft
   QLinearConcat likewise (every data input a same-perm Transpose, its scales and zero points
   one-element constants): a quantized SqueezeNet's or GoogLeNet's branches meet in one. Resize
   (opset ≥ 11, no ``axes`` attribute) with constant roi / scales / sizes: their entries map
   through p (a Keras UpSampling2D between NHWC Transposes).

A Transpose moves only when it *pays*: a walk down its chain of sole readers (a step at a time,
the same rules) reaches another Transpose or an op where q becomes the identity — so a Transpose
that would only travel (an attention's ``Transpose → Mul → MatMul``) stays where exporters and
fusion patterns expect it. Refused: a Transpose whose output has other readers or is a graph
output, ops of other domains, unknown ranks, non-constant axes/pads, Squeeze or a reduction
without axes.

``propagate`` (used by the channels-last layout, level 3) moves Transposes by the same rules but
op by op in topological order, wherever most of an op's inputs are such Transposes: it reaches
regions no single walk pays for, and the caller judges the result by its node count.
"""

from __future__ import annotations

from typing import Callable

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
# com.microsoft elementwise kernels: their data input slots (the other inputs are scalar scales / zero points)
MS_ELEMENTWISE = {"QLinearAdd": (0, 3), "QLinearMul": (0, 3), "QLinearSigmoid": (0,), "QLinearLeakyRelu": (0,)}
MAX_WALK = 32


def _elementwise(node: Node) -> tuple[int, ...] | None:
    """The data slots of an elementwise op (every input for standard ones), else None."""
    if node.domain in ("", "ai.onnx") and (node.op_type in UNARY or node.op_type in BINARY):
        return tuple(range(len(node.inputs)))
    if node.domain == "com.microsoft" and node.op_type in MS_ELEMENTWISE:
        return MS_ELEMENTWISE[node.op_type]
    return None


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
                 pads: list[int] | None = None, slice_axes: list[int] | None = None,
                 constants: dict[int, np.ndarray] | None = None):
        self.perm, self.axes, self.axis, self.pads, self.slice_axes = perm, axes, axis, pads, slice_axes
        self.constants = constants or {}  # input slot -> its new constant


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


def _softmax_axis(node: Node, opset: int) -> bool:
    """A softmax over one axis (opset 13's semantics; before it, the axes from ``axis`` on were
    flattened into one, which a permutation does not keep). com.microsoft QLinearSoftmax says which
    semantics it has in its ``opset`` attribute."""
    if node.domain in ("", "ai.onnx") and node.op_type in ("Softmax", "LogSoftmax", "Hardmax"):
        return opset >= 13
    return node.domain == "com.microsoft" and node.op_type == "QLinearSoftmax" and int(node.attr("opset", 0)) >= 13


def step(graph: Graph, node: Node, p: list[int], sources: set[str], opset: int) -> _Step | None:
    """The move of ``Transpose(p)`` (its outputs: ``sources``) below ``node``, or None."""
    n, kind = len(p), node.op_type
    if kind == "Split" and node.domain in ("", "ai.onnx") and node.inputs[0] in sources:
        # split sizes (an input or an attribute) and num_outputs stay: they count along the axis
        if any(v in sources for v in node.inputs[1:]) or not all(node.outputs):
            return None
        axis = _norm([int(node.attr("axis", 0))], n)
        return _Step(p, axis=p[axis[0]]) if axis else None
    if len(node.outputs) != 1:
        return None
    if kind == "QLinearConcat" and node.domain == "com.microsoft":
        data_slots = range(2, len(node.inputs), 3)
        params = [v for i, v in enumerate(node.inputs) if i not in data_slots]
        if not all(node.inputs[i] in sources for i in data_slots) or any(
                v in sources or (c := graph.const(v)) is None or c.size != 1 for v in params if v):
            return None
        axis = _norm([int(node.attr("axis"))], n)
        return _Step(p, axis=p[axis[0]]) if axis else None
    if _softmax_axis(node, opset) and node.inputs[0] in sources:  # one axis: it maps through p
        if any(v in sources or (c := graph.const(v)) is None or c.size != 1 for v in node.inputs[1:] if v):
            return None
        axis = _norm([int(node.attr("axis", -1))], n)
        return _Step(p, axis=p[axis[0]]) if axis else None
    data = _elementwise(node)
    if node.domain == "com.microsoft" and data is not None:
        for slot, value in enumerate(node.inputs):
            if not value or value in sources:
                continue
            array = graph.const(value)
            if array is None or array.ndim > n or (slot not in data and array.size != 1):
                return None
        return _Step(p) if node.inputs[0] in sources else None
    if node.domain not in ("", "ai.onnx"):
        return None
    if kind in UNARY or kind in BINARY:
        if kind in ("QuantizeLinear", "DequantizeLinear") and any(
                (c := graph.const(v)) is None or c.size != 1 for v in node.inputs[1:] if v):  # per channel: axis-bound
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
    if kind == "Resize" and opset >= 11 and node.attr("axes") is None:
        if node.inputs[0] not in sources:
            return None
        constants = {}
        for slot in (1, 2, 3):  # roi [starts..., ends...], scales, sizes: in the transposed layout
            value = node.inputs[slot] if len(node.inputs) > slot else ""
            if not value:
                continue
            array = graph.const(value)
            if value in sources or array is None or array.ndim != 1:
                return None
            if array.size == 0:
                continue
            width = 2 * n if slot == 1 else n
            if array.size != width:
                return None
            new = np.empty_like(array)
            for i in range(n):
                new[p[i]] = array[i]
                if slot == 1:
                    new[n + p[i]] = array[n + i]
            constants[slot] = new
        return _Step(p, constants=constants)
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
        """``value`` is a Transpose by p (which may have other readers: it stays for them), or an
        elementwise op read only by ``reader`` whose live inputs all are, recursively."""
        if depth <= 0:
            return False
        producer = self.graph.producer(value)
        if producer is None:
            return False
        if producer.op_type == "Transpose" and producer.domain in ("", "ai.onnx"):
            return _perm(producer, len(p)) == p
        sole = self.sole_reader(value)
        if sole is None or sole.id != reader.id:
            return False
        if _elementwise(producer) is not None:
            live = [v for v in producer.inputs if v and self.graph.const(v) is None]
            return bool(live) and all(self.upstream(v, p, producer, depth - 1) for v in dict.fromkeys(live))
        return False

    def readers(self, value: str) -> list[Node] | None:
        if self.graph.is_output(value):
            return None
        found = list({u.id: u for u, _ in self.graph.uses(value)}.values())
        return found or None

    def pays(self, tr: Node, p: list[int]) -> bool:
        self.budget = 4 * MAX_WALK
        return self._pays(tr.outputs[0], p, MAX_WALK)

    def _pays(self, value: str, p: list[int], depth: int) -> bool:
        """Every reader of ``value`` (a Transpose by p once moved) leads the Transpose to another
        Transpose or to the identity: a fan-out pays only when each branch does."""
        readers = self.readers(value)
        self.budget -= 1
        if readers is None or depth <= 0 or self.budget <= 0:
            return False
        for node in readers:
            if node.op_type == "Transpose" and node.domain in ("", "ai.onnx"):
                continue
            move = step(self.graph, node, p, self.same_perm_inputs(node, p, value), self.opset)
            if move is None:
                return False
            if move.perm != list(range(len(move.perm))) and not all(
                    self._pays(out, move.perm, depth - 1) for out in node.outputs):  # a Split: every part
                return False
        return True


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
        elif value and slot in (_elementwise(node) or ()):
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
    for slot, array in move.constants.items():
        inputs[slot] = graph.add_initializer(array, f"{node.op_type.lower()}_perm")
    outs = node.outputs
    infos = [graph.value_info.get(out) for out in outs]
    new = graph.add_node(node.op_type, inputs, len(outs), attrs, domain=node.domain, name=node.name, near=node)
    identity = move.perm == list(range(len(move.perm)))
    moved: list[Node | None] = []
    lasts = []
    for made in new.outputs:  # one output, or a Split's parts: a Transpose below each
        tr_out = None if identity else graph.add_node("Transpose", [made], 1, {"perm": move.perm}, name=tr.name, near=node)
        moved.append(tr_out)
        lasts.append(made if tr_out is None else tr_out.outputs[0])
    for out, last in zip(outs, lasts):
        graph.replace_all_uses(out, last)
    graph.remove_nodes([node])
    for source in dict.fromkeys(removed):
        if graph.has_node(source) and not graph.uses(source.outputs[0]) and not graph.is_output(source.outputs[0]):
            graph.value_info.pop(source.outputs[0], None)
            graph.remove_nodes([source])
    for out, last, info in zip(outs, lasts, infos):
        graph.rename_value(last, out)
        if info is not None:
            graph.set_value_info(out, info)
    return moved[0]  # a Split's other parts move on the pass's next run


@register(level=1, priority=38)
class PushTransposes(Pass):
    """Move Transposes below elementwise ops, Unsqueeze/Squeeze, reductions, Concat, Split, Slice and
    Pad when that brings them to another Transpose or makes them the identity."""

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        if not graph.has_op("Transpose"):
            return PassResult(False, {"pushed": 0})
        walker, pushed = _Walker(graph, ctx), 0
        cancelled = cancel_inverse_readers(graph) + drop_layout_only(graph, ctx)
        for first in graph.nodes("Transpose"):
            if not graph.has_node(first) or first.domain not in ("", "ai.onnx"):
                continue
            p = _perm(first, len(first.attr("perm") or []) or None)
            if p is None or not walker.pays(first, p):
                continue
            for tr in split_readers(graph, first, p):
                steps = 0
                while tr is not None and graph.has_node(tr) and steps < MAX_WALK:
                    reader = walker.sole_reader(tr.outputs[0])
                    if reader is None or reader.op_type == "Transpose":
                        break  # chains merges the two
                    moved = push(graph, ctx, tr, p, walker)
                    if moved is tr:
                        break
                    pushed += 1
                    steps += 1
                    tr = moved
                    if tr is not None:
                        p = _perm(tr, None)
                        if len(walker.readers(tr.outputs[0]) or []) > 1 and walker.pays(tr, p):
                            tr = split_readers(graph, tr, p)[0]  # the other branches move on the next run
        return PassResult(pushed + cancelled > 0, {"pushed": pushed, "cancelled": cancelled})


def split_readers(graph: Graph, tr: Node, p: list[int]) -> list[Node]:
    """One Transpose per reader of ``tr`` (so each branch of a fan-out moves on its own)."""
    readers = list({u.id: u for u, _ in graph.uses(tr.outputs[0])}.values())
    if len(readers) <= 1 or graph.is_output(tr.outputs[0]):
        return [tr]
    copies = []
    for reader in readers:
        copy = graph.add_node("Transpose", [tr.inputs[0]], 1, {"perm": p}, name=tr.name, near=tr)
        for slot, value in enumerate(reader.inputs):
            if value == tr.outputs[0]:
                graph.set_input(reader, slot, copy.outputs[0])
        copies.append(copy)
    graph.remove_nodes([tr])
    return copies


def drop_layout_only(graph: Graph, ctx: PassContext) -> int:
    """A Transpose that keeps the order of the elements (it moves only size-1 axes: the
    [N, 1, 1, C] → [N, C, 1, 1] after a channels-last global pool) read only by a Flatten or a
    Reshape to a constant shape without 0s: the reader gives the same tensor from its input."""
    dropped = 0
    for tr in graph.nodes("Transpose"):
        if not graph.has_node(tr) or tr.domain not in ("", "ai.onnx") or tr.attr("perm") is None:
            continue
        readers = {u.id: u for u, _ in graph.uses(tr.outputs[0])}
        if len(readers) != 1 or graph.is_output(tr.outputs[0]):
            continue
        reader = next(iter(readers.values()))
        perm = [int(v) for v in tr.attr("perm")]
        out = graph.declared_shape(tr.outputs[0]) or ctx.shapes.dims(graph, tr.outputs[0]) or _after_pool(graph, tr, perm)
        if out is None or len(out) != len(perm):
            continue
        big = [perm[i] for i, d in enumerate(out) if d != 1]  # an unknown dim counts as big
        if big != sorted(big):
            continue
        if reader.op_type == "Flatten" and reader.domain in ("", "ai.onnx"):
            axis = int(reader.attr("axis", 1))
            shape_in = [None] * len(perm)
            for i, src in enumerate(perm):
                shape_in[src] = out[i]
            same_prefix = sorted(perm[:axis]) == list(range(axis))  # the same dims before the axis, in any order
            if axis < 0 or not same_prefix and (
                    any(not isinstance(d, int) for d in out[:axis] + shape_in[:axis]) or
                    int(np.prod(out[:axis], dtype=np.int64)) != int(np.prod(shape_in[:axis], dtype=np.int64))):
                continue
        elif reader.op_type == "Reshape" and reader.domain in ("", "ai.onnx") and reader.inputs[0] == tr.outputs[0]:
            target = _ints(graph, reader.inputs[1]) if len(reader.inputs) > 1 else None
            if target is None or 0 in target:
                continue
        else:
            continue
        graph.set_input(reader, 0, tr.inputs[0])
        graph.remove_nodes([tr])
        dropped += 1
    return dropped


def _after_pool(graph: Graph, tr: Node, perm: list[int]) -> list | None:
    """The output shape of a Transpose of a channels-last global pool's [N, 1, 1, C] (None: N and C
    unknown), where onnx inferred none (a QOperator model's com.microsoft ops)."""
    producer = graph.producer(tr.inputs[0])
    if producer is None or producer.op_type != "QLinearGlobalAveragePool" or len(perm) != 4 or \
            not producer.attr("channels_last", 0):
        return None
    return [[None, 1, 1, None][p] for p in perm]


def cancel_inverse_readers(graph: Graph) -> int:
    """``Transpose(Transpose(x, p), inverse of p)`` among several readers of the first: that reader
    reads x (the first Transpose stays for its other readers). ``merge-chains`` does the
    single-reader case; this is what lets a layout change cancel at a fan-out (a residual)."""
    cancelled = 0
    for tr in graph.nodes("Transpose"):
        if not graph.has_node(tr) or tr.domain not in ("", "ai.onnx") or tr.attr("perm") is None:
            continue
        p = [int(v) for v in tr.attr("perm")]
        for reader, _ in list(graph.uses(tr.outputs[0])):
            if reader.op_type != "Transpose" or reader.domain not in ("", "ai.onnx") or reader.attr("perm") is None:
                continue
            q = [int(v) for v in reader.attr("perm")]
            if len(q) != len(p) or [p[i] for i in q] != list(range(len(p))) or graph.is_output(reader.outputs[0]):
                continue
            graph.replace_all_uses(reader.outputs[0], tr.inputs[0])
            graph.remove_nodes([reader])
            cancelled += 1
        if graph.has_node(tr) and not graph.uses(tr.outputs[0]) and not graph.is_output(tr.outputs[0]):
            graph.remove_nodes([tr])
    return cancelled


CHANNELS_FIRST = [0, 3, 1, 2]  # the view of a channels-last (NHWC) tensor as NCHW


def shuffle_channels_last(graph: Graph, first: Node, nchw_view: Node) -> int:
    """ShuffleNet's channel shuffle on a channels-last tensor y read through its NCHW view:
    ``Reshape(view, [N, g, c, H, W]) → Transpose(0, 2, 1, 3, 4) → Reshape([N, g·c, H, W])`` becomes
    ``Reshape(y, [N, H, W, g, c]) → Transpose(0, 1, 2, 4, 3) → Reshape([N, H, W, g·c])`` and a view of
    that: one Transpose where the NCHW form keeps three (ORT "all" keeps two). Returns 1 when made."""
    def ints(node: Node) -> list[int] | None:
        if len(node.inputs) < 2 or node.attr("allowzero", 0):
            return None
        return _ints(graph, node.inputs[1])

    def sole(value: str, op_type: str) -> Node | None:
        readers = {u.id: u for u, _ in graph.uses(value)}
        if len(readers) != 1 or graph.is_output(value):
            return None
        reader = next(iter(readers.values()))
        return reader if reader.op_type == op_type and reader.domain in ("", "ai.onnx") else None

    five = ints(first)
    shuffle = sole(first.outputs[0], "Transpose")
    if five is None or len(five) != 5 or shuffle is None or _perm(shuffle, 5) != [0, 2, 1, 3, 4]:
        return 0
    last = sole(shuffle.outputs[0], "Reshape")
    four = ints(last) if last is not None else None
    n, g, c, h, w = five
    if four is None or len(four) != 4 or min(g, c, h, w) <= 0 or four[1] not in (g * c, -1) or \
            four[2:] != [h, w] or 0 in four[1:] or four[0] != n:
        return 0
    y = nchw_view.inputs[0]
    split = graph.add_node("Reshape", [y, graph.add_initializer(np.array([n, h, w, g, c], np.int64), "shape")], 1,
                           name=first.name, near=first)
    swap = graph.add_node("Transpose", [split.outputs[0]], 1, {"perm": [0, 1, 2, 4, 3]}, name=shuffle.name, near=first)
    merged = graph.add_node("Reshape", [swap.outputs[0], graph.add_initializer(np.array([n, h, w, g * c], np.int64),
                                                                              "shape")], 1, name=last.name, near=first)
    back = graph.add_node("Transpose", [merged.outputs[0]], 1, {"perm": CHANNELS_FIRST}, name=f"{last.name}/view",
                          near=first)
    out, info = last.outputs[0], graph.value_info.get(last.outputs[0])
    graph.replace_all_uses(out, back.outputs[0])
    graph.remove_nodes([first, shuffle, last])
    if not graph.uses(nchw_view.outputs[0]) and not graph.is_output(nchw_view.outputs[0]):
        graph.remove_nodes([nchw_view])
    graph.rename_value(back.outputs[0], out)
    if info is not None:
        graph.set_value_info(out, info)
    return 1


def _data_slots(node: Node) -> tuple[int, ...]:
    """The input slots a layout runs through (the others are axes, sizes, scales, zero points)."""
    slots = _elementwise(node)
    if slots is not None:
        return slots
    if node.op_type == "Concat" and node.domain in ("", "ai.onnx"):
        return tuple(range(len(node.inputs)))
    if node.op_type == "QLinearConcat" and node.domain == "com.microsoft":
        return tuple(range(2, len(node.inputs), 3))
    return (0,)


def propagate(graph: Graph, ctx: PassContext, p: list[int], rank: Callable[[str], int | None]) -> int:
    """Carry a layout forward through the graph: in topological order, an op whose live inputs are
    mostly Transposes by ``p`` (the views back to the original layout of tensors another layout
    holds) runs in that layout — each of its other live inputs gets the inverse Transpose, and the
    Transposes move below it. Returns the ops moved.

    ``push-transposes`` moves a Transpose only where its whole walk pays, so where a block's output
    meets the next block's (a residual ``Sum``, YOLO's Split/Concat fan-outs) neither moves; a
    channels-last conversion uses this to let every region of layout-agnostic ops between its
    kernels run channels-last, with Transposes only where the region ends. The caller judges the
    result (``ort-qdq-nhwc`` counts nodes before and after on a copy); ``rank`` gives the rank of a value
    that is no view (an input the op would have to transpose)."""
    walker, opset, moved = _Walker(graph, ctx), ctx.opset(""), 0
    inverse = [int(i) for i in np.argsort(p)]

    def view(value: str) -> Node | None:
        producer = graph.producer(value)
        ok = producer is not None and producer.op_type == "Transpose" and producer.domain in ("", "ai.onnx")
        return producer if ok and _perm(producer, len(p)) == p else None

    def own(node: Node, value: str) -> Node:
        """``node``'s own Transpose by p for ``value``: the view itself when ``node`` alone reads it, else
        a copy of the view, or, for a value in the original layout, the inverse Transpose and a view of it."""
        source = view(value)
        if source is not None and walker.sole_reader(value) is not None:
            return source
        if source is not None:
            made = graph.add_node("Transpose", [source.inputs[0]], 1, {"perm": p}, name=source.name, near=node)
        else:
            into = graph.add_node("Transpose", [value], 1, {"perm": inverse}, name=f"{node.name}/to_layout", near=node)
            made = graph.add_node("Transpose", [into.outputs[0]], 1, {"perm": p}, name=f"{node.name}/view", near=node)
        for slot, input_value in enumerate(node.inputs):
            if input_value == value:
                graph.set_input(node, slot, made.outputs[0])
        return made

    for node_id in graph.topological_ids():
        node = graph.node(node_id)
        if not graph.has_node(node) or node.op_type == "Transpose" or len(node.outputs) < 1:
            continue
        if node.op_type == "Reshape" and p == CHANNELS_FIRST and (source := view(node.inputs[0])) is not None:
            moved += shuffle_channels_last(graph, node, source)
            continue
        live = list(dict.fromkeys(v for s in _data_slots(node) if s < len(node.inputs)
                                  and (v := node.inputs[s]) and graph.const(v) is None))
        views = [v for v in live if view(v) is not None]
        if not views or 2 * len(views) < len(live):
            continue
        others = [v for v in live if v not in views]
        if any(rank(v) != len(p) for v in others):
            continue
        move = step(graph, node, p, set(live), opset)
        if move is None or move.perm != p:
            continue
        first = [own(node, value) for value in live][0]  # each a Transpose by p read by this op alone
        if push(graph, ctx, first, p, walker) is not first:
            moved += 1
    return moved
