"""fuse-layer-norm: the exporters' hand-written layer norm → LayerNormalization (opset >= 17)."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphtool import io
from graphtool.optimize import optimize
from graphtool.runtime import make_session
from graphtool.verify import verify
from tests.conftest import FIXTURES

PASS = ["fuse-layer-norm"]


def ln_model(
    opset: int = 17,
    *,
    square: str = "pow",          # pow | mul
    norm: str = "div",            # div | recip | div1
    gamma: tuple | None = (8,),   # shape of gamma, None: no Mul
    beta: tuple | None = (8,),    # shape of beta, None: no Add
    eps: float | None = 1e-5,     # None: no Add(var, eps)
    dup_sub: bool = False,
    axes: tuple[int, ...] = (-1,),
    x_shape: list | None = ("B", "S", 8),
    exponent: float = 2.0,
    extra_outputs: tuple[str, ...] = (),
    extra_nodes: tuple[onnx.NodeProto, ...] = (),
    dtype=np.float32,
) -> onnx.ModelProto:
    r = np.random.default_rng(0)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    inits = []

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def reduce_mean(inp, out, name):
        if opset >= 18:
            inits.append(numpy_helper.from_array(np.array(axes, np.int64), f"{name}_axes"))
            return helper.make_node("ReduceMean", [inp, f"{name}_axes"], [out], name=name)
        return helper.make_node("ReduceMean", [inp], [out], name=name, axes=list(axes))

    nodes = [reduce_mean("x", "mean", "/ln/ReduceMean"),
             helper.make_node("Sub", ["x", "mean"], ["d"], name="/ln/Sub")]
    if square == "pow":
        nodes.append(helper.make_node("Pow", ["d", const("two", exponent)], ["sq"], name="/ln/Pow"))
    else:
        nodes.append(helper.make_node("Mul", ["d", "d"], ["sq"], name="/ln/Square"))
    nodes.append(reduce_mean("sq", "var", "/ln/ReduceMean_1"))
    ve = "var"
    if eps is not None:
        nodes.append(helper.make_node("Add", ["var", const("eps", eps)], ["ve"], name="/ln/Add"))
        ve = "ve"
    nodes.append(helper.make_node("Sqrt", [ve], ["std"], name="/ln/Sqrt"))
    d2 = "d"
    if dup_sub:
        nodes.append(helper.make_node("Sub", ["x", "mean"], ["d2"], name="/ln/Sub_1"))
        d2 = "d2"
    if norm == "div":
        nodes.append(helper.make_node("Div", [d2, "std"], ["n"], name="/ln/Div"))
    elif norm == "recip":
        nodes += [helper.make_node("Reciprocal", ["std"], ["rs"], name="/ln/Reciprocal"),
                  helper.make_node("Mul", [d2, "rs"], ["n"], name="/ln/Mul_r")]
    else:
        nodes += [helper.make_node("Div", [const("one", 1.0), "std"], ["rs"], name="/ln/Div_1"),
                  helper.make_node("Mul", ["rs", d2], ["n"], name="/ln/Mul_r")]
    last = "n"
    if gamma is not None:
        const("gamma", r.uniform(0.5, 1.5, gamma))
        nodes.append(helper.make_node("Mul", ["gamma", last], ["g"], name="/ln/Mul"))
        last = "g"
    if beta is not None:
        const("beta", r.standard_normal(beta))
        nodes.append(helper.make_node("Add", [last, "beta"], ["b"], name="/ln/Add_1"))
        last = "b"
    nodes.append(helper.make_node("Identity", [last], ["y"], name="out"))
    nodes += list(extra_nodes)
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", elem, None if x_shape is None else list(x_shape))],
        [helper.make_tensor_value_info(o, elem, None) for o in ("y", *extra_outputs)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _ops(model) -> list[str]:
    return [n.op_type for n in model.graph.nodes()]


def _run(proto: onnx.ModelProto):
    original = io.load_proto(proto)
    optimized, report, ctx = optimize(original, passes=PASS)
    return original, optimized, report, ctx


def _check_numbers(original, optimized, shapes=None):
    result = verify(original, optimized, input_shapes=shapes or {"x": [2, 3, 8]})
    assert result.ok, result.summary()


@pytest.mark.parametrize("opset", [17, 18])
@pytest.mark.parametrize("square", ["pow", "mul"])
@pytest.mark.parametrize("norm", ["div", "recip", "div1"])
def test_hand_written_layer_norm_becomes_one_op(opset, square, norm):
    original, optimized, report, ctx = _run(ln_model(opset, square=square, norm=norm))
    assert _ops(optimized) == ["LayerNormalization", "Identity"]
    ln = optimized.graph.nodes("LayerNormalization")[0]
    assert ln.inputs == ["x", "gamma", "beta"] and ln.outputs == ["b"]
    assert ln.attr("axis") == -1 and ln.attr("epsilon") == pytest.approx(1e-5)
    assert ln.name == "/ln/LayerNormalization"
    assert "/ln/Sqrt" in ctx.provenance["/ln/LayerNormalization"]
    assert report.passes["fuse-layer-norm"].stats["fused"] == 1
    # the scalar constants the chain used are gone with it
    assert not {"two", "eps", "one"} & set(optimized.graph.initializers)
    _check_numbers(original, optimized)


def test_duplicated_sub_of_older_pytorch_exports():
    original, optimized, _, _ = _run(ln_model(dup_sub=True))
    assert _ops(optimized) == ["LayerNormalization", "Identity"]
    _check_numbers(original, optimized)


def test_missing_eps_means_epsilon_zero():
    original, optimized, _, _ = _run(ln_model(eps=None))
    assert optimized.graph.nodes("LayerNormalization")[0].attr("epsilon") == 0.0
    _check_numbers(original, optimized)


@pytest.mark.parametrize("gamma, beta, inputs", [
    (None, None, 2), ((8,), None, 2), (None, (8,), 3), ((1, 1, 8), (1, 8), 3), ((1,), (8,), 3)])
def test_optional_or_broadcast_gamma_beta_with_static_hidden_size(gamma, beta, inputs):
    original, optimized, _, _ = _run(ln_model(gamma=gamma, beta=beta))
    assert _ops(optimized) == ["LayerNormalization", "Identity"]
    ln = optimized.graph.nodes("LayerNormalization")[0]
    assert len(ln.inputs) == inputs
    assert [optimized.graph.const(v).shape for v in ln.inputs[1:]] == [(8,)] * (inputs - 1)
    _check_numbers(original, optimized)


def test_unknown_input_shape_like_torchscript_exports():
    # bert_ts declares no shapes at all: gamma/beta of rank 1 say what the hidden size is
    original, optimized, _, _ = _run(ln_model(x_shape=None))
    assert _ops(optimized) == ["LayerNormalization", "Identity"]
    _check_numbers(original, optimized)


def test_refuses_without_gamma_when_the_hidden_size_is_unknown():
    _, optimized, _, _ = _run(ln_model(gamma=None, x_shape=("B", "S", "H")))
    assert "LayerNormalization" not in _ops(optimized)


def test_gamma_varying_along_a_batch_axis_stays_outside():
    original, optimized, _, _ = _run(ln_model(gamma=(3, 1), x_shape=(2, 3, 8)))
    assert _ops(optimized) == ["LayerNormalization", "Mul", "Add", "Identity"]
    _check_numbers(original, optimized)


@pytest.mark.parametrize("opset", [17, 18])
def test_two_trailing_axes(opset):
    original, optimized, _, _ = _run(ln_model(opset, axes=(-2, -1), gamma=(3, 8), beta=(3, 8), x_shape=("B", 3, 8)))
    ln = optimized.graph.nodes("LayerNormalization")
    assert len(ln) == 1 and ln[0].attr("axis") == -2
    _check_numbers(original, optimized)


def test_positive_axes_need_a_known_rank():
    original, optimized, _, _ = _run(ln_model(axes=(2,), x_shape=("B", "S", 8)))
    assert optimized.graph.nodes("LayerNormalization")[0].attr("axis") == -1
    _check_numbers(original, optimized)
    _, optimized, _, _ = _run(ln_model(axes=(2,), x_shape=None))
    assert "LayerNormalization" not in _ops(optimized)


@pytest.mark.parametrize("kwargs", [
    {"opset": 16},                                   # LayerNormalization does not exist yet
    {"axes": (1,)},                                  # not the trailing axis
    {"axes": (-3, -1), "x_shape": ("B", 3, 8)},      # not consecutive
    {"exponent": 3.0},
])
def test_refuses(kwargs):
    original, optimized, report, _ = _run(ln_model(**kwargs))
    assert "LayerNormalization" not in _ops(optimized)
    assert len(optimized.graph) == len(original.graph)


def test_refuses_when_the_mean_is_reused():
    reuse = helper.make_node("Neg", ["mean"], ["neg_mean"], name="reuse")
    _, optimized, _, _ = _run(ln_model(extra_nodes=(reuse,), extra_outputs=("neg_mean",)))
    assert "LayerNormalization" not in _ops(optimized)
    _, optimized, _, _ = _run(ln_model(extra_outputs=("mean",)))
    assert "LayerNormalization" not in _ops(optimized)


def test_refuses_when_the_normalized_value_is_reused_but_keeps_it():
    # n is read by the gamma Mul and by a graph output: fuse up to n, keep Mul/Add after it
    original, optimized, _, _ = _run(ln_model(extra_outputs=("n",)))
    assert _ops(optimized) == ["LayerNormalization", "Mul", "Add", "Identity"]
    assert optimized.graph.producer("n").op_type == "LayerNormalization"
    _check_numbers(original, optimized)


def test_float16():
    original, optimized, _, _ = _run(ln_model(dtype=np.float16))
    assert _ops(optimized) == ["LayerNormalization", "Identity"]
    x = np.random.default_rng(0).standard_normal((2, 3, 8)).astype(np.float16)
    ref = make_session(original).run(None, {"x": x})[0]
    got = make_session(optimized).run(None, {"x": x})[0]
    assert got.dtype == np.float16 and np.max(np.abs(ref.astype(np.float32) - got)) < 1e-2


@pytest.mark.parametrize("name", ["bert_ts", "bert_dynamo"])
def test_bert_fixtures(name):
    path = os.path.join(FIXTURES, "torch", f"{name}.onnx")
    original = io.load(path)
    optimized, report, _ = optimize(original, passes=PASS)
    assert report.passes["fuse-layer-norm"].stats["fused"] == 5
    assert not optimized.graph.nodes("ReduceMean") and not optimized.graph.nodes("Sqrt")
    feeds = dict(np.load(path.replace(".onnx", ".inputs.npz")))
    expected = np.load(path.replace(".onnx", ".expected.npz"))
    sess = make_session(optimized)
    for meta, got in zip(sess.get_outputs(), sess.run(None, feeds)):
        assert np.max(np.abs(got - expected[meta.name])) < 1e-4


def test_below_opset_17_fuses_only_for_onnxruntime():
    # openWakeWord's heads are opset 13/14 torch exports; ORT's own LayerNormFusion emits
    # LayerNormalization there, and so does --target ort (ORT registers it from version 1)
    proto = ln_model(14)
    model = io.load_proto(proto)
    portable, _, _ = optimize(model, level=1, target="onnx")
    assert "LayerNormalization" not in _ops(portable)
    fused, _, _ = optimize(model, level=1, target="ort")
    assert _ops(fused).count("LayerNormalization") == 1
    result = verify(model, fused)
    assert result.ok, result.summary()


@pytest.mark.parametrize("proto, reason", [
    (ln_model(exponent=3.0), "check: two is 3, not 2"),
    (ln_model(axes=(1,)), "axes [1] are not the trailing ones"),
    (ln_model(dtype=np.float64), "not float or float16"),
    (ln_model(opset=16), "check: opset 16: LayerNormalization needs opset >= 17"),
], ids=["exponent", "axes", "dtype", "opset"])
def test_explain_says_why(proto, reason):
    from graphtool.rewrite.explain import format_explanations

    optimized, _, ctx = optimize(io.load_proto(proto), passes=PASS, explain=["fuse-layer-norm"])
    assert "LayerNormalization" not in _ops(optimized)
    assert reason in format_explanations(ctx.explanations)


def test_beta_that_does_not_fit_is_left_after_the_fused_op():
    original, optimized, _, _ = _run(ln_model(beta=(2, 1, 8)))  # varies along the batch
    assert _ops(optimized) == ["LayerNormalization", "Add", "Identity"]
    _check_numbers(original, optimized)
