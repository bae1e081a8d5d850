"""Activations a fused onnxruntime kernel can apply, shared by the FusedConv and FusedGemm rules.

``ACTIVATIONS`` maps an op type to its float attributes and their schema defaults: the kernels
take them as ``activation_params`` (FusedConv, in that order) or ``activation_<name>`` (FusedGemm).
Which ops each kernel implements (checked against ORT 1.32) is ``CONV_ACTIVATIONS`` /
``GEMM_ACTIVATIONS``; Clip is FusedConv's only, and its bounds are inputs from opset 11 on.
"""

from __future__ import annotations

import numpy as np

from graphtool.ir.graph import Graph, Node
from graphtool.pass_manager import PassContext
from graphtool.passes._fuse_common import graph_opset
from graphtool.passes._ort_common import Dims, Shapes

FLOAT_MAX = float(np.finfo(np.float32).max)

ACTIVATIONS: dict[str, tuple[tuple[str, float], ...]] = {
    "Relu": (), "Sigmoid": (), "Tanh": (), "HardSwish": (), "Softplus": (), "Softsign": (),
    "LeakyRelu": (("alpha", 0.01),), "HardSigmoid": (("alpha", 0.2), ("beta", 0.5)), "Elu": (("alpha", 1.0),),
    "Selu": (("alpha", 1.67326319217681884765625), ("gamma", 1.05070102214813232421875)),
    "ThresholdedRelu": (("alpha", 1.0),),
}
CONV_ACTIVATIONS = ("Relu", "Sigmoid", "Tanh", "HardSwish", "LeakyRelu", "HardSigmoid")  # and Clip
GEMM_ACTIVATIONS = ("Relu", "Sigmoid", "Tanh", "Softplus", "Softsign", "LeakyRelu", "HardSigmoid", "Elu", "Selu",
                    "ThresholdedRelu")


def params(node: Node) -> list[tuple[str, float]]:
    """The activation's float attributes, schema defaults filled in."""
    return [(key, float(node.attr(key, default))) for key, default in ACTIVATIONS[node.op_type]]


def clip_bounds(graph: Graph, node: Node, opset: int) -> list[float] | str:
    """[min, max] of a Clip (attributes before opset 11, one-element float32 constants after),
    or the reason they are not constant bounds."""
    if opset < 11:
        return [float(node.attr("min", -FLOAT_MAX)), float(node.attr("max", FLOAT_MAX))]
    bounds = []
    for slot, default in ((1, -FLOAT_MAX), (2, FLOAT_MAX)):
        value = node.inputs[slot] if len(node.inputs) > slot else ""
        array = graph.const(value) if value else None
        if value and (array is None or array.size != 1 or array.dtype != np.float32):
            return f"the Clip bound '{value}' is not a one-element float32 constant"
        bounds.append(float(array.reshape(-1)[0]) if value else default)
    return bounds


class Facts:
    """Shapes, dim proofs and the governing opset, for one pass run."""

    def __init__(self, graph: Graph, ctx: PassContext):
        self.shapes = Shapes(graph, ctx)
        self.dims = Dims(graph, self.shapes)
        self.opset = graph_opset(graph, ctx)

    def rank(self, value: str) -> int | None:
        return self.shapes.rank(value)

    def same_shape(self, a: str, b: str) -> bool:
        ra, rb = self.shapes.rank(a), self.shapes.rank(b)
        return ra is not None and ra == rb and all(self.dims.equal((a, i), (b, i)) for i in range(ra))

