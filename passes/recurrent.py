"""Drop the zero initial state exporters feed LSTM/GRU/RNN: the op's default is zeros already.

torch exports ``nn.LSTM(x)`` (no state given) with ``initial_h = ConstantOfShape(Concat(1,
Unsqueeze(Gather(Shape(x), 1)), hidden), value=0)``: five ops that compute zeros of the state's
shape at run time, once per call. ONNX defines an omitted ``initial_h``/``initial_c`` as zeros,
so the inputs can be dropped and the shape arithmetic dies with them (onnxsim folds the same).
tf2onnx builds the same zeros as ``Concat(Unsqueeze(Expand(0, shape)), ...)`` (one per direction):
zeros seen through ops that only move, repeat or convert elements (Expand's and Tile's data
input, Unsqueeze, Squeeze, Reshape, Flatten, Transpose, Identity, Cast, every Concat input) are
zeros too.

Refusals: the state is not provably all zeros (a ConstantOfShape whose ``value`` is not 0, a
constant with a non-zero element, anything computed); the op is not a standard-domain
LSTM/GRU/RNN.
"""

from __future__ import annotations

import numpy as np

from graphtool.ir.graph import Graph
from graphtool.pass_manager import Pass, PassContext, PassResult, register
from graphtool.passes._fuse_common import is_op

STATE_SLOTS = {"LSTM": (5, 6), "GRU": (5,), "RNN": (5,)}


KEEP_ZEROS = ("Expand", "Tile", "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Transpose", "Identity", "Cast")
MAX_DEPTH = 8  # a bound keeps the walk short on any graph


def is_zeros(graph: Graph, value: str, depth: int = 0) -> bool:
    """True when ``value`` is provably all zeros: a zero constant, a ConstantOfShape of 0, or
    zeros moved, repeated, converted or concatenated (KEEP_ZEROS, Concat)."""
    array = graph.const(value)
    if array is not None:
        return array.dtype.kind in "fiub" and not np.any(array)
    node = graph.producer(value)
    if depth < MAX_DEPTH and node is not None and node.domain in ("", "ai.onnx"):
        if node.op_type in KEEP_ZEROS:
            return bool(node.inputs and node.inputs[0]) and is_zeros(graph, node.inputs[0], depth + 1)
        if node.op_type == "Concat":
            return all(v and is_zeros(graph, v, depth + 1) for v in node.inputs)
    if not is_op(node, "ConstantOfShape"):
        return False
    fill = node.attr("value")
    if fill is None:
        return True  # the default fill is a float 0
    from onnx import numpy_helper

    return not np.any(numpy_helper.to_array(fill))


@register(level=1, priority=18)
class DropZeroRecurrentState(Pass):
    """Drop all-zero initial_h/initial_c inputs of LSTM/GRU/RNN (ONNX's default is zeros)."""

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        dropped = 0
        for op_type, slots in STATE_SLOTS.items():
            for node in graph.nodes(op_type):
                if not is_op(node, op_type):
                    continue
                inputs = node.inputs
                for slot in slots:
                    if slot < len(inputs) and inputs[slot] and is_zeros(graph, inputs[slot]):
                        graph.set_input(node, slot, "")
                        dropped += 1
        return PassResult(changed=dropped > 0, stats={"dropped": dropped})
