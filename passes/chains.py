"""Merge two consecutive layout ops into one.

The second op of a pair is rewritten in place to read the first op's input, so the first one
disappears with dead-code elimination when nothing else reads it, and nothing is ever duplicated
(a first op with other readers stays, and the pair costs no more than before):

1. ``Transpose(Transpose(x, p1), p2)`` → ``Transpose(x, q)`` with ``q[i] = p1[p2[i]]``; removed
   entirely when ``q`` is the identity. A missing perm (reversed) needs the other perm or x's rank.
2. ``Reshape(Reshape(x, s1), s2)``, ``Reshape(Flatten(x), s2)`` and ``Reshape(Unsqueeze/Squeeze(x), s2)``
   → ``Reshape(x, s2')`` (none of them moves an element; tf2onnx's Conv1D wraps each Conv in
   Reshape → Unsqueeze → Reshape). Only the
   intermediate shape is skipped, so ``s2`` must be constant; a ``0`` entry (copy a dim, when
   ``allowzero=0``) refers to the intermediate tensor and is resolved from a positive ``s1`` entry,
   kept when ``s1`` itself copied the same dim, or taken from a static intermediate shape —
   otherwise the pair is left alone. A dynamic ``s2`` refuses.
3. ``Flatten(Reshape(x, s1), axis)`` → ``Reshape(x, [d0*...*d(axis-1), -1])`` when those leading
   intermediate dims are known (positive ``s1`` entries or a static shape) and their product is
   not 0.
4. ``Unsqueeze(Unsqueeze(x, a1), a2)`` and ``Squeeze(Squeeze(x, a1), a2)`` → one op with the
   combined axes (expressed in the second op's form: attribute before opset 13, input after).
   Negative axes need x's rank; a Squeeze without axes refuses. ``Unsqueeze(Reshape(x, s), a)`` and
   ``Squeeze(Reshape(x, s), a)`` → ``Reshape(x, s')`` with the 1s inserted into / taken out of a
   constant ``s`` (tf2onnx's Concat of per-branch ``ExpandDims``); refused when ``s`` has a 0 (a
   copied dim would move) or a squeezed entry of ``s`` is not 1.
5. ``Slice(Slice(x, s1, e1, a1, p1), s2, e2, a2, p2)`` on disjoint axes → one Slice with the
   concatenated starts/ends/axes/steps (slicing one axis does not move another's indices). All
   four inputs must be constant (opset ≥ 10); a shared axis, or a negative axis with x's rank
   unknown, refuses. (The STFT of torch exports slices channels, then every other frame.)
6. ``Concat(a, Concat(b, c, axis=k), d, axis=k)`` → ``Concat(a, b, c, d, axis=k)`` when the inner
   Concat is read by the outer one alone and not a graph output (tf2onnx chains binary Concats).
   Axes that differ, or a negative axis with the rank unknown, refuse.
"""

from __future__ import annotations

import numpy as np

from graphtool.ir.graph import Graph, Node
from graphtool.pass_manager import Pass, PassContext, PassResult, register
from graphtool.passes.eliminate import STANDARD_DOMAINS, add_constant, axes_of, forward, normalize_axes, rank_of


def _standard_producer(graph: Graph, value: str, op_types: tuple[str, ...]) -> Node | None:
    node = graph.producer(value)
    if node is None or node.op_type not in op_types or node.domain not in STANDARD_DOMAINS:
        return None
    return node


def _int_list(graph: Graph, value: str) -> list[int] | None:
    c = graph.const(value) if value else None
    return None if c is None else [int(v) for v in np.asarray(c).reshape(-1)]


# ---------------------------------------------------------------- 1. Transpose


def merge_transposes(graph: Graph, node: Node, ctx: PassContext) -> bool:
    first = _standard_producer(graph, node.inputs[0], ("Transpose",))
    if first is None:
        return False
    x = first.inputs[0]
    p1, p2 = first.attr("perm"), node.attr("perm")
    rank = len(p1) if p1 is not None else len(p2) if p2 is not None else rank_of(graph, x)
    if rank is None:
        return False
    p1 = list(p1) if p1 is not None else list(reversed(range(rank)))
    p2 = list(p2) if p2 is not None else list(reversed(range(rank)))
    if len(p1) != len(p2):
        return False
    composed = [p1[i] for i in p2]
    if composed == list(range(rank)) and forward(graph, node, [(x, node.outputs[0])]):
        return True
    graph.set_input(node, 0, x)
    graph.set_attr(node, "perm", composed)
    return True


# ---------------------------------------------------------------- 2./3. Reshape and Flatten


def _intermediate_dims(graph: Graph, first: Node) -> tuple[list[int | None], list[int] | None]:
    """What is known of the first op's output dims, and its constant target (Reshape only)."""
    out_shape = graph.declared_shape(first.outputs[0])
    target = _int_list(graph, first.inputs[1]) if first.op_type == "Reshape" and len(first.inputs) > 1 else None
    if target is not None:
        dims: list[int | None] = [t if t > 0 else None for t in target]
        if out_shape is not None and len(out_shape) == len(dims):
            dims = [d if d is not None else (s if isinstance(s, int) else None) for d, s in zip(dims, out_shape)]
        return dims, target
    if out_shape is None:
        return [], None
    return [s if isinstance(s, int) else None for s in out_shape], None


def merge_reshapes(graph: Graph, node: Node, ctx: PassContext) -> bool:
    """Reshape(Reshape(x, s1), Flatten(x), Unsqueeze(x) or Squeeze(x), s2) → Reshape(x, s2')."""
    inputs = node.inputs
    if len(inputs) < 2:
        return False
    first = _standard_producer(graph, inputs[0], ("Reshape", "Flatten", "Unsqueeze", "Squeeze"))
    if first is None or (first.op_type == "Reshape" and len(first.inputs) < 2):
        return False
    s2 = _int_list(graph, inputs[1])
    if s2 is None:
        return False
    new = list(s2)
    if not node.attr("allowzero", 0) and 0 in s2:
        dims, s1 = _intermediate_dims(graph, first)
        copy_ok = first.op_type == "Reshape" and not first.attr("allowzero", 0)
        for i, t in enumerate(s2):
            if t != 0:
                continue
            if s1 is not None and i < len(s1) and s1[i] == 0 and copy_ok:
                continue  # s1 copied x's dim i, so copying it again from x is the same
            if i < len(dims) and dims[i] is not None:
                new[i] = dims[i]
                continue
            return False
    shape = inputs[1]
    if new != s2:
        shape = add_constant(graph, np.array(new, np.int64), f"{node.name or 'reshape'}_shape", ctx)
        if shape is None:
            return False
    graph.set_input(node, 0, first.inputs[0])
    graph.set_input(node, 1, shape)
    return True


def flatten_to_reshape(graph: Graph, node: Node, ctx: PassContext) -> bool:
    """Flatten(Reshape(x, s1), axis) → Reshape(x, [prod(leading dims), -1])."""
    first = _standard_producer(graph, node.inputs[0], ("Reshape",))
    if first is None or len(first.inputs) < 2:
        return False
    dims, s1 = _intermediate_dims(graph, first)
    rank = len(s1) if s1 is not None else (len(dims) if dims else None)
    if rank is None:
        return False
    axis = node.attr("axis", 1)
    if axis < 0:
        axis += rank
    if not 0 <= axis <= rank or any(d is None for d in dims[:axis]) or len(dims) < axis:
        return False
    lead = int(np.prod([d for d in dims[:axis]], dtype=np.int64)) if axis else 1
    if lead == 0:
        return False
    x, out, name = first.inputs[0], node.outputs[0], node.name
    shape = add_constant(graph, np.array([lead, -1], np.int64), f"{name or 'flatten'}_shape", ctx)
    if shape is None:
        return False
    graph.remove_nodes([node])
    graph.add_node("Reshape", [x, shape], [out], name=name, near=first)
    return True


# ---------------------------------------------------------------- 4. Squeeze / Unsqueeze


def _nth_missing(taken: set[int], n: int) -> int:
    """The n-th (0-based) non-negative integer not in ``taken``."""
    i = -1
    while n >= 0:
        i += 1
        if i not in taken:
            n -= 1
    return i


def combined_axes(op_type: str, a1: list[int], a2: list[int], rank: int | None) -> list[int] | None:
    """Axes of one op equal to ``op(op(x, a1), a2)``; None when they cannot be normalized."""
    n1, n2 = len(a1), len(a2)
    if op_type == "Unsqueeze":
        first = normalize_axes(a1, None if rank is None else rank + n1)
        second = normalize_axes(a2, None if rank is None else rank + n1 + n2)
        if first is None or second is None:
            return None
        taken = set(second)
        merged = taken | {_nth_missing(taken, p) for p in first}
    else:
        first = normalize_axes(a1, rank)
        second = normalize_axes(a2, None if rank is None else rank - n1)
        if first is None or second is None:
            return None
        taken = set(first)
        merged = taken | {_nth_missing(taken, p) for p in second}
    if len(set(first)) != n1 or len(set(second)) != n2 or len(merged) != n1 + n2:
        return None
    return sorted(merged)


def merge_axes_ops(graph: Graph, node: Node, ctx: PassContext) -> bool:
    first = _standard_producer(graph, node.inputs[0], (node.op_type,))
    if first is None:
        return False
    a1, a2 = axes_of(graph, first), axes_of(graph, node)
    if not a1 or not a2:
        return False
    x = first.inputs[0]
    axes = combined_axes(node.op_type, a1, a2, rank_of(graph, x))
    if axes is None:
        return False
    if node.attr("axes") is not None:
        graph.set_attr(node, "axes", axes)
    else:
        value = add_constant(graph, np.array(axes, np.int64), f"{node.name or 'axes'}_axes", ctx)
        if value is None:
            return False
        graph.set_input(node, 1, value)
    graph.set_input(node, 0, x)
    return True


def reshape_then_axes(graph: Graph, node: Node, ctx: PassContext) -> bool:
    """Unsqueeze/Squeeze(Reshape(x, s), axes) → Reshape(x, s') with the 1s put in or taken out."""
    first = _standard_producer(graph, node.inputs[0], ("Reshape",))
    if first is None or len(first.inputs) < 2:
        return False
    target, axes = _int_list(graph, first.inputs[1]), axes_of(graph, node)
    if target is None or not axes or 0 in target:
        return False
    rank = len(target) + len(axes) if node.op_type == "Unsqueeze" else len(target)
    axes = normalize_axes(axes, rank)
    if axes is None or len(set(axes)) != len(axes) or not all(0 <= a < rank for a in axes):
        return False
    if node.op_type == "Unsqueeze":
        rest = iter(target)
        new = [1 if i in axes else next(rest) for i in range(rank)]
    else:
        if any(target[a] != 1 for a in axes):
            return False
        new = [t for i, t in enumerate(target) if i not in axes]
    x, out, name = first.inputs[0], node.outputs[0], node.name
    shape = add_constant(graph, np.array(new, np.int64), f"{name or 'reshape'}_shape", ctx)
    if shape is None:
        return False
    graph.remove_nodes([node])
    graph.add_node("Reshape", [x, shape], [out], name=name, near=first)
    return True


def merge_axes_or_reshape(graph: Graph, node: Node, ctx: PassContext) -> bool:
    return merge_axes_ops(graph, node, ctx) or reshape_then_axes(graph, node, ctx)


def _slice_parts(graph: Graph, node: Node) -> tuple[list[int], list[int], list[int], list[int]] | None:
    """Constant (starts, ends, axes, steps) of an opset ≥ 10 Slice; None when any is not constant."""
    inputs = node.inputs + [""] * (5 - len(node.inputs))
    if node.attr("starts") is not None:
        return None  # Slice-1: attributes, not inputs
    starts, ends = _int_list(graph, inputs[1]), _int_list(graph, inputs[2])
    if starts is None or ends is None or len(starts) != len(ends):
        return None
    axes = _int_list(graph, inputs[3]) if inputs[3] else list(range(len(starts)))
    steps = _int_list(graph, inputs[4]) if inputs[4] else [1] * len(starts)
    if axes is None or steps is None or len(axes) != len(starts) or len(steps) != len(starts):
        return None
    return starts, ends, axes, steps


def merge_slices(graph: Graph, node: Node, ctx: PassContext) -> bool:
    """Slice(Slice(x, …), …) on disjoint axes → one Slice."""
    first = _standard_producer(graph, node.inputs[0], ("Slice",))
    if first is None:
        return False
    outer, inner = _slice_parts(graph, node), _slice_parts(graph, first)
    if outer is None or inner is None:
        return False
    x = first.inputs[0]
    rank = rank_of(graph, x)
    a_in, a_out = normalize_axes(inner[2], rank), normalize_axes(outer[2], rank)
    if a_in is None or a_out is None or set(a_in) & set(a_out):
        return False
    values = [np.array(i + o, dtype=np.int64) for i, o in zip(inner, outer)]
    names = [add_constant(graph, v, f"{node.name or 'slice'}_{part}", ctx)
             for v, part in zip(values, ("starts", "ends", "axes", "steps"))]
    if any(n is None for n in names):
        return False
    graph.set_inputs(node, [x, *names])  # type: ignore[list-item]
    return True


def flatten_concats(graph: Graph, node: Node, ctx: PassContext) -> bool:
    """Concat(..., Concat(b, c, axis=k), ..., axis=k) → one Concat when the inner one has no other reader."""
    rank = next((r for r in (rank_of(graph, v) for v in node.inputs if v) if r is not None), None)
    axis = normalize_axes([node.attr("axis", 0)], rank)
    inputs, merged = [], False
    for value in node.inputs:
        inner = _standard_producer(graph, value, ("Concat",))
        if inner is not None and not graph.is_output(value) and len(graph.uses(value)) == 1 and axis is not None \
                and normalize_axes([inner.attr("axis", 0)], rank) == axis:
            inputs.extend(inner.inputs)
            merged = True
        else:
            inputs.append(value)
    if merged:
        graph.set_inputs(node, inputs)
    return merged


RULES = {
    "Transpose": merge_transposes,
    "Reshape": merge_reshapes,
    "Flatten": flatten_to_reshape,
    "Unsqueeze": merge_axes_or_reshape,
    "Squeeze": merge_axes_or_reshape,
    "Slice": merge_slices,
    "Concat": flatten_concats,
}


@register(level=1, priority=40)
class MergeChains(Pass):
    """Merge consecutive Transpose/Reshape/Flatten/Squeeze/Unsqueeze/Slice/Concat pairs into one op."""

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        stats: dict[str, int] = {}
        for op_type, rule in RULES.items():
            # Topological order so a chain of n ops collapses in one run (each op merges into
            # an already merged predecessor) instead of one pair per iteration.
            for node in _in_order(graph, op_type):
                if not graph.has_node(node) or node.domain not in STANDARD_DOMAINS or not node.inputs:
                    continue
                if rule(graph, node, ctx):
                    stats[op_type] = stats.get(op_type, 0) + 1
        return PassResult(changed=bool(stats), stats=stats)


def _in_order(graph: Graph, op_type: str) -> list[Node]:
    return sorted(graph.nodes(op_type), key=lambda n: n.order)
