"""A Reshape target computed at run time with one unknown entry → a constant with -1 there.

Exporters build targets such as ``Concat(Unsqueeze(Mul(Gather(Shape(x), 0), Gather(Shape(x), 1))),
[256])`` for ``x.view(T * B, 256)``. Every entry but one is a constant, and a valid Reshape keeps
the element count, so the unknown entry can only be ``size(x) / product(constants)``: exactly
what ``-1`` computes. The target becomes the constant ``[-1, 256]`` and the Shape/Gather/Mul/
Unsqueeze/Concat arithmetic dies (onnxsim and ORT reach the same through their shape inference).

The target may be cast to int64 after the Concat (tf2onnx builds it in int32), and a run-time
entry may be ``Slice(Shape(x), [i], [i + 1])`` as well as an unsqueezed scalar.

Refusals: more than one entry is not constant; a constant entry is 0 or negative (0 copies a dim
and -1 is taken); a run-time part is not provably one element (a scalar unsqueezed once); the
Concat is not on axis 0 of 1-D parts.
"""

from __future__ import annotations

import numpy as np

from graphtool.ir.graph import Graph, Node
from graphtool.pass_manager import Pass, PassContext, PassResult, register
from graphtool.passes._fuse_common import is_op
from graphtool.passes._types import infer_rank
from graphtool.passes.eliminate import add_constant

_SCALAR_ARITH = ("Mul", "Add", "Sub", "Div", "Cast", "Identity")


def _is_scalar(graph: Graph, value: str, depth: int = 6) -> bool:
    """``value`` is provably rank 0: a Gather of one (scalar-indexed) element, or arithmetic on such."""
    shape = graph.declared_shape(value)
    if shape is not None:
        return shape == []
    array = graph.const(value)
    if array is not None:
        return array.ndim == 0
    node = graph.producer(value)
    if depth <= 0 or node is None:
        return False
    if is_op(node, "Gather"):
        index = graph.const(node.inputs[1])
        data = graph.producer(node.inputs[0])
        return index is not None and index.ndim == 0 and is_op(data, "Shape")
    if is_op(node, *_SCALAR_ARITH):
        return all(_is_scalar(graph, v, depth - 1) for v in node.inputs if v)
    return False


def _shape_entry(graph: Graph, node: Node) -> bool:
    """``Slice(Shape(x) [, Cast], [i], [i + 1])``: one entry of a shape whose rank is known."""
    inputs = node.inputs + [""] * (5 - len(node.inputs))
    source = graph.producer(inputs[0])
    if is_op(source, "Cast"):
        source = graph.producer(source.inputs[0])
    if not is_op(source, "Shape") or source.attr("start") is not None or source.attr("end") is not None:
        return False
    rank = infer_rank(graph, source.inputs[0])
    starts, ends = graph.const(inputs[1]), graph.const(inputs[2])
    axes = graph.const(inputs[3]) if inputs[3] else np.zeros(1, np.int64)
    steps = graph.const(inputs[4]) if inputs[4] else np.ones(1, np.int64)
    if rank is None or any(v is None or v.size != 1 for v in (starts, ends, axes, steps)):
        return False
    start, end = int(starts.reshape(-1)[0]), int(ends.reshape(-1)[0])
    return int(axes.reshape(-1)[0]) in (0, -1) and int(steps.reshape(-1)[0]) == 1 and 0 <= start < rank \
        and end == start + 1


def _one_element(graph: Graph, value: str) -> bool:
    shape = graph.declared_shape(value)
    if shape is not None:
        return shape == [1]
    node = graph.producer(value)
    if is_op(node, "Slice"):
        return _shape_entry(graph, node)
    if not is_op(node, "Unsqueeze") or not node.inputs:
        return False
    axes = graph.const(node.inputs[1]) if len(node.inputs) > 1 else np.asarray(node.attr("axes", []))
    return axes is not None and axes.size == 1 and _is_scalar(graph, node.inputs[0])


@register(level=1, priority=17)
class ReshapeInferDim(Pass):
    """A run-time Reshape target with a single unknown entry becomes a constant with -1 there."""

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        rewritten = 0
        for node in graph.nodes("Reshape"):
            if not is_op(node, "Reshape") or len(node.inputs) < 2 or graph.const(node.inputs[1]) is not None:
                continue
            concat = graph.producer(node.inputs[1])
            if is_op(concat, "Cast") and concat.attr("to") == 7:  # tf2onnx: Concat of int32 parts, then Cast
                concat = graph.producer(concat.inputs[0])
            if not is_op(concat, "Concat") or concat.attr("axis", 0) not in (0, -1):
                continue
            entries: list[int] = []
            unknown = 0
            for part in concat.inputs:
                array = graph.const(part)
                if array is not None and array.ndim == 1:
                    entries.extend(int(v) for v in array)
                elif _one_element(graph, part):
                    entries.append(-1)
                    unknown += 1
                else:
                    unknown = 2
                    break
            if unknown != 1 or any(v == 0 or v < -1 for v in entries) or entries.count(-1) != 1:
                continue
            target = add_constant(graph, np.array(entries, np.int64), f"{node.name or 'reshape'}_shape", ctx)
            if target is None:
                continue
            graph.set_input(node, 1, target)
            rewritten += 1
        return PassResult(changed=rewritten > 0, stats={"rewritten": rewritten})
