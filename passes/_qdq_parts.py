"""What the QDQ passes share: a Q/DQ node's quantization parameters, read from constants.

``QuantizeLinear(x, scale, zero_point?)`` and ``DequantizeLinear(q, scale, zero_point?)`` carry
their parameters as inputs; a pass may only reason about them when they are constants. ``qparams``
reads them once: the scale (float32), the zero point (in the quantized element type; zeros when
left out), the axis for a per-channel scale (None per tensor), and the quantized element type.
Blocked quantization (``block_size``) and non-float32 scales answer None: no pass here handles them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import TensorProto, helper

from graphtool.ir.graph import Graph, Node

INT8_TYPES = (TensorProto.UINT8, TensorProto.INT8)
TYPE_RANGE = {TensorProto.UINT8: (0, 255), TensorProto.INT8: (-128, 127), TensorProto.UINT16: (0, 65535),
              TensorProto.INT16: (-32768, 32767)}


@dataclass
class QParams:
    scale: np.ndarray
    zero: np.ndarray
    axis: int | None  # None: per tensor; else the (non-negative when the rank is known) channel axis
    dtype: int  # the quantized side's TensorProto element type
    scale_name: str
    zero_name: str  # "" when the node leaves it out

    @property
    def per_tensor(self) -> bool:
        return self.axis is None

    def same(self, other: "QParams") -> bool:
        """The same quantization (so DQ → Q, or a data-movement op between them, is exact)."""
        return (self.dtype == other.dtype and self.axis == other.axis and self.scale.shape == other.scale.shape
                and bool(np.array_equal(self.scale, other.scale))
                and bool(np.array_equal(self.zero.astype(np.int64), other.zero.astype(np.int64))))


def _quantized_dtype(graph: Graph, node: Node, zero: np.ndarray | None, shapes=None) -> int | None:
    if zero is not None:
        try:
            return helper.np_dtype_to_tensor_dtype(zero.dtype)
        except (KeyError, TypeError, ValueError):
            return None
    if node.op_type == "QuantizeLinear":
        return node.attr("output_dtype", 0) or TensorProto.UINT8
    data = node.inputs[0]
    array = graph.const(data)
    if array is not None:
        return helper.np_dtype_to_tensor_dtype(array.dtype)
    if shapes is not None:
        return shapes.dtype(data)
    return graph.dtype(data)


def qparams(graph: Graph, node: Node | None, shapes=None, rank: int | None = None) -> QParams | None:
    """The constant quantization parameters of a standard-domain Q or DQ node, else None."""
    if node is None or node.op_type not in ("QuantizeLinear", "DequantizeLinear") or node.domain not in ("", "ai.onnx"):
        return None
    if len(node.inputs) < 2 or node.attr("block_size", 0):
        return None
    scale = graph.const(node.inputs[1])
    if scale is None or scale.dtype != np.float32 or scale.ndim > 1:
        return None
    zero_name = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else ""
    zero = graph.const(zero_name) if zero_name else None
    if zero_name and (zero is None or zero.size != scale.size or zero.ndim > 1):
        return None
    if zero is not None:
        zero = zero.reshape(scale.shape)
    dtype = _quantized_dtype(graph, node, zero, shapes)
    if dtype not in TYPE_RANGE and dtype != TensorProto.INT32:  # int32: a bias
        return None
    if zero is None:
        zero = np.zeros(scale.shape, helper.tensor_dtype_to_np_dtype(dtype))
    axis = None
    if scale.ndim == 1 and scale.size > 1:
        axis = int(node.attr("axis", 1))
        if axis < 0:
            if rank is None:
                return None
            axis += rank
    return QParams(scale, zero, axis, dtype, node.inputs[1], zero_name)


def is_q(node: Node | None) -> bool:
    return node is not None and node.op_type == "QuantizeLinear" and node.domain in ("", "ai.onnx")


def is_dq(node: Node | None) -> bool:
    return node is not None and node.op_type == "DequantizeLinear" and node.domain in ("", "ai.onnx")


def float32_of(graph: Graph, value: str) -> float | None:
    array = graph.const(value)
    if array is None or array.size != 1 or array.dtype != np.float32:
        return None
    return float(array.reshape(-1)[0])
