"""RMS norm → RMSNormalization (opset 23) / SimplifiedLayerNormalization (--target ort, below 23)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.passes.ort_helpers import assert_same_outputs, ops, run

H = 16


def rms_model(opset=17, form="div", gamma=True, eps=1e-6, exponent=2.0, axes=(-1,), residual=False):
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(np.array(exponent, np.float32), "two"),
             numpy_helper.from_array(np.array(eps, np.float32), "eps"),
             numpy_helper.from_array((1 + 0.1 * rng.standard_normal(H)).astype(np.float32), "gamma"),
             numpy_helper.from_array(np.array(axes, np.int64), "axes")]
    inputs = [helper.make_tensor_value_info("x0", TensorProto.FLOAT, ["batch", "seq", H])]
    nodes = []
    x = "x0"
    if residual:
        inputs.append(helper.make_tensor_value_info("skip", TensorProto.FLOAT, ["batch", "seq", H]))
        nodes.append(helper.make_node("Add", ["x0", "skip"], ["x"]))
        x = "x"
    rm = (helper.make_node("ReduceMean", ["sq", "axes"], ["ms"], keepdims=1) if opset >= 18
          else helper.make_node("ReduceMean", ["sq"], ["ms"], axes=list(axes), keepdims=1))
    nodes += [helper.make_node("Pow", [x, "two"], ["sq"]), rm,
              helper.make_node("Add", ["ms", "eps"], ["v"]), helper.make_node("Sqrt", ["v"], ["r"])]
    if form == "div":
        nodes.append(helper.make_node("Div", [x, "r"], ["n"]))
    else:
        nodes += [helper.make_node("Reciprocal", ["r"], ["ir"]), helper.make_node("Mul", [x, "ir"], ["n"])]
    nodes.append(helper.make_node("Mul", ["gamma", "n"], ["y"]) if gamma else helper.make_node("Identity", ["n"], ["y"]))
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("form", ["div", "reciprocal"])
def test_rms_norm_becomes_rmsnormalization_at_opset_23(form):
    original, fused, _ = run(rms_model(opset=23, form=form), ["fuse-rms-norm"], target="onnx")
    assert ops(fused) == {"RMSNormalization": 1}
    node = fused.graph.nodes("RMSNormalization")[0]
    assert node.attr("axis") == -1 and node.attr("epsilon") == pytest.approx(1e-6)
    assert_same_outputs(original, fused)


def test_below_23_standard_target_leaves_it_and_ort_target_uses_simplified_layernorm():
    proto = rms_model(opset=17)
    original, same, _ = run(proto, ["fuse-rms-norm"], target="onnx")
    assert ops(same) == ops(original)
    original, fused, _ = run(proto, ["ort-rms-norm"])
    assert ops(fused) == {"SimplifiedLayerNormalization": 1}
    assert_same_outputs(original, fused)


def test_residual_add_makes_skip_simplified_layernorm():
    original, fused, _ = run(rms_model(opset=17, residual=True), ["ort-rms-norm", "ort-skip-layer-norm"])
    assert ops(fused) == {"com.microsoft:SkipSimplifiedLayerNormalization": 1}
    assert_same_outputs(original, fused)


def test_no_gamma_uses_ones_when_the_size_is_static():
    original, fused, _ = run(rms_model(opset=23, gamma=False), ["fuse-rms-norm"], target="onnx")
    assert ops(fused) == {"RMSNormalization": 1, "Identity": 1}
    assert_same_outputs(original, fused)


@pytest.mark.parametrize("kwargs", [{"exponent": 3.0}, {"axes": (1,)}])
def test_refuses_other_powers_and_non_trailing_axes(kwargs):
    original, result, _ = run(rms_model(opset=23, **kwargs), ["fuse-rms-norm"], target="onnx")
    assert ops(result) == ops(original)


def test_div_one_and_mul_self_spellings():
    model = rms_model(opset=23, form="reciprocal")
    nodes = model.graph.node
    recip = next(n for n in nodes if n.op_type == "Reciprocal")
    model.graph.initializer.append(numpy_helper.from_array(np.array(1.0, np.float32), "one"))
    recip.op_type, recip.input[:] = "Div", ["one", "r"]
    pow_node = next(n for n in nodes if n.op_type == "Pow")
    pow_node.op_type, pow_node.input[:] = "Mul", ["x0", "x0"]
    original, fused, _ = run(model, ["fuse-rms-norm"])
    assert ops(fused) == {"RMSNormalization": 1}
    assert_same_outputs(original, fused)


def test_gamma_that_does_not_fit_is_left_after_the_fused_op():
    model = rms_model(opset=23)
    gamma = next(i for i in model.graph.initializer if i.name == "gamma")
    gamma.CopyFrom(numpy_helper.from_array(np.ones((2, 1, H), np.float32), "gamma"))  # varies along the batch
    original, fused, _ = run(model, ["fuse-rms-norm"])
    assert ops(fused) == {"RMSNormalization": 1, "Mul": 1}
    assert_same_outputs(original, fused)


def test_explain_says_why():
    from graphtool import io
    from graphtool.optimize import optimize
    from graphtool.rewrite.explain import format_explanations

    _, _, ctx = optimize(io.load_proto(rms_model(opset=23, exponent=3.0)), passes=["fuse-rms-norm"],
                         explain=["fuse-rms-norm"])
    assert "check: two is 3, not 2" in format_explanations(ctx.explanations)


def test_float16_rms_norm_and_its_residual_add_fuse_in_float16():
    """LLaMA exported in float16 keeps the whole norm in float16 (x, eps, exponent, gamma)."""
    proto = rms_model(opset=17, residual=True)
    for t in proto.graph.initializer:
        if t.data_type == TensorProto.FLOAT:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float16), t.name))
    for vi in [*proto.graph.input, *proto.graph.output]:
        vi.type.tensor_type.elem_type = TensorProto.FLOAT16
    original, fused, _ = run(proto, ["ort-rms-norm", "ort-skip-layer-norm"])
    assert ops(fused) == {"com.microsoft:SkipSimplifiedLayerNormalization": 1}
    rng = np.random.default_rng(0)
    feeds = {"x0": rng.standard_normal((2, 3, H)).astype(np.float16), "skip": rng.standard_normal((2, 3, H)).astype(np.float16)}
    assert_same_outputs(original, fused, feeds, atol=4e-3)  # the kernel rounds once, the chain at every op
