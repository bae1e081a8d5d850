"""The tree the layered page folds a model into: a layer per exporter scope (a name scope such as
``/model/layers.0/``, or torch dynamo's ``pkg.torch.onnx.name_scopes``), and the colour family
of each op. Kept apart from ``layers`` (which walks the model and writes the page's columns) so
that what a layer is can be read on one screen."""

from __future__ import annotations

import ast
from typing import Any

CATEGORY_COLORS = {
    "layer": "#335588", "activation": "#70291f", "pool": "#335533", "normalization": "#335544",
    "dropout": "#454770", "shape": "#6c4f47", "tensor": "#59423b", "transform": "#335544",
    "data": "#555555", "quantization": "#502800", "control": "#7a4b9c", "attention": "#1f5f7a",
    "io": "#2e7d32", "output": "#b26a00", "other": "#666666",
}
_CATEGORIES = {
    "layer": "Conv ConvTranspose ConvInteger Gemm MatMul MatMulInteger QLinearConv QLinearMatMul Einsum "
             "FusedConv FusedGemm FusedMatMul MatMulNBits Attention MultiHeadAttention GroupQueryAttention "
             "LSTM GRU RNN Embedding EmbedLayerNormalization",
    "activation": "Relu LeakyRelu PRelu Sigmoid Tanh Elu Selu Celu Gelu FastGelu BiasGelu QuickGelu Softmax "
                  "LogSoftmax Softplus Softsign HardSigmoid HardSwish Mish ThresholdedRelu Erf SiLU",
    "pool": "MaxPool AveragePool GlobalAveragePool GlobalMaxPool LpPool GlobalLpPool MaxRoiPool RoiAlign "
            "MaxUnpool",
    "normalization": "BatchNormalization LayerNormalization InstanceNormalization GroupNormalization "
                     "LpNormalization LRN SimplifiedLayerNormalization SkipLayerNormalization "
                     "SkipSimplifiedLayerNormalization RMSNormalization MeanVarianceNormalization",
    "dropout": "Dropout",
    "shape": "Reshape Flatten Squeeze Unsqueeze Shape Size Expand",
    "tensor": "Concat Split Slice Gather GatherElements GatherND Transpose Pad Tile Resize Upsample "
              "ScatterND ScatterElements Scatter DepthToSpace SpaceToDepth Where NonZero TopK Range "
              "ConstantOfShape Trilu",
    "quantization": "QuantizeLinear DequantizeLinear DynamicQuantizeLinear",
    "control": "If Loop Scan",
    "attention": "RotaryEmbedding",
    "data": "Constant Identity Cast CastLike",
}
CATEGORY = {op: cat for cat, ops in _CATEGORIES.items() for op in ops.split()}


def category(op_type: str) -> str:
    return CATEGORY.get(op_type, "other")


class Layer:
    __slots__ = ("label", "full", "kind", "children", "direct", "parent", "first", "index", "lo", "mid", "hi", "pre")

    def __init__(self, label: str, full: str, kind: str, parent: "Layer | None"):
        self.label, self.full, self.kind, self.parent = label, full, kind, parent
        self.children: dict[Any, Layer] = {}
        self.direct: list[int] = []  # provisional op numbers (visit order)
        self.first = 1 << 62  # the earliest op (visit order) anywhere inside: children sort by it
        self.index = self.lo = self.mid = self.hi = 0
        self.pre = ""  # what its ops' names start with ("/model/layers.0/"): sent once, not per op

    def child(self, key: Any, label: str, full: str, kind: str) -> "Layer":
        layer = self.children.get(key)
        if layer is None:
            layer = self.children[key] = Layer(label, full, kind, self)
        return layer


def scopes(record: Any) -> list[tuple[str, str]]:
    """(label, full name) of each scope an op sits in, outermost first."""
    name = record.name
    if "/" in name:
        parts = [p for p in name.split("/")[:-1] if p]
        return [(p, "/" + "/".join(parts[: k + 1])) for k, p in enumerate(parts)]
    template = record.template
    if isinstance(template, bytes) and b"pkg.torch.onnx.name_scopes" in template:
        from onnx import NodeProto

        template = NodeProto.FromString(template)
    if template is not None and not isinstance(template, bytes):
        for prop in template.metadata_props:
            if prop.key == "pkg.torch.onnx.name_scopes":
                try:
                    scopes = [s for s in ast.literal_eval(prop.value) if isinstance(s, str) and s][:-1]
                except (ValueError, SyntaxError):
                    return []
                out = []
                for k, full in enumerate(scopes):
                    prev = scopes[k - 1] if k else ""
                    label = full[len(prev) + 1:] if prev and full.startswith(prev + ".") else full
                    out.append((label, full))
                return out
    return []
