"""fuse-conv-batch-norm / fuse-conv-mul / fuse-conv-add: per-channel affine ops folded into Conv."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphtool import io
from graphtool.optimize import optimize
from graphtool.runtime import make_session, random_inputs
from graphtool.verify import verify
from tests.conftest import FIXTURES, light_model

CONV_PASSES = ["fuse-conv-batch-norm", "fuse-conv-mul", "fuse-conv-add"]


def _init(name: str, array: np.ndarray) -> TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def _conv_model(
    after: list[onnx.NodeProto],
    extra_inits: list[TensorProto],
    out: str,
    *,
    spatial: int = 2,
    group: int = 1,
    bias: bool = True,
    transpose: bool = False,
    extra_outputs: tuple[str, ...] = (),
    opset: int = 17,
    cin: int = 4,
    cout: int = 6,
    size: int = 5,
    dtype=np.float32,
) -> onnx.ModelProto:
    """x[N, cin, size...] → Conv/ConvTranspose (writes "c") → ``after`` nodes → ``out``."""
    r = np.random.default_rng(1)
    kernel = [3] * spatial
    if transpose:
        w = r.standard_normal((cin, cout // group, *kernel)).astype(dtype)
    else:
        w = r.standard_normal((cout, cin // group, *kernel)).astype(dtype)
    inits = [_init("W", w), *extra_inits]
    conv_inputs = ["x", "W"]
    if bias:
        inits.append(_init("B", r.standard_normal(cout).astype(dtype)))
        conv_inputs.append("B")
    op = "ConvTranspose" if transpose else "Conv"
    nodes = [helper.make_node(op, conv_inputs, ["c"], name="conv", group=group, pads=[1] * (2 * spatial)), *after]
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", elem, ["N", cin, *([size] * spatial)])],
        [helper.make_tensor_value_info(o, elem, None) for o in (out, *extra_outputs)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return model


def _bn(inp: str = "c", out: str = "y", channels: int = 6, **attrs) -> tuple[onnx.NodeProto, list[TensorProto]]:
    r = np.random.default_rng(2)
    inits = [
        _init("scale", r.uniform(0.5, 1.5, channels).astype(np.float32)),
        _init("beta", r.standard_normal(channels).astype(np.float32)),
        _init("mean", r.standard_normal(channels).astype(np.float32)),
        _init("var", r.uniform(0.5, 2.0, channels).astype(np.float32)),
    ]
    node = helper.make_node("BatchNormalization", [inp, "scale", "beta", "mean", "var"], [out], name="bn", **attrs)
    return node, inits


def _ops(model) -> list[str]:
    return [n.op_type for n in model.graph.nodes()]


def _optimize(proto: onnx.ModelProto, passes=CONV_PASSES):
    original = io.load_proto(proto)
    optimized, report, ctx = optimize(original, passes=passes)
    return original, optimized, report, ctx


@pytest.mark.parametrize("spatial", [1, 2, 3])
@pytest.mark.parametrize("group", [1, 2])
@pytest.mark.parametrize("bias", [True, False])
def test_conv_bn_folds_for_any_kernel_rank_group_and_bias(spatial, group, bias):
    bn, inits = _bn(epsilon=1e-3)
    proto = _conv_model([bn, helper.make_node("Relu", ["y"], ["z"])], inits, "z",
                        spatial=spatial, group=group, bias=bias)
    original, optimized, report, ctx = _optimize(proto)
    assert _ops(optimized) == ["Conv", "Relu"]
    conv = optimized.graph.nodes("Conv")[0]
    assert conv.name == "conv" and conv.outputs == ["y"] and conv.attr("group", 1) == group
    assert len(conv.inputs) == 3 and optimized.graph.const(conv.inputs[2]).shape == (6,)
    assert report.passes["fuse-conv-batch-norm"].stats["fused"] == 1
    assert ctx.provenance["conv"] == ["bn"]
    # the replaced parameters are gone, not left as dead initializers
    assert not {"W", "B", "scale", "beta", "mean", "var"} & set(optimized.graph.initializers)
    result = verify(original, optimized)
    assert result.ok, result.summary()


def test_conv_bn_keeps_a_graph_output_name():
    bn, inits = _bn()
    original, optimized, _, _ = _optimize(_conv_model([bn], inits, "y"))
    assert _ops(optimized) == ["Conv"]
    assert list(optimized.graph.outputs) == ["y"] and optimized.graph.producer("y").op_type == "Conv"
    assert verify(original, optimized).ok


def test_conv_transpose_bn_folds_per_group():
    bn, inits = _bn()
    proto = _conv_model([bn], inits, "y", group=2, transpose=True)
    original, optimized, _, _ = _optimize(proto)
    assert _ops(optimized) == ["ConvTranspose"]
    result = verify(original, optimized)
    assert result.ok, result.summary()


def test_float64_weights_keep_their_dtype():
    r = np.random.default_rng(3)
    inits = [_init(n, r.uniform(0.5, 1.5, 6)) for n in ("scale", "beta", "mean", "var")]  # float64
    bn = helper.make_node("BatchNormalization", ["c", "scale", "beta", "mean", "var"], ["y"])
    _, optimized, _, _ = _optimize(_conv_model([bn], inits, "y", dtype=np.float64))
    conv = optimized.graph.nodes("Conv")[0]
    assert [optimized.graph.const(v).dtype for v in conv.inputs[1:]] == [np.float64, np.float64]


def test_refuses_when_the_conv_output_is_also_a_graph_output():
    bn, inits = _bn()
    _, optimized, report, _ = _optimize(_conv_model([bn], inits, "y", extra_outputs=("c",)))
    assert _ops(optimized) == ["Conv", "BatchNormalization"]
    assert report.passes["fuse-conv-batch-norm"].stats["fused"] == 0


def test_refuses_when_the_conv_output_has_another_reader():
    bn, inits = _bn()
    proto = _conv_model([bn, helper.make_node("Relu", ["c"], ["r"])], inits, "y", extra_outputs=("r",))
    _, optimized, _, _ = _optimize(proto)
    assert sorted(_ops(optimized)) == ["BatchNormalization", "Conv", "Relu"]


def test_refuses_training_mode_and_non_constant_statistics():
    bn, inits = _bn(training_mode=1)
    _, optimized, _, _ = _optimize(_conv_model([bn], inits, "y", opset=15))
    assert "BatchNormalization" in _ops(optimized)

    bn, inits = _bn()
    proto = _conv_model([bn], [i for i in inits if i.name != "var"], "y")
    proto.graph.input.append(helper.make_tensor_value_info("var", TensorProto.FLOAT, [6]))
    _, optimized, _, _ = _optimize(proto)
    assert "BatchNormalization" in _ops(optimized)


def test_fixture_conv_bn():
    original = io.load(os.path.join(FIXTURES, "conv_bn.onnx"))
    optimized, report, _ = optimize(original, passes=CONV_PASSES)
    assert _ops(optimized) == ["Conv", "Relu", "Conv", "Relu"]
    assert report.passes["fuse-conv-batch-norm"].stats["fused"] == 2
    result = verify(original, optimized)
    assert result.ok, result.summary()


# ---------------------------------------------------------------- Add / Sub / Mul / Div

@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("shape", [(6, 1, 1), (1, 6, 1, 1), (1, 1, 1), (), (1,)])
def test_per_channel_constant_folds(op, shape):
    r = np.random.default_rng(4)
    k = r.uniform(0.5, 2.0, shape).astype(np.float32)
    node = helper.make_node(op, ["c", "k"], ["y"], name="affine")
    original, optimized, report, _ = _optimize(_conv_model([node], [_init("k", k)], "y"))
    assert _ops(optimized) == ["Conv"] and optimized.graph.producer("y").name == "conv"
    assert "k" not in optimized.graph.initializers
    result = verify(original, optimized)
    assert result.ok, result.summary()


@pytest.mark.parametrize("op", ["Add", "Mul"])
def test_constant_first_operand_folds(op):
    k = np.full((6, 1, 1), 1.5, np.float32)
    original, optimized, _, _ = _optimize(_conv_model([helper.make_node(op, ["k", "c"], ["y"])], [_init("k", k)], "y"))
    assert _ops(optimized) == ["Conv"]
    assert verify(original, optimized).ok


def test_conv_bn_then_mul_then_add_all_fold_into_one_conv():
    bn, inits = _bn()
    mul = helper.make_node("Mul", ["y", "s"], ["m"])
    add = helper.make_node("Add", ["m", "t"], ["z"])
    inits += [_init("s", np.linspace(0.5, 2, 6, dtype=np.float32).reshape(6, 1, 1)),
              _init("t", np.linspace(-1, 1, 6, dtype=np.float32).reshape(1, 6, 1, 1))]
    original, optimized, report, _ = _optimize(_conv_model([bn, mul, add], inits, "z"))
    assert _ops(optimized) == ["Conv"] and optimized.graph.producer("z").op_type == "Conv"
    assert verify(original, optimized).ok


@pytest.mark.parametrize("op", ["Add", "Mul"])
@pytest.mark.parametrize("shape", [(6,), (1, 1, 5, 5), (1, 1, 1, 5), (2, 6, 1, 1), (1, 1, 6, 1, 1)])
def test_refuses_constants_that_are_not_per_channel(op, shape):
    # (6,) broadcasts along the last spatial axis (width 6 here), not along channels
    k = np.random.default_rng(5).uniform(0.5, 2.0, shape).astype(np.float32)
    proto = _conv_model([helper.make_node(op, ["c", "k"], ["y"])], [_init("k", k)], "y", size=6 if shape == (6,) else 5)
    original, optimized, _, _ = _optimize(proto)
    assert _ops(optimized) == ["Conv", op]
    assert verify(original, optimized).ok


def test_refuses_sub_with_the_conv_as_subtrahend_and_division_by_zero():
    k = np.full((6, 1, 1), 2.0, np.float32)
    _, optimized, _, _ = _optimize(_conv_model([helper.make_node("Sub", ["k", "c"], ["y"])], [_init("k", k)], "y"))
    assert _ops(optimized) == ["Conv", "Sub"]
    k[3] = 0
    _, optimized, _, _ = _optimize(_conv_model([helper.make_node("Div", ["c", "k"], ["y"])], [_init("k", k)], "y"))
    assert _ops(optimized) == ["Conv", "Div"]


def test_refuses_add_when_the_conv_output_has_another_reader():
    k = np.full((6, 1, 1), 2.0, np.float32)
    proto = _conv_model([helper.make_node("Add", ["c", "k"], ["y"])], [_init("k", k)], "y", extra_outputs=("c",))
    _, optimized, _, _ = _optimize(proto)
    assert _ops(optimized) == ["Conv", "Add"]


# ---------------------------------------------------------------- a real model

def materialize_constant_of_shape(proto: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """The light/ models store every weight as ConstantOfShape(shape) of one fill value; make them
    seeded random initializers (He-scaled weights; positive 1-D parameters so BN variances stay
    valid) so the fusions are tested on real structure, with weights that tell channels apart."""
    r = np.random.default_rng(seed)
    inits = {t.name: t for t in proto.graph.initializer}
    kept = []
    for node in proto.graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in inits:
            shape = tuple(int(d) for d in numpy_helper.to_array(inits[node.input[0]]))
            if len(shape) > 1:  # weights: zero-mean, variance 2 / fan_in
                value = r.uniform(-1, 1, shape) * np.sqrt(6.0 / np.prod(shape[1:]))
            else:  # BN scale / bias / mean / var: positive
                value = r.uniform(0.5, 1.5, shape)
            proto.graph.initializer.append(_init(node.output[0], value.astype(np.float32)))
        else:
            kept.append(node)
    del proto.graph.node[:]
    proto.graph.node.extend(kept)
    return proto


def test_light_resnet50_folds_all_53_batch_norms():
    proto = materialize_constant_of_shape(onnx.load(light_model("resnet50")))
    # compare the logits too: the softmax output saturates with random weights
    logits = next(n.input[0] for n in proto.graph.node if n.op_type == "Softmax")
    proto.graph.output.append(helper.make_tensor_value_info(logits, TensorProto.FLOAT, None))
    original = io.load_proto(proto)
    optimized, report, _ = optimize(original, passes=CONV_PASSES)
    assert report.passes["fuse-conv-batch-norm"].stats["fused"] == 53
    assert not optimized.graph.nodes("BatchNormalization")
    result = verify(original, optimized)
    assert result.ok, result.summary()
    feeds = random_inputs(make_session(original))
    values = make_session(optimized).run([logits], feeds)[0]
    assert np.ptp(values) > 1e-2  # the comparison above compared something that varies
