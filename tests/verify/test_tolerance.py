"""Tolerances from the output's dtype, and the original's own noise between ORT levels."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from graphtool.ir.from_onnx import from_onnx
from graphtool.optimize import optimize
from graphtool.verify import compare_arrays, verify


def _model(nodes, inputs, outputs, inits=(), opset=18):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return from_onnx(model)


def _matmul(perturbed: bool):
    """A @ B in fp16, and the same with every value moved by 2^-9 relative (about one fp16 ulp: what
    a rewrite that reorders a sum does to fp16 values; onnxruntime's CPU kernels compute fp16 in
    fp32 and round once, so a real reordering rarely shows in a test this small)."""
    vi = [helper.make_tensor_value_info("a", TensorProto.FLOAT16, ["n", 32]),
          helper.make_tensor_value_info("b", TensorProto.FLOAT16, [32, 64])]
    out = [helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["n", 64])]
    nodes = [helper.make_node("MatMul", ["a", "b"], ["y" if not perturbed else "p"])]
    inits = []
    if perturbed:
        inits = [numpy_helper.from_array(np.array(1 + 2 ** -9, np.float32), "k")]
        nodes += [helper.make_node("Cast", ["p"], ["p32"], to=TensorProto.FLOAT), helper.make_node("Mul", ["p32", "k"], ["q"]),
                  helper.make_node("Cast", ["q"], ["y"], to=TensorProto.FLOAT16)]
    return _model(nodes, vi, out, inits)


def test_fp16_output_is_compared_with_fp16_tolerances_and_the_report_says_so():
    rng = np.random.default_rng(0)
    feeds = {"a": rng.standard_normal((16, 32)).astype(np.float16), "b": rng.standard_normal((32, 64)).astype(np.float16)}
    original, rewritten = _matmul(False), _matmul(True)
    result = verify(original, rewritten, feeds=feeds)
    (out,) = result.outputs
    from graphtool.runtime import make_session

    ref, new = (make_session(m).run(None, feeds)[0] for m in (original, rewritten))
    assert not compare_arrays("y", ref, new).ok  # the two round differently: fp32 tolerances call it a mismatch
    assert result.ok and out.dtype == "float16" and abs(out.rtol - 10 * 2 ** -10) < 1e-12
    assert "float16 outputs: rtol=0.0098, atol=0.0098 from the dtype" in result.summary()


def test_fp16_tolerance_still_catches_a_real_change():
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT16, ["n", 64]) for n in "abc"]
    out = [helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["n", 64])]
    original = _model([helper.make_node("Add", ["a", "b"], ["t"]), helper.make_node("Add", ["t", "c"], ["y"])], vi, out)
    wrong = _model([helper.make_node("Add", ["a", "b"], ["t"]), helper.make_node("Sub", ["t", "c"], ["y"])], vi, out)
    result = verify(original, wrong)
    assert not result.ok and "float16" in result.summary()


def _layer_norm_decomposed(offset: float):
    d = 64
    inits = [numpy_helper.from_array(np.array([-1], np.int64), "ax"), numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             numpy_helper.from_array(np.array(1e-5, np.float32), "eps"),
             numpy_helper.from_array(np.full(d, 1.5, np.float32), "g"), numpy_helper.from_array(np.full(d, 0.1, np.float32), "b"),
             numpy_helper.from_array(np.array(offset, np.float32), "off")]
    names = [("Add", ["x0", "off"], "x"), ("ReduceMean", ["x", "ax"], "m"), ("Sub", ["x", "m"], "d"), ("Pow", ["d", "two"], "p"),
             ("ReduceMean", ["p", "ax"], "v"), ("Add", ["v", "eps"], "ve"), ("Sqrt", ["ve"], "s"), ("Div", ["d", "s"], "n"),
             ("Mul", ["n", "g"], "ng"), ("Add", ["ng", "b"], "y")]
    nodes = [helper.make_node(op, ins, [out]) for op, ins, out in names]
    return _model(nodes, [helper.make_tensor_value_info("x0", TensorProto.FLOAT, ["batch", 7, d])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)


def test_rewrite_moving_outputs_as_far_as_ort_itself_does_is_not_blamed():
    # a layer norm over values near 3000: onnxruntime's fused kernel (what ORT's own level "all"
    # makes of the original) and graphtool's LayerNormalization both differ from the decomposed
    # original by ~4e-4, past atol=1e-4
    original = _layer_norm_decomposed(3000.0)
    fused, _, _ = optimize(original, level=2, passes=["fuse-layer-norm"])
    assert fused.graph.has_op("LayerNormalization")
    result = verify(original, fused)
    (out,) = result.outputs
    # the floor is read only for an output that failed rtol/atol: a noise value says it did
    assert result.ok and out.noise and out.max_abs > 1e-4 and out.max_abs <= 2 * out.noise
    assert "original's own difference between ORT levels" in result.summary()


def test_noise_floor_does_not_excuse_a_larger_change():
    original = _layer_norm_decomposed(3000.0)
    fused, _, _ = optimize(original, level=2, passes=["fuse-layer-norm"])
    (ln,) = fused.graph.nodes("LayerNormalization")
    fused.graph.set_input(ln, 2, fused.graph.add_initializer(np.full(64, 0.2, np.float32)))  # bias 0.1 -> 0.2
    result = verify(original, fused)
    assert not result.ok and result.outputs[0].max_abs > 0.09
