"""The YOLOv5 "Focus" layer — four strided Slices concatenated on channels — → one SpaceToDepth.

``torch.cat([x[..., ::2, ::2], x[..., 1::2, ::2], x[..., ::2, 1::2], x[..., 1::2, 1::2]], 1)``
is a space-to-depth with block 2: each output channel block is one (row, column) phase of x.
ONNX's SpaceToDepth (DCR order) stacks the phases as (0,0), (0,1), (1,0), (1,1); when the model
concatenates them in another order a Gather on the channel axis restores it. Five ops (four
Slices and a Concat, each pass over the image) become one or two (onnxruntime's basic level does
the same).

Refusals: the Concat is not on axis 1 of four inputs; an input is not a Slice of the same x on
axes {2, 3} (or {-2, -1}) with steps 2, starts in {0, 1} and ends reaching the end; the four
phases are not all different; x's rank is not 4 or its channel count is unknown (needed for the
Gather); a Slice has another reader.
"""

from __future__ import annotations

import numpy as np

from graphtool.ir.graph import Graph, Node
from graphtool.pass_manager import Pass, PassContext, PassResult, register
from graphtool.passes._fuse_common import is_op, only_feeds
from graphtool.passes.eliminate import add_constant

_END = 1 << 30  # an end at or past this reaches the end of any real image axis


def _phase(graph: Graph, node: Node) -> tuple[str, tuple[int, int]] | None:
    """(x, (row phase, column phase)) of a Slice taking every second row and column of x."""
    if not is_op(node, "Slice") or len(node.inputs) < 5 or node.attr("starts") is not None:
        return None
    parts = [graph.const(v) for v in node.inputs[1:5]]
    if any(p is None for p in parts):
        return None
    starts, ends, axes, steps = (np.asarray(p).reshape(-1).tolist() for p in parts)
    axes = [a + 4 if a < 0 else a for a in axes]
    if sorted(axes) != [2, 3] or any(s != 2 for s in steps) or any(e < _END for e in ends):
        return None
    by_axis = dict(zip(axes, starts))
    if by_axis[2] not in (0, 1) or by_axis[3] not in (0, 1):
        return None
    return node.inputs[0], (by_axis[2], by_axis[3])


@register(level=1, priority=41)
class FocusToSpaceToDepth(Pass):
    """Four strided Slices of one image concatenated on channels → SpaceToDepth (+ Gather)."""

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        fused = 0
        for concat in graph.nodes("Concat"):
            if not is_op(concat, "Concat") or len(concat.inputs) != 4 or concat.attr("axis") not in (1, -3):
                continue
            slices = [graph.producer(v) for v in concat.inputs]
            phases = [_phase(graph, s) for s in slices] if all(slices) else [None]
            if any(p is None for p in phases) or len({p[0] for p in phases}) != 1:  # type: ignore[index]
                continue
            x = phases[0][0]  # type: ignore[index]
            order = [p[1] for p in phases]  # type: ignore[index]
            shape = graph.declared_shape(x)
            if len(set(order)) != 4 or shape is None or len(shape) != 4 or not isinstance(shape[1], int):
                continue
            if not all(only_feeds(graph, s.outputs[0], concat) for s in slices):  # type: ignore[union-attr]
                continue
            channels = shape[1]
            out = concat.outputs[0]
            names = [n.name or n.op_type for n in (*slices, concat)]  # type: ignore[union-attr]
            graph.remove_nodes([concat, *slices])  # type: ignore[list-item]
            if order == [(0, 0), (0, 1), (1, 0), (1, 1)]:
                node = graph.add_node("SpaceToDepth", [x], [out], {"blocksize": 2}, name=names[-1])
            else:
                index = np.concatenate([np.arange(c * channels, (c + 1) * channels)
                                        for c in (2 * a + b for a, b in order)]).astype(np.int64)
                perm = add_constant(graph, index, "focus_channels", ctx)
                s2d = graph.add_node("SpaceToDepth", [x], 1, {"blocksize": 2}, name=names[-1] + "_s2d")
                node = graph.add_node("Gather", [s2d.outputs[0], perm], [out], {"axis": 1}, name=names[-1])
            ctx.absorbed(node, names)
            fused += 1
        return PassResult(changed=fused > 0, stats={"fused": fused})
