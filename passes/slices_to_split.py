"""Slices that cut one tensor into consecutive pieces along one axis → one Split.

Exporters write ``x[:, :129]`` and ``x[:, 129:]`` (an STFT's real and imaginary halves, a
detector head's box and class channels) as two Slices; each reads x once. One Split reads it once
and makes every piece. onnxruntime's extended level does the same. A ``Gather(x, [i], axis)`` with
a constant one-element 1-D index is the piece ``[i, i + 1)`` (it keeps the axis, size 1): skl2onnx
takes every column of a OneHotEncoder's input so (onnxruntime: GatherSliceToSplitFusion). A scalar
index drops the axis (a Split would need a Squeeze per piece: more nodes) and is not a piece; nor is
a Gather of a Shape's entries (shape arithmetic, which folding and the fusions' dim proofs read).

Refusals (each leaves the Slices alone): a Slice whose starts/ends/axes/steps are not constants
or that cuts more than one axis or steps other than 1; pieces that overlap, leave a gap, or do
not reach both ends of the axis; an empty piece; the axis's size unknown (it fixes the last
piece's size); fewer than two pieces. A group of Slices on one (x, axis) that does not tile the
axis is left whole: no subset is tried.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from graphtool.ir.graph import Graph, Node
from graphtool.pass_manager import Pass, PassContext, PassResult, register
from graphtool.passes._fuse_common import is_op

Piece = tuple[int, int, Node]  # (start, end, the Slice)


def _cut(graph: Graph, node: Node) -> tuple[str, int, int, int] | None:
    """(x, axis, start, end) of a Slice cutting one axis with step 1 (raw, not yet clamped), or of a
    Gather with a constant index [i] (end 2**62 for i = -1: to the end)."""
    if is_op(node, "Gather") and len(node.inputs) == 2:
        index, maker = graph.const(node.inputs[1]), graph.producer(node.inputs[0])
        if is_op(maker, "Shape"):
            return None  # a shape's entries: shape folding and the fusions' dim proofs read those Gathers
        if index is None or index.ndim != 1 or index.size != 1 or index.dtype.kind not in "iu":
            return None
        start = int(index[0])
        return node.inputs[0], int(node.attr("axis", 0)), start, start + 1 if start != -1 else 1 << 62
    if not is_op(node, "Slice") or len(node.inputs) < 3 or node.attr("starts") is not None:
        return None
    parts = [graph.const(v) if v else None for v in node.inputs[1:5]]
    if any(p is None for p in parts[:2]) or (len(parts) > 2 and node.inputs[3] and parts[2] is None):
        return None
    starts, ends = (np.asarray(p).reshape(-1).tolist() for p in parts[:2])
    axes = np.asarray(parts[2]).reshape(-1).tolist() if len(parts) > 2 and parts[2] is not None else [0]
    if len(parts) > 3 and node.inputs[4]:
        if parts[3] is None or np.asarray(parts[3]).reshape(-1).tolist() != [1]:
            return None
    if len(starts) != 1 or len(ends) != 1 or len(axes) != 1:
        return None
    return node.inputs[0], int(axes[0]), int(starts[0]), int(ends[0])


def _clamp(index: int, size: int) -> int:
    return min(max(index + size if index < 0 else index, 0), size)


def _dims(graph: Graph, ctx: PassContext, value: str) -> list | None:
    dims = graph.declared_shape(value)
    if dims is None or any(d is None for d in dims):
        dims = ctx.shapes.dims(graph, value) or dims
    return dims


def _tiling(pieces: list[Piece], size: int) -> list[Piece] | None:
    """The pieces in order when they tile [0, size) exactly, each non-empty; else None."""
    ordered = sorted(((_clamp(s, size), _clamp(e, size), n) for s, e, n in pieces), key=lambda p: p[:2])
    edge = 0
    for start, end, _ in ordered:
        if start != edge or end <= start:
            return None
        edge = end
    return ordered if edge == size and len(ordered) >= 2 else None


@register(level=2, priority=42)
class SlicesToSplit(Pass):
    """Slices (and one-index Gathers) that tile one axis of one tensor (consecutive, no gap) → one Split."""

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        groups: dict[tuple[str, int], list[tuple[int, int, Node]]] = defaultdict(list)
        for node in [*graph.nodes("Slice"), *graph.nodes("Gather")]:
            cut = _cut(graph, node)
            if cut is not None:
                x, axis, start, end = cut
                groups[(x, axis)].append((start, end, node))
        fused = 0
        for (x, axis), pieces in groups.items():
            dims = _dims(graph, ctx, x) if len(pieces) >= 2 else None
            if dims is None or not -len(dims) <= axis < len(dims) or not isinstance(dims[axis], int):
                continue
            ordered = _tiling(pieces, dims[axis])
            if ordered is None:
                continue
            sizes = [end - start for start, end, _ in ordered]
            outputs = [node.outputs[0] for _, _, node in ordered]
            names = [node.name for _, _, node in sorted(ordered, key=lambda piece: piece[2].order)]
            anchor = graph.producer(x)  # the Split goes where x is made: every piece's reader comes later
            graph.remove_nodes([node for _, _, node in ordered])
            if ctx.opset() >= 13:
                split = graph.add_initializer(np.asarray(sizes, np.int64), "split")
                new = graph.add_node("Split", [x, split], outputs, {"axis": axis}, name=names[0], near=anchor)
            else:
                new = graph.add_node("Split", [x], outputs, {"axis": axis, "split": sizes}, name=names[0], near=anchor)
            ctx.absorbed(new, names)
            fused += 1
        return PassResult(changed=fused > 0, stats={"fused": fused} if fused else {})
