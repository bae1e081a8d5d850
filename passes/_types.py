"""Element types the graph proves without shape inference: walk producers through ops whose output
type is their first input's (Add, Relu, Reshape, Conv …), Cast's ``to``, comparisons (bool) and
Shape/Size (int64).

Exporters declare types for graph inputs and outputs only, and onnx shape inference is not run on
models with symbolic inputs (see infer_shapes), so ``Cast(Sub(x, y), to=FLOAT)`` looked unprovable
although x is a float input two ops up. The walk is bounded (``depth``), so cost stays O(1) per
question; it answers None rather than guess.
"""

from __future__ import annotations

from onnx import TensorProto

from graphtool.ir.graph import Graph

SAME_AS_FIRST = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Neg", "Abs", "Relu", "LeakyRelu", "Elu", "Selu", "Sigmoid", "HardSigmoid",
    "Tanh", "Exp", "Log", "Sqrt", "Reciprocal", "Floor", "Ceil", "Round", "Clip", "Max", "Min", "Mean", "Sum",
    "Softmax", "LogSoftmax", "Erf", "Sin", "Cos", "MatMul", "Gemm", "Conv", "ConvTranspose", "BatchNormalization",
    "InstanceNormalization", "LayerNormalization", "Identity", "Transpose", "Reshape", "Squeeze", "Unsqueeze",
    "Flatten", "Expand", "Tile", "Slice", "Concat", "Gather", "GatherElements", "Pad", "ReduceSum", "ReduceMean",
    "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2", "MaxPool", "AveragePool", "GlobalAveragePool",
    "GlobalMaxPool", "Dropout", "Split", "Resize", "DepthToSpace", "SpaceToDepth", "Gelu", "HardSwish", "Softplus",
})
SAME_AS_ANY = frozenset({"Add", "Sub", "Mul", "Div", "Max", "Min", "Mean", "Sum", "MatMul", "Concat", "Gemm", "Conv"})
BOOL_OUT = frozenset({"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or", "Xor", "IsNaN",
                      "IsInf"})


def infer_dtype(graph: Graph, value: str, depth: int = 8) -> int | None:
    """The TensorProto element type of ``value`` if provable, else None."""
    known = graph.dtype(value)
    if known is not None or depth <= 0:
        return known
    node = graph.producer(value)
    if node is None and graph.parent is not None and graph.is_free(value):
        return infer_dtype(graph.parent, value, depth - 1)  # read from the enclosing scope
    if node is not None and node.domain == "ai.onnx.ml":
        if node.op_type == "ArrayFeatureExtractor" and node.inputs:  # picks elements of X: X's type
            return infer_dtype(graph, node.inputs[0], depth - 1)
        return ml_output_dtype(node, value)
    if node is None or node.domain not in ("", "ai.onnx"):
        return None
    op = node.op_type
    if op == "Cast":
        return node.attr("to")
    if op in BOOL_OUT:
        return TensorProto.BOOL
    if op in ("Shape", "Size"):
        return TensorProto.INT64
    if op == "Constant":
        array = graph.const(value)
        return None if array is None else _np_to_onnx(array.dtype)
    if op == "Where" and len(node.inputs) == 3:
        return infer_dtype(graph, node.inputs[1], depth - 1)
    if op in SAME_AS_FIRST and node.inputs and node.inputs[0]:
        # Split: every output; the rest: output 0 only (Dropout's mask, MaxPool's indices and
        # LayerNormalization's statistics have their own types)
        if op == "Split" or node.outputs.index(value) == 0:
            for x in node.inputs if op in SAME_AS_ANY else node.inputs[:1]:  # inputs typed alike: any will do
                found = infer_dtype(graph, x, depth - 1) if x else None
                if found is not None:
                    return found
    return None


ML_CLASSIFIERS = frozenset({"TreeEnsembleClassifier", "SVMClassifier", "LinearClassifier"})
ML_FLOAT_OUT = frozenset({"TreeEnsembleRegressor", "SVMRegressor", "LinearRegressor", "Scaler", "Normalizer"})


def ml_output_dtype(node, value: str) -> int | None:
    """Output types the ai.onnx.ml schemas fix: a classifier's label is int64 or string (by which
    class-label attribute it has), its scores float; regressors, Scaler and Normalizer give float.
    A Cast to the type already there (skl2onnx and onnxmltools write them) is then provably a no-op."""
    slot = node.outputs.index(value) if value in node.outputs else -1
    if node.op_type in ML_CLASSIFIERS:
        if slot == 1:
            return TensorProto.FLOAT
        if slot == 0:
            if any(node.attr(a) is not None for a in ("classlabels_int64s", "classlabels_ints")):
                return TensorProto.INT64
            if node.attr("classlabels_strings") is not None:
                return TensorProto.STRING
        return None
    if node.op_type in ML_FLOAT_OUT and slot == 0:
        return TensorProto.FLOAT
    return None


def _np_to_onnx(dtype) -> int | None:
    from onnx import helper

    try:
        return helper.np_dtype_to_tensor_dtype(dtype)
    except (KeyError, TypeError, ValueError):
        return None


SAME_SHAPE_UNARY = frozenset({"Relu", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Clip", "Dropout",
                              "Identity", "Cast", "Neg", "Abs", "Exp", "Log", "Sqrt", "Erf", "Gelu", "Softplus", "Elu"})


def infer_rank(graph: Graph, value: str, depth: int = 8) -> int | None:
    """The rank of ``value`` if the graph proves it: declared, constant, or from its producer
    (Flatten and Gemm give 2, Reshape to a constant shape of k entries gives k, same-shape unary
    ops keep their input's). None rather than a guess."""
    shape = graph.declared_shape(value)
    if shape is not None:
        return len(shape)
    array = graph.const(value)
    if array is not None:
        return array.ndim
    node = graph.producer(value)
    if node is None or depth <= 0 or node.domain not in ("", "ai.onnx") or node.outputs[0] != value:
        return None
    if node.op_type in ("Flatten", "Gemm"):
        return 2
    if node.op_type == "Reshape" and len(node.inputs) > 1:
        target = graph.const(node.inputs[1])
        return None if target is None else int(target.size)
    if node.op_type in SAME_SHAPE_UNARY and node.inputs:
        return infer_rank(graph, node.inputs[0], depth - 1)
    return None
