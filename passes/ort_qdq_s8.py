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
Flatten, Identity, Slice, MaxPool — MaxPool commutes with the +128 shift); none of those values is
a graph output. onnxruntime converts only a Q read by exactly one DQ; a Q with several DQ readers
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


def _reach(graph: Graph, q: Node, p: QParams) -> tuple[list[str], list[Node]] | None:
    """The integer values a Q's output flows through and the DQs that end them, or None when
    any reader is something else (or the DQs' parameters differ, or a value is a graph output)."""
    values, dqs, todo = [], [], [q.outputs[0]]
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
            else:
                return None
    return (values, dqs) if dqs else None


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
            values, dqs = reach
            zero = graph.add_initializer((p.zero.astype(np.int16) + 128).astype(np.uint8), "zero_point_u8")
            for node in (q, *dqs):
                graph.set_input(node, 2, zero)
            for value in values:
                if value in graph.value_info:
                    graph.set_shape(value, graph.declared_shape(value), TensorProto.UINT8)
            converted += 1
        return PassResult(converted > 0, {"converted": converted})
