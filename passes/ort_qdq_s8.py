"""int8 activations → uint8 (``--target ort`` level 2), as onnxruntime's ``QDQS8ToU8Transformer`` does on x86.

``onnxruntime.quantization.quantize_static`` quantizes activations to int8 by default, but the
x86 kernels onnxruntime fuses QDQ units into (QLinearConv, QGemm, QLinearAdd, ...) take uint8
activations; so at its extended level onnxruntime first rewrites an int8 ``Q → DQ`` pair as a
uint8 one with zero point + 128, then fuses. The shift is exact: ``Q_u8(x) = Q_s8(x) + 128``
(rounding is the same and the saturation bounds move with it) and ``DQ_u8(q + 128)`` with zero
point ``z + 128`` gives ``(q - z) · s`` again, so every float value downstream is bit-identical.

Converted: a standard QuantizeLinear to int8 with constant per-tensor scale and zero point (no
``output_dtype`` attribute) whose output reaches only DequantizeLinears with the same parameters,
directly or through ops that only move the integers (Reshape, Transpose, Squeeze, Unsqueeze,
Flatten, Identity, Slice, MaxPool — MaxPool commutes with the +128 shift — and a Max with a constant
scalar, the integer Relu ``qdq-drop-around`` writes, whose constant shifts by +128 too); none of those
values is a graph output. onnxruntime converts only a Q read by exactly one DQ; a Q with several DQ readers
(a residual branch) is converted here too, so its units fuse as well. Declared int8 types of the
converted values become uint8. The result runs on any CPU (uint8 kernels exist everywhere); on
ARM, where onnxruntime has int8 kernels, it would have fused the int8 units directly.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from graphtool.ir.graph import Graph, Node
from graphtool.pass_manager import Pass, PassContext, PassResult, register
from graphtool.passes._qdq_parts import QParams, is_dq, is_q, qparams

MOVES = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Slice", "MaxPool"})
MAX_REACH = 64  # values between a Q and its DQs: a bound keeps the walk linear on any graph


def _int8_bound(graph: Graph, node: Node, slot: int) -> str | None:
    """The other input of ``Max(q, c)`` when it is a constant int8 scalar (one element), else None."""
    if not (node.op_type == "Max" and node.domain in ("", "ai.onnx") and len(node.inputs) == 2):
        return None
    other = node.inputs[1 - slot]
    array = graph.const(other)
    return other if array is not None and array.dtype == np.int8 and array.size == 1 and array.ndim == 0 else None


def _reach(graph: Graph, q: Node, p: QParams) -> tuple[list[str], list[Node], list[Node]] | None:
    """The integer values a Q's output flows through, the DQs that end them and the Max(q, c) among
    the ops, or None when any reader is something else (or the DQs' parameters differ, or a value is
    a graph output)."""
    values, dqs, maxes, todo = [], [], [], [q.outputs[0]]
    while todo:
        value = todo.pop()
        if graph.is_output(value) or len(values) >= MAX_REACH:
            return None
        values.append(value)
        for reader, slot in graph.uses(value):
            if is_dq(reader) and slot == 0:
                dp = qparams(graph, reader)
                if dp is None or not dp.same(p):
                    return None
                dqs.append(reader)
            elif reader.op_type in MOVES and reader.domain in ("", "ai.onnx") and slot == 0 and (
                    len([o for o in reader.outputs if o]) == 1):
                todo.append(reader.outputs[0])
            elif _int8_bound(graph, reader, slot) is not None and reader not in maxes:
                maxes.append(reader)
                todo.append(reader.outputs[0])
            else:
                return None
    return (values, dqs, maxes) if dqs else None


@register(level=2, target="ort", priority=29, name="ort-qdq-s8-to-u8")
class OrtQdqS8ToU8(Pass):
    """int8 Q → (moves) → DQ with equal parameters → the same in uint8 with zero point + 128."""

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        if not graph.has_op("QuantizeLinear"):
            return PassResult(False, {"converted": 0})
        converted = 0
        for q in graph.nodes("QuantizeLinear"):
            if not is_q(q) or q.attr("output_dtype", 0) or len(q.inputs) < 3 or not q.inputs[2]:
                continue
            p = qparams(graph, q)
            if p is None or p.dtype != TensorProto.INT8 or not p.per_tensor:
                continue
            reach = _reach(graph, q, p)
            if reach is None:
                continue
            values, dqs, maxes = reach
            zero = graph.add_initializer((p.zero.astype(np.int16) + 128).astype(np.uint8), "zero_point_u8")
            for node in (q, *dqs):
                graph.set_input(node, 2, zero)
            for node in maxes:  # max(q, c) + 128 = max(q + 128, c + 128)
                slot = 1 if _int8_bound(graph, node, 0) else 0
                bound = graph.const(node.inputs[slot]).astype(np.int16) + 128
                graph.set_input(node, slot, graph.add_initializer(bound.astype(np.uint8), "bound_u8"))
            for value in values:
                if value in graph.value_info:
                    graph.set_shape(value, graph.declared_shape(value), TensorProto.UINT8)
            converted += 1
        return PassResult(converted > 0, {"converted": converted})
