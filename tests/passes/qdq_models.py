"""QDQ test models as users make them: a small float CNN quantized by onnxruntime's own quantizer.

The float model has the structures quantized CNNs are made of (Conv+Relu, a residual Add, a
squeeze-excite Sigmoid·Mul, MaxPool, GlobalAveragePool, AveragePool, a Reshape/Transpose channel
shuffle, Concat, Flatten → Gemm → Softmax) with random weights; ``quantize_static`` turns it into
QDQ (per tensor or per channel) from a random calibration set, exactly as
``onnxruntime.quantization`` does for any model. Built at test time in a temp folder.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SHAPE = (1, 3, 16, 16)


def _weights(seed: int):
    """``w(name, *shape)``: a random float32 initializer of that shape, from one seeded stream."""
    rng = np.random.default_rng(seed)

    def w(name: str, *shape: int, scale: float = 0.3) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    return w


def _save(nodes: list, inits: list, name: str, path: str) -> str:
    """The float model x [SHAPE] → y [1, 10] at opset 13, checked, written to ``path``."""
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    proto.ir_version = 8
    onnx.checker.check_model(proto, full_check=True)
    onnx.save(proto, path)
    return path


def float_cnn(path: str, seed: int = 0) -> str:
    w = _weights(seed)
    inits = [w("w1", 8, 3, 3, 3), w("b1", 8), w("w2", 8, 8, 3, 3), w("b2", 8), w("w3", 8, 8, 1, 1), w("b3", 8),
             w("wse", 8, 8, 1, 1), w("bse", 8), w("w4", 16, 16, 1, 1), w("b4", 16), w("fc", 10, 16), w("fcb", 10),
             numpy_helper.from_array(np.array([1, 2, 4, 8, 8], np.int64), "shuffle1"),
             numpy_helper.from_array(np.array([1, 8, 8, 8], np.int64), "shuffle2")]
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]), n("Relu", ["c1"], ["r1"]),
        n("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        n("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]), n("Relu", ["c2"], ["r2"]),
        n("Conv", ["r2", "w3", "b3"], ["c3"]), n("Add", ["c3", "p1"], ["res"]), n("Relu", ["res"], ["r3"]),
        n("GlobalAveragePool", ["r3"], ["gap"]), n("Conv", ["gap", "wse", "bse"], ["se"]),
        n("Sigmoid", ["se"], ["sig"]), n("Mul", ["r3", "sig"], ["scaled"]),
        n("Reshape", ["scaled", "shuffle1"], ["s1"]), n("Transpose", ["s1"], ["s2"], perm=[0, 2, 1, 3, 4]),
        n("Reshape", ["s2", "shuffle2"], ["s3"]), n("Concat", ["s3", "r3"], ["cat"], axis=1),
        n("Conv", ["cat", "w4", "b4"], ["c4"]), n("Relu", ["c4"], ["r4"]),
        n("AveragePool", ["r4"], ["ap"], kernel_shape=[2, 2], strides=[2, 2]),
        n("GlobalAveragePool", ["ap"], ["g2"]), n("Flatten", ["g2"], ["flat"]),
        n("Gemm", ["flat", "fc", "fcb"], ["logits"], transB=1), n("Softmax", ["logits"], ["y"], axis=1),
    ]
    return _save(nodes, inits, "qcnn", path)


def float_resnet(path: str, seed: int = 0) -> str:
    """A ResNet-style stem and block: Conv → Relu → MaxPool → (Conv → Relu → Conv) + skip → Relu →
    GlobalAveragePool → Flatten → Gemm (what a channels-last layout converts end to end)."""
    w = _weights(seed)
    n = helper.make_node
    nodes = [n("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]), n("Relu", ["c1"], ["r1"]),
             n("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             n("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]), n("Relu", ["c2"], ["r2"]),
             n("Conv", ["r2", "w3", "b3"], ["c3"], pads=[1, 1, 1, 1]), n("Add", ["c3", "p1"], ["s"]),
             n("Relu", ["s"], ["r3"]), n("GlobalAveragePool", ["r3"], ["g"]), n("Flatten", ["g"], ["f"]),
             n("Gemm", ["f", "fc", "fcb"], ["y"], transB=1)]
    inits = [w("w1", 8, 3, 3, 3), w("b1", 8), w("w2", 8, 8, 3, 3), w("b2", 8), w("w3", 8, 8, 3, 3), w("b3", 8),
             w("fc", 10, 8), w("fcb", 10)]
    return _save(nodes, inits, "qresnet", path)


def float_sum_resnet(path: str, seed: int = 0) -> str:
    """Two residual blocks joined by ``Sum`` (older exports: onnx's light_resnet50), which no quantized
    kernel takes: each block's output is a float Sum between a DequantizeLinear pair and a QuantizeLinear,
    read by the next block's convolution and its Sum; the head flattens the whole map (a Reshape, where
    a channels-last layout must end)."""
    w = _weights(seed)
    n = helper.make_node
    nodes = [n("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1]), n("Relu", ["c0"], ["r0"])]
    inits = [w("w0", 8, 3, 3, 3), w("b0", 8)]
    prev = "r0"
    for k in (1, 2):
        nodes += [n("Conv", [prev, f"wa{k}", f"ba{k}"], [f"ca{k}"], pads=[1, 1, 1, 1]), n("Relu", [f"ca{k}"], [f"ra{k}"]),
                  n("Conv", [f"ra{k}", f"wb{k}", f"bb{k}"], [f"cb{k}"], pads=[1, 1, 1, 1]),
                  n("Sum", [f"cb{k}", prev], [f"s{k}"]), n("Relu", [f"s{k}"], [f"o{k}"])]
        inits += [w(f"wa{k}", 8, 8, 3, 3), w(f"ba{k}", 8), w(f"wb{k}", 8, 8, 3, 3), w(f"bb{k}", 8)]
        prev = f"o{k}"
    nodes += [n("Reshape", [prev, "flat"], ["f"]), n("Gemm", ["f", "fc", "fcb"], ["y"], transB=1)]
    inits += [w("fc", 10, 8 * SHAPE[2] * SHAPE[3]), w("fcb", 10),
              helper.make_tensor("flat", onnx.TensorProto.INT64, [2], [SHAPE[0], -1])]
    return _save(nodes, inits, "qsumresnet", path)


def float_pointwise(path: str, seed: int = 0) -> str:
    """A MobileNet-style body: a small 3×3 stem, then 1×1 convolutions and a residual Add (dense k×k
    kernels hold 12 % of the convolution weights) → GlobalAveragePool → Flatten → Gemm."""
    w = _weights(seed)
    n = helper.make_node
    nodes = [n("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]), n("Relu", ["c1"], ["r1"]),
             n("Conv", ["r1", "w2", "b2"], ["c2"]), n("Relu", ["c2"], ["r2"]),
             n("Conv", ["r2", "w3", "b3"], ["c3"]), n("Relu", ["c3"], ["r3"]),
             n("Conv", ["r3", "w4", "b4"], ["c4"]), n("Add", ["c4", "r1"], ["s"]),
             n("GlobalAveragePool", ["s"], ["g"]), n("Flatten", ["g"], ["f"]), n("Gemm", ["f", "fc", "fcb"], ["y"], transB=1)]
    inits = [w("w1", 8, 3, 3, 3), w("b1", 8), w("w2", 32, 8, 1, 1), w("b2", 32), w("w3", 32, 32, 1, 1), w("b3", 32),
             w("w4", 8, 32, 1, 1), w("b4", 8), w("fc", 10, 8), w("fcb", 10)]
    return _save(nodes, inits, "qpointwise", path)


class _Reader:
    def __init__(self, count: int = 4, seed: int = 1):
        rng = np.random.default_rng(seed)
        self.feeds = iter([{"x": rng.standard_normal(SHAPE).astype(np.float32)} for _ in range(count)])

    def get_next(self):
        return next(self.feeds, None)


def quantized_cnn(folder: str, per_channel: bool = False, activations: str = "uint8", resnet: bool = False,
                  pointwise: bool = False, qoperator: bool = False, sums: bool = False, symmetric: bool = False) -> str:
    """The float CNN (or ResNet block, or pointwise body) through ``onnxruntime.quantization.quantize_static``
    (QDQ; QOperator: QLinearConv, QLinearAdd, ... as the quantizer writes them; ``symmetric``: its
    ActivationSymmetric option, zero points mid-range, so the Relus stay between their Q/DQ pairs)."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    name = "resnet" if resnet else "pointwise" if pointwise else "sums" if sums else "cnn"
    build = {"resnet": float_resnet, "pointwise": float_pointwise, "sums": float_sum_resnet, "cnn": float_cnn}[name]
    src = build(os.path.join(folder, f"float_{name}.onnx"))
    form = "qop" if qoperator else "qdq"
    dst = os.path.join(folder, f"{form}_{name}_{'pc' if per_channel else 'pt'}_{activations}{'_sym' * symmetric}.onnx")
    if not os.path.exists(dst):
        quantize_static(src, dst, _Reader(), quant_format=QuantFormat.QOperator if qoperator else QuantFormat.QDQ,
                        per_channel=per_channel,
                        activation_type=QuantType.QUInt8 if activations == "uint8" else QuantType.QInt8,
                        weight_type=QuantType.QInt8, extra_options={"ActivationSymmetric": True} if symmetric else None)
    return dst


def dynamic_mlp(folder: str, seed: int = 0) -> str:
    """x[2, 5, 16] → MatMul+bias → Relu → two projections sharing one input (one with the bias first, as
    torch exports it; one without), through ``onnxruntime.quantization.quantize_dynamic`` (int8 weights)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    w = _weights(seed)
    n = helper.make_node
    nodes = [n("MatMul", ["x", "w1"], ["m1"]), n("Add", ["m1", "b1"], ["a1"]), n("Relu", ["a1"], ["h"]),
             n("MatMul", ["h", "w2"], ["m2"]), n("Add", ["b2", "m2"], ["y1"]), n("MatMul", ["h", "w3"], ["y2"])]
    inits = [w("w1", 16, 32), w("b1", 32), w("w2", 32, 8), w("b2", 8), w("w3", 32, 8)]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 16])],
                              [helper.make_tensor_value_info("y1", TensorProto.FLOAT, [2, 5, 8]),
                               helper.make_tensor_value_info("y2", TensorProto.FLOAT, [2, 5, 8])], inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    proto.ir_version = 8
    onnx.checker.check_model(proto, full_check=True)
    src, dst = os.path.join(folder, "float_mlp.onnx"), os.path.join(folder, "dynamic_mlp.onnx")
    onnx.save(proto, src)
    if not os.path.exists(dst):
        quantize_dynamic(src, dst, weight_type=QuantType.QInt8)
    return dst


def feeds(count: int = 3, seed: int = 7) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal(SHAPE).astype(np.float32)} for _ in range(count)]
