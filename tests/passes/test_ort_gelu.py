"""GELU family → com.microsoft Gelu / FastGelu / BiasGelu / QuickGelu (--target ort)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.passes.ort_helpers import assert_same_outputs, ops, run

H = 8


def _model(nodes, inits, opset=17, x_shape=("batch", 3, H), out="y"):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _c(name, value, dtype=np.float32):
    return numpy_helper.from_array(np.asarray(value, dtype), name)


def bias_erf_gelu(opset=17, bias_shape=(H,)):
    """Add(x, bias) then x·0.5·(1 + Erf(x/√2)), as BERT's TorchScript export writes it."""
    rng = np.random.default_rng(0)
    inits = [_c("bias", rng.standard_normal(bias_shape)), _c("sqrt2", math.sqrt(2.0)), _c("one", 1.0), _c("half", 0.5)]
    nodes = [
        helper.make_node("Add", ["x", "bias"], ["a"]),
        helper.make_node("Div", ["a", "sqrt2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["p"]),
        helper.make_node("Mul", ["a", "p"], ["m"]),
        helper.make_node("Mul", ["m", "half"], ["y"]),
    ]
    return _model(nodes, inits, opset)


def bias_tanh_gelu(opset=17):
    rng = np.random.default_rng(1)
    inits = [_c("bias", rng.standard_normal(H)), _c("half", 0.5), _c("three", 3.0), _c("k", 0.044715),
             _c("s", math.sqrt(2 / math.pi)), _c("one", 1.0)]
    nodes = [
        helper.make_node("Add", ["x", "bias"], ["a"]),
        helper.make_node("Mul", ["a", "half"], ["h"]),
        helper.make_node("Pow", ["a", "three"], ["c"]),
        helper.make_node("Mul", ["c", "k"], ["ck"]),
        helper.make_node("Add", ["a", "ck"], ["inner"]),
        helper.make_node("Mul", ["inner", "s"], ["arg"]),
        helper.make_node("Tanh", ["arg"], ["t"]),
        helper.make_node("Add", ["t", "one"], ["p"]),
        helper.make_node("Mul", ["h", "p"], ["y"]),
    ]
    return _model(nodes, inits, opset)


def test_erf_gelu_with_bias_becomes_bias_gelu_below_opset_20():
    proto = bias_erf_gelu()
    original, fused, _ = run(proto, ["ort-gelu", "ort-bias-gelu"])
    assert ops(fused) == {"com.microsoft:BiasGelu": 1}
    assert fused.opset("com.microsoft") == 1
    assert_same_outputs(original, fused)


def test_tanh_gelu_with_bias_becomes_fast_gelu():
    proto = bias_tanh_gelu()
    original, fused, _ = run(proto, ["ort-gelu", "ort-bias-gelu"])
    assert ops(fused) == {"com.microsoft:FastGelu": 1}
    assert len(fused.graph.nodes("FastGelu")[0].inputs) == 2  # the bias went in
    assert_same_outputs(original, fused)


def test_standard_gelu_at_opset_20_takes_the_bias():
    """Opset 20: level 1 writes Gelu; level 2 (ort) folds the bias Add into BiasGelu."""
    proto = bias_erf_gelu(opset=20)
    original, fused, _ = run(proto, ["fuse-gelu", "ort-gelu", "ort-bias-gelu"])
    assert ops(fused) == {"com.microsoft:BiasGelu": 1}
    assert_same_outputs(original, fused)


def test_bias_that_would_broadcast_is_refused():
    """x's last dim is 1: Add broadcasts it to H, which BiasGelu (a per-row bias add) cannot."""
    proto = bias_erf_gelu()
    proto.graph.input[0].CopyFrom(helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 1]))
    original, fused, _ = run(proto, ["ort-gelu", "ort-bias-gelu"])
    assert ops(fused) == {"com.microsoft:Gelu": 1, "Add": 1}
    assert_same_outputs(original, fused)


def test_gelu_input_read_elsewhere_keeps_the_add():
    proto = bias_erf_gelu()
    proto.graph.output.append(helper.make_tensor_value_info("a", TensorProto.FLOAT, None))
    original, fused, _ = run(proto, ["ort-gelu", "ort-bias-gelu"])
    assert ops(fused) == {"com.microsoft:Gelu": 1, "Add": 1}
    assert_same_outputs(original, fused)


@pytest.mark.parametrize("alpha", [1.702, 1.0])
def test_quick_gelu_and_silu(alpha):
    inits = [_c("alpha", alpha)]
    nodes = []
    sig_in = "x"
    if alpha != 1.0:
        nodes.append(helper.make_node("Mul", ["x", "alpha"], ["ax"]))
        sig_in = "ax"
    nodes += [helper.make_node("Sigmoid", [sig_in], ["s"]), helper.make_node("Mul", ["x", "s"], ["y"])]
    proto = _model(nodes, inits if alpha != 1.0 else [])
    original, fused, _ = run(proto, ["ort-quick-gelu"])
    assert ops(fused) == {"com.microsoft:QuickGelu": 1}
    assert fused.graph.nodes("QuickGelu")[0].attr("alpha") == pytest.approx(alpha)
    assert_same_outputs(original, fused)


def test_sigmoid_of_something_else_is_not_quick_gelu():
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Mul", ["r", "s"], ["y"])]
    _, fused, _ = run(_model(nodes, []), ["ort-quick-gelu"])
    assert "com.microsoft:QuickGelu" not in ops(fused)


def test_onnx_target_never_emits_contrib_ops():
    _, fused, _ = run(bias_erf_gelu(), level=2, target="onnx")
    assert all(n.domain in ("", "ai.onnx") for n in fused.graph.nodes())
    assert "com.microsoft" not in fused.opset_imports


def test_bias_add_read_by_a_shape_keeps_the_add():
    proto = bias_erf_gelu()
    proto.graph.node.append(helper.make_node("Shape", ["a"], ["a_shape"]))
    proto.graph.output.append(helper.make_tensor_value_info("a_shape", TensorProto.INT64, None))
    original, fused, _ = run(proto, ["ort-gelu", "ort-bias-gelu"])
    assert ops(fused) == {"com.microsoft:Gelu": 1, "Add": 1, "Shape": 1}
    assert_same_outputs(original, fused)


def test_stats_keep_their_keys():
    _, _, report = run(bias_tanh_gelu(), ["ort-gelu", "ort-bias-gelu", "ort-quick-gelu"])
    assert report.passes["ort-gelu"].stats == {"gelu": 0, "fast_gelu": 1}
    assert report.passes["ort-bias-gelu"].stats == {"bias_gelu": 0, "fast_gelu": 1}
    assert report.passes["ort-quick-gelu"].stats == {"fused": 0}


def test_standard_tanh_gelu_at_opset_20_takes_the_bias():
    original, fused, _ = run(bias_tanh_gelu(opset=20), ["fuse-gelu", "ort-gelu", "ort-bias-gelu"])
    assert ops(fused) == {"com.microsoft:FastGelu": 1}
    assert len(fused.graph.nodes("FastGelu")[0].inputs) == 2
    assert_same_outputs(original, fused)


def test_quick_gelu_alpha_that_would_broadcast_is_refused():
    nodes = [helper.make_node("Mul", ["alpha", "x"], ["ax"]), helper.make_node("Sigmoid", ["ax"], ["s"]),
             helper.make_node("Mul", ["s", "x"], ["y"])]
    _, fused, _ = run(_model(nodes, [_c("alpha", np.full((1, 1, 1, 1), 1.702))]), ["ort-quick-gelu"])
    assert "com.microsoft:QuickGelu" not in ops(fused)


def factored_tanh_gelu(form="megatron", half=0.5, opset=17):
    """tanh(k·x·(1 + c·x·x)): Megatron's / OpenAI's gelu (x·0.5·(…)) and HuggingFace's FastGELUActivation
    (0.5·x·(…), (x·k)·(1 + (c·x)·x)), node by node as torch exports them."""
    k = 0.7978845608 if form == "hf" else 0.79788456
    if form == "hf":
        nodes = [helper.make_node("Mul", ["x", "k"], ["xk"]), helper.make_node("Mul", ["c", "x"], ["cx"]),
                 helper.make_node("Mul", ["cx", "x"], ["cx2"]), helper.make_node("Add", ["one", "cx2"], ["p"]),
                 helper.make_node("Mul", ["xk", "p"], ["inner"]), helper.make_node("Tanh", ["inner"], ["t"]),
                 helper.make_node("Add", ["one", "t"], ["q"]), helper.make_node("Mul", ["half", "x"], ["hx"]),
                 helper.make_node("Mul", ["hx", "q"], ["y"])]
    else:
        nodes = [helper.make_node("Mul", ["x", "half"], ["hx"]), helper.make_node("Mul", ["x", "x"], ["x2"]),
                 helper.make_node("Mul", ["x2", "c"], ["cx2"]), helper.make_node("Add", ["cx2", "one"], ["p"]),
                 helper.make_node("Mul", ["x", "p"], ["xp"]), helper.make_node("Mul", ["xp", "k"], ["inner"]),
                 helper.make_node("Tanh", ["inner"], ["t"]), helper.make_node("Add", ["t", "one"], ["q"]),
                 helper.make_node("Mul", ["hx", "q"], ["y"])]
    inits = [_c("k", k), _c("c", 0.044715), _c("one", 1.0), _c("half", half)]
    return _model(nodes, inits, opset=opset)


@pytest.mark.parametrize("form", ["megatron", "hf"])
def test_factored_tanh_gelu_becomes_fast_gelu(form):
    original, fused, _ = run(factored_tanh_gelu(form), ["ort-gelu"])
    assert ops(fused) == {"com.microsoft:FastGelu": 1}
    assert_same_outputs(original, fused)
    original, fused, _ = run(factored_tanh_gelu(form, opset=20), ["fuse-gelu"], target="onnx")
    assert ops(fused) == {"Gelu": 1} and fused.graph.nodes("Gelu")[0].attr("approximate") in ("tanh", b"tanh")
    assert_same_outputs(original, fused)


def test_factored_tanh_gelu_with_a_wrong_constant_stays():
    original, same, _ = run(factored_tanh_gelu("megatron", half=0.6), ["ort-gelu"])
    assert ops(same) == ops(original)


@pytest.mark.parametrize("reversed_add", [False, True])
def test_bias_that_is_a_graph_input_goes_in(reversed_add):
    """onnxscript's bias_gelu_test models: Gelu(Add(x, y)) with y a [H] graph input, either order."""
    nodes = [helper.make_node("Add", ["y", "x"] if reversed_add else ["x", "y"], ["a"]),
             helper.make_node("Gelu", ["a"], ["out"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, H]),
                                           helper.make_tensor_value_info("y", TensorProto.FLOAT, [H])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    original, fused, _ = run(proto, ["ort-bias-gelu"])
    assert ops(fused) == {"com.microsoft:BiasGelu": 1}
    assert fused.graph.nodes("BiasGelu")[0].inputs == ["x", "y"]
    rng = np.random.default_rng(6)
    assert_same_outputs(original, fused, {"x": rng.standard_normal((4, H)).astype(np.float32),
                                          "y": rng.standard_normal(H).astype(np.float32)})
    # a y of shape [1] would broadcast over x's last dim: not the kernel's per-row bias
    graph.input[1].type.tensor_type.shape.dim[0].dim_value = 1
    _, kept, _ = run(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), ["ort-bias-gelu"])
    assert "com.microsoft:BiasGelu" not in ops(kept)


@pytest.mark.parametrize("gelu", ["tanh", "erf"])
def test_float16_gelu_becomes_the_contrib_op_with_float16_constants(gelu):
    """A float16 graph (onnxruntime's float16 converter, Gemma's GELU-tanh MLP) stores 0.044715 as
    0.0447083 (1.5e-4 off, beyond the 1e-4 the check allows a float32 constant): the float16
    nearest of each constant is accepted, and Gelu / FastGelu run float16 on the CPU. Outputs within
    float16's precision; a constant that is not the float16 nearest is still refused."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = bias_tanh_gelu() if gelu == "tanh" else bias_erf_gelu()
    half = convert_float_to_float16(model, keep_io_types=False)
    original, result, _ = run(half, ["ort-gelu"])
    fused = "com.microsoft:FastGelu" if gelu == "tanh" else "com.microsoft:Gelu"
    assert ops(result)[fused] == 1, ops(result)
    x = np.random.default_rng(3).standard_normal((2, 3, H)).astype(np.float16)
    assert_same_outputs(original, result, {"x": x}, atol=2e-3)
    if gelu == "tanh":  # 0.04475: within float16's step of 0.044715's nearest, but not it
        for init in half.graph.initializer:
            if init.name == "k":
                init.CopyFrom(numpy_helper.from_array(np.array(0.04475, np.float16), "k"))
        assert ops(run(half, ["ort-gelu"])[1])[fused] == 0
