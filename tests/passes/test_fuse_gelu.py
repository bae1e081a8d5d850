"""fuse-gelu: erf and tanh GELU spellings → Gelu (opset >= 20)."""

from __future__ import annotations

import math
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

PASS = ["fuse-gelu"]
TAILS = ["half_first", "half_last", "half_inner", "div2", "half_div", "inner_div2"]


def _model(core: list[onnx.NodeProto], consts: dict[str, float], tail: str, *, opset: int = 20,
           half: float = 0.5, x_tail: str = "x", extra_outputs: tuple[str, ...] = (),
           x_shape: list | None = ("B", 16)) -> onnx.ModelProto:
    """``core`` computes a = 1 + f(x); ``tail`` multiplies it by x and 0.5 in one association."""
    consts = {**consts, "half": half, "two": 1.0 / half}
    if tail == "half_first":      # (x * 0.5) * a
        nodes = [helper.make_node("Mul", [x_tail, "half"], ["h"]), helper.make_node("Mul", ["h", "a"], ["y"])]
    elif tail == "half_last":     # (x * a) * 0.5
        nodes = [helper.make_node("Mul", [x_tail, "a"], ["m"]), helper.make_node("Mul", ["half", "m"], ["y"])]
    elif tail == "half_inner":    # x * (a * 0.5)
        nodes = [helper.make_node("Mul", ["a", "half"], ["m"]), helper.make_node("Mul", ["m", x_tail], ["y"])]
    elif tail == "inner_div2":    # x * (a / 2)
        nodes = [helper.make_node("Div", ["a", "two"], ["m"]), helper.make_node("Mul", [x_tail, "m"], ["y"])]
    elif tail == "div2":          # (x * a) / 2
        nodes = [helper.make_node("Mul", ["a", x_tail], ["m"]), helper.make_node("Div", ["m", "two"], ["y"])]
    else:                         # a * (x / 2)
        nodes = [helper.make_node("Div", [x_tail, "two"], ["h"]), helper.make_node("Mul", ["a", "h"], ["y"])]
    used = {v for n in [*core, *nodes] for v in n.input}
    inits = [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in consts.items() if k in used]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape and list(x_shape))]
    if x_tail != "x":
        inputs.append(helper.make_tensor_value_info(x_tail, TensorProto.FLOAT, list(x_shape)))
    graph = helper.make_graph(
        [*core, *nodes, helper.make_node("Relu", ["y"], ["z"])], "g", inputs,
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("z", *extra_outputs)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def erf_model(tail: str = "half_first", inner: str = "div", sqrt2: float = 1.4142135, **kw) -> onnx.ModelProto:
    if inner == "div":
        first = helper.make_node("Div", ["x", "sqrt2"], ["t"])
        consts = {"sqrt2": sqrt2}
    else:
        first = helper.make_node("Mul", ["rsqrt2", "x"], ["t"])
        consts = {"rsqrt2": 1.0 / sqrt2}
    core = [first, helper.make_node("Erf", ["t"], ["e"]), helper.make_node("Add", ["one", "e"], ["a"])]
    return _model(core, {**consts, "one": 1.0}, tail, **kw)


def tanh_model(tail: str = "half_first", cube: str = "pow", cubic: float = 0.044715, **kw) -> onnx.ModelProto:
    if cube == "pow":
        cube_nodes = [helper.make_node("Pow", ["x", "three"], ["x3"])]
    elif cube == "x_xx":
        cube_nodes = [helper.make_node("Mul", ["x", "x"], ["xx"]), helper.make_node("Mul", ["x", "xx"], ["x3"])]
    else:
        cube_nodes = [helper.make_node("Mul", ["x", "x"], ["xx"]), helper.make_node("Mul", ["xx", "x"], ["x3"])]
    core = [*cube_nodes,
            helper.make_node("Mul", ["cubic", "x3"], ["c"]),
            helper.make_node("Add", ["x", "c"], ["inner"]),
            helper.make_node("Mul", ["inner", "k"], ["u"]),
            helper.make_node("Tanh", ["u"], ["th"]),
            helper.make_node("Add", ["th", "one"], ["a"])]
    consts = {"three": 3.0, "cubic": cubic, "k": math.sqrt(2 / math.pi), "one": 1.0}
    return _model(core, consts, tail, **kw)


def _ops(model) -> list[str]:
    return [n.op_type for n in model.graph.nodes()]


def _run(proto):
    original = io.load_proto(proto)
    optimized, report, _ = optimize(original, passes=PASS)
    return original, optimized, report


@pytest.mark.parametrize("tail", TAILS)
@pytest.mark.parametrize("inner", ["div", "mul"])
def test_erf_gelu(tail, inner):
    original, optimized, report = _run(erf_model(tail, inner))
    assert _ops(optimized) == ["Gelu", "Relu"]
    gelu = optimized.graph.nodes("Gelu")[0]
    assert gelu.inputs == ["x"] and gelu.outputs == ["y"] and gelu.attr("approximate") is None
    assert report.passes["fuse-gelu"].stats == {"erf": 1, "tanh": 0}
    assert not set(optimized.graph.initializers)  # the scalar constants went with the chain
    result = verify(original, optimized)
    assert result.ok, result.summary()


@pytest.mark.parametrize("tail", TAILS)
@pytest.mark.parametrize("cube", ["pow", "x_xx", "xx_x"])
def test_tanh_gelu(tail, cube):
    original, optimized, report = _run(tanh_model(tail, cube))
    assert _ops(optimized) == ["Gelu", "Relu"]
    assert optimized.graph.nodes("Gelu")[0].attr("approximate") in ("tanh", b"tanh")
    assert report.passes["fuse-gelu"].stats == {"erf": 0, "tanh": 1}
    result = verify(original, optimized)
    assert result.ok, result.summary()


def test_output_name_survives_as_graph_output():
    proto = erf_model()
    proto.graph.output.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, None))
    original, optimized, _ = _run(proto)
    assert optimized.graph.producer("y").op_type == "Gelu" and "y" in optimized.graph.outputs
    assert verify(original, optimized).ok


@pytest.mark.parametrize("build", [erf_model, tanh_model])
def test_refuses_below_opset_20(build):
    original, optimized, _ = _run(build(opset=19))
    assert "Gelu" not in _ops(optimized) and len(optimized.graph) == len(original.graph)


@pytest.mark.parametrize("proto", [
    erf_model(half=0.6),
    erf_model(sqrt2=1.5),
    tanh_model(half=0.6),
    tanh_model(cubic=0.05),
], ids=["erf-half-0.6", "erf-sqrt2-1.5", "tanh-half-0.6", "tanh-cubic-0.05"])
def test_refuses_wrong_constants(proto):
    _, optimized, _ = _run(proto)
    assert "Gelu" not in _ops(optimized)


def test_refuses_reused_intermediate_and_mismatched_x():
    _, optimized, _ = _run(erf_model(extra_outputs=("e",)))
    assert "Gelu" not in _ops(optimized)
    _, optimized, _ = _run(tanh_model(extra_outputs=("x3",)))
    assert "Gelu" not in _ops(optimized)
    _, optimized, _ = _run(erf_model(x_tail="x_other"))
    assert "Gelu" not in _ops(optimized)


def test_refuses_constant_of_higher_rank_than_x():
    # x has unknown rank: a [1, 1] constant could broadcast the result up, so it must stay
    proto = erf_model(x_shape=None)
    for init in proto.graph.initializer:
        if init.name == "half":
            init.CopyFrom(numpy_helper.from_array(np.full((1, 1), 0.5, np.float32), "half"))
    _, optimized, _ = _run(proto)
    assert "Gelu" not in _ops(optimized)


@pytest.mark.parametrize("name, erf, tanh", [
    ("bert_dynamo", 2, 0), ("gpt2_dynamo", 0, 2), ("vit_dynamo", 0, 0),
    ("bert_ts", 0, 0), ("gpt2_ts", 0, 0), ("vit_ts", 0, 0),   # opset 17: Gelu does not exist
])
def test_torch_fixtures(name, erf, tanh):
    path = os.path.join(FIXTURES, "torch", f"{name}.onnx")
    original = io.load(path)
    optimized, report, _ = optimize(original, passes=PASS)
    assert report.passes["fuse-gelu"].stats == {"erf": erf, "tanh": tanh}
    feeds = dict(np.load(path.replace(".onnx", ".inputs.npz")))
    expected = np.load(path.replace(".onnx", ".expected.npz"))
    sess = make_session(optimized)
    for meta, got in zip(sess.get_outputs(), sess.run(None, feeds)):
        assert np.max(np.abs(got - expected[meta.name])) < 1e-4


def test_refuses_intermediate_read_by_a_shape():
    """The chain would stay in the graph for the Shape and run beside the Gelu."""
    proto = erf_model()
    proto.graph.node.append(helper.make_node("Shape", ["e"], ["e_shape"]))
    proto.graph.output.append(helper.make_tensor_value_info("e_shape", TensorProto.INT64, None))
    _, optimized, _ = _run(proto)
    assert "Gelu" not in _ops(optimized)


@pytest.mark.parametrize("proto, reason", [
    (erf_model(half=0.6), "check: half is 0.6, not 0.5"),
    (tanh_model(cubic=0.05), "check: cubic is 0.05, not 0.044715"),
    (erf_model(opset=19), "check: opset 19: ONNX Gelu needs opset >= 20"),
], ids=["half", "cubic", "opset"])
def test_explain_says_why(proto, reason):
    from graphtool.rewrite.explain import format_explanations

    optimized, _, ctx = optimize(io.load_proto(proto), passes=PASS, explain=["fuse-gelu"])
    assert "Gelu" not in _ops(optimized)
    assert reason in format_explanations(ctx.explanations)
