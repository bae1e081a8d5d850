"""The rewrite engine on small graphs: what matches, what is refused and why, what a commit leaves.

Each graph is built so that exactly one constraint decides the outcome; the fused graph is run
in onnxruntime against the original, so a match that rewrote the wrong thing fails here.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphtool import io
from graphtool.pass_manager import PassContext
from graphtool.rewrite import Const, Matcher, OneOf, Rule, Scalar, Var, apply, either, op, opt
from graphtool.rewrite.explain import format_explanations
from tests.passes.ort_helpers import assert_same_outputs, ops

F = TensorProto.FLOAT


def model(nodes: list[onnx.NodeProto], inits: dict[str, np.ndarray], outputs: list[str] = ("y",),
          inputs: tuple[str, ...] = ("x",), opset: int = 17):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(i, F, [2, 3]) for i in inputs],
        [helper.make_tensor_value_info(o, TensorProto.INT64 if o.endswith("shape") else F, None) for o in outputs],
        [numpy_helper.from_array(np.asarray(a, np.float32), n) for n, a in inits.items()])
    return io.load_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))


def linear(order: str = "xw", bias_first: bool = False, extra: list[onnx.NodeProto] = ()) -> tuple:
    mm_in = ["x", "w"] if order == "xw" else ["w", "x"]
    add_in = ["b", "mm"] if bias_first else ["mm", "b"]
    nodes = [helper.make_node("MatMul", mm_in, ["mm"]), helper.make_node("Add", add_in, ["y"]), *extra]
    rng = np.random.default_rng(0)
    return nodes, {"w": rng.standard_normal((3, 3)), "b": rng.standard_normal(3)}


LINEAR = op.Add(op.MatMul(Var("x"), Const("w"), _name="mm"), Const("b"))


def gemm(m, rw) -> str:
    return rw.add("Gemm", [m["x"], m["w"], m["b"]]).outputs[0]


def copy(g):
    return io.load_proto(onnx.load_from_string(io.to_bytes(g)))


def matches(g, pattern, root_type: str) -> list:
    matcher = Matcher(g.graph, None, None, 17)
    root = next(iter(g.graph.nodes(root_type)))
    return list(matcher.matches(pattern, root)), matcher


@pytest.mark.parametrize("bias_first", [False, True])
def test_commutative_add_matches_either_operand_order(bias_first):
    g = model(*linear(bias_first=bias_first))
    found, _ = matches(g, LINEAR, "Add")
    assert len(found) == 1 and found[0]["b"] == "b" and found[0]["x"] == "x"


def test_non_commutative_matmul_keeps_its_order():
    g = model(*linear(order="wx"))
    found, matcher = matches(g, LINEAR, "Add")
    assert found == []
    assert "constant" in matcher.refusal.reason  # x of MatMul(w, x) is not the constant 'w'


def test_commit_rewrites_and_outputs_stay_equal():
    g = model(*linear())
    original = copy(g)
    result = apply(g.graph, PassContext(model=g, level=2), [Rule("linear", LINEAR, gemm, emits="Gemm")])
    assert result == {"linear": 1}
    assert ops(g) == {"Gemm": 1}
    assert_same_outputs(original, g, {"x": np.ones((2, 3), np.float32)})


def test_optional_op_matches_with_and_without_it():
    pattern = opt(op.Relu(LINEAR, _name="relu"))
    nodes, inits = linear()
    nodes[-1] = helper.make_node("Add", ["mm", "b"], ["pre"])
    with_relu = model(nodes + [helper.make_node("Relu", ["pre"], ["y"])], inits)
    found, _ = matches(with_relu, pattern, "Relu")
    assert found and found[0].node("relu") is not None
    found, _ = matches(model(*linear()), pattern, "Add")
    assert found and found[0].node("relu") is None


def test_either_tries_alternatives_div_or_mul():
    scaled = either(op.Div(Var("x"), Scalar("c")), op.Mul(Var("x"), Scalar("c")))
    for kind in ("Div", "Mul"):
        g = model([helper.make_node(kind, ["x", "c"], ["y"])], {"c": 2.0})
        found, _ = matches(g, scaled, kind)
        assert len(found) == 1 and found[0].scalar("c") == 2.0


def test_shared_var_must_bind_the_same_value():
    """Mul(x, Sigmoid(x)) is SiLU; Mul(x, Sigmoid(z)) is not."""
    x = Var("x")
    silu = op.Mul(x, op.Sigmoid(x))
    same = model([helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["y"])], {})
    other = model([helper.make_node("Sigmoid", ["z"], ["s"]), helper.make_node("Mul", ["x", "s"], ["y"])], {},
                  inputs=("x", "z"))
    assert len(matches(same, silu, "Mul")[0]) == 1
    assert matches(other, silu, "Mul")[0] == []


def test_attribute_constraints_and_schema_defaults():
    """Softmax without an axis attribute has the schema's default (-1 since opset 13)."""
    pattern = op.Softmax(Var("x"), axis=OneOf(-1, 1))
    g = model([helper.make_node("Softmax", ["x"], ["y"])], {})
    assert len(matches(g, pattern, "Softmax")[0]) == 1
    g = model([helper.make_node("Softmax", ["x"], ["y"], axis=0)], {})
    found, matcher = matches(g, pattern, "Softmax")
    assert found == [] and "axis" in matcher.refusal.reason


def test_a_value_read_outside_the_match_refuses_it():
    """The MatMul's output is also a graph output: fusing it away would lose that value."""
    g = model(*linear(), outputs=["y", "mm"])
    found, matcher = matches(g, LINEAR, "Add")
    assert found == []
    assert "read by" in matcher.refusal.reason or "output" in matcher.refusal.reason


def test_shape_reader_of_a_fused_value_is_answered_from_proven_dims():
    """A Shape of an interior value must not keep the matched chain alive (Match.dims)."""
    nodes, inits = linear()
    nodes.append(helper.make_node("Shape", ["mm"], ["mm_shape"]))
    g = model(nodes, inits, outputs=["y", "mm_shape"])
    original = copy(g)

    def check(m):
        m.dims[m.node("mm").outputs[0]] = [(m["x"], 0), 3]
        return None

    counts = apply(g.graph, PassContext(model=g, level=2), [Rule("linear", LINEAR, gemm, check, emits="Gemm")])
    assert counts == {"linear": 1}
    assert "MatMul" not in ops(g)
    assert_same_outputs(original, g, {"x": np.ones((2, 3), np.float32)})


def test_explain_names_the_check_that_refused():
    g = model(*linear())
    ctx = PassContext(model=g, level=2, explain={"linear"})
    refuse = Rule("linear", LINEAR, gemm, lambda m: "the bias is not what the kernel takes", emits="Gemm")
    assert apply(g.graph, ctx, [refuse], pass_name="test") == {"linear": 0}
    text = format_explanations(ctx.explanations)
    assert text.startswith("linear: Add") and "check: the bias is not what the kernel takes" in text
    assert ops(g) == {"MatMul": 1, "Add": 1}


def test_explain_names_the_check_even_when_an_alternative_walked_further():
    """The complete match binds y's producer chain as a Var (2 ops matched); the other alternative
    walks Add, MatMul, Relu and fails deeper (at the Relu's input). The check's refusal of the
    complete match is the answer, not the alternative's."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("MatMul", ["r", "w"], ["mm"]),
             helper.make_node("Add", ["mm", "b"], ["y"])]
    rng = np.random.default_rng(0)
    g = model(nodes, {"w": rng.standard_normal((3, 3)), "b": rng.standard_normal(3)})
    deep = op.Add(op.MatMul(op.Relu(op.Sigmoid(Var("x"))), Const("w")), Const("b"))
    pattern = either(deep, op.Add(Var("anything"), Const("b")))
    ctx = PassContext(model=g, level=2, explain={"refused"})
    refuse = Rule("refused", pattern, gemm, lambda m: "the kernel cannot take it", emits="Gemm")
    assert apply(g.graph, ctx, [refuse], pass_name="test") == {"refused": 0}
    text = format_explanations(ctx.explanations)
    assert "check: the kernel cannot take it" in text, text
