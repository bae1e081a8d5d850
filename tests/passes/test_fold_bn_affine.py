"""BatchNormalization + per-channel Mul/Add → one BatchNormalization (standard ops)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from tests.passes.ort_helpers import assert_same_outputs, ops, run

C = 4


def bn_scale_model(mul_shape=(C, 1, 1), add_shape=(C, 1, 1), output_bn=False):
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(C).astype(np.float32), n) for n in ("s", "b", "m")]
    inits += [numpy_helper.from_array(rng.uniform(0.5, 2, C).astype(np.float32), "v"),
              numpy_helper.from_array(rng.standard_normal(mul_shape).astype(np.float32), "k"),
              numpy_helper.from_array(rng.standard_normal(add_shape).astype(np.float32), "c")]
    nodes = [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["bn"]),
             helper.make_node("Mul", ["bn", "k"], ["scaled"]),
             helper.make_node("Add", ["scaled", "c"], ["y"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if output_bn:
        outputs.append(helper.make_tensor_value_info("bn", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, C, 5, 5])], outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])


def test_scale_layer_folds_into_the_batchnorm():
    original, folded, _ = run(bn_scale_model(), ["fold-batch-norm-affine"], target="onnx")
    assert ops(folded) == {"BatchNormalization": 1}
    assert folded.graph.nodes("BatchNormalization")[0].outputs == ["y"]
    assert_same_outputs(original, folded)


def test_spatially_varying_or_read_elsewhere_is_refused():
    original, result, _ = run(bn_scale_model(mul_shape=(1, 1, 5, 1)), ["fold-batch-norm-affine"], target="onnx")
    assert ops(result) == ops(original)
    original, result, _ = run(bn_scale_model(output_bn=True), ["fold-batch-norm-affine"], target="onnx")
    assert ops(result) == ops(original)
