"""fold-constants: ops with constant inputs become initializers; what must never fold stays."""

from __future__ import annotations

import functools
import os

import numpy as np
import onnx
import pytest
from onnx import helper

from graphtool import io
from graphtool.optimize import optimize
from graphtool.verify import verify
from tests.conftest import FIXTURES, light_model
from tests.passes.helpers import const as _c
from tests.passes.helpers import make_proto
from tests.passes.helpers import ops as _ops
from tests.passes.helpers import vi as _vi

FOLD = ["fold-constants"]
_model = functools.partial(make_proto, check=False)  # some cases are invalid on purpose; the pass must cope


def test_add_of_two_constants_becomes_an_initializer_named_like_the_output():
    m = io.load_proto(_model(
        [helper.make_node("Constant", [], ["a"], value=_c("av", np.arange(4, dtype=np.float32))),
         helper.make_node("Add", ["a", "b"], ["y"], name="add")],
        [], [_vi("y", [4])], [_c("b", np.full(4, 0.5, np.float32))]))
    out, report, _ = optimize(m, passes=FOLD)
    assert _ops(out) == []
    assert out.graph.is_output("y")
    np.testing.assert_array_equal(out.graph.const("y"), np.arange(4, dtype=np.float32) + 0.5)
    assert report.passes["fold-constants"].stats == {"folded": 1, "constants": 1}
    assert verify(m, out).ok


def test_chain_into_a_live_op_keeps_that_op_and_folds_the_rest():
    m = io.load_proto(_model(
        [helper.make_node("Mul", ["c1", "c2"], ["c3"]),
         helper.make_node("Sqrt", ["c3"], ["c4"]),
         helper.make_node("Add", ["x", "c4"], ["y"])],
        [_vi("x", [3])], [_vi("y", [3])],
        [_c("c1", np.array([1, 4, 9], np.float32)), _c("c2", np.array([2, 2, 2], np.float32))]))
    out, _, _ = optimize(m, passes=FOLD)
    assert _ops(out) == ["Add"]
    add = out.graph.nodes("Add")[0]
    assert add.inputs[1] == "c4" and out.graph.is_initializer("c4")
    assert verify(m, out).ok


def test_constant_of_shape_weight_folds_even_with_a_tiny_size_limit():
    """Weights built by ConstantOfShape (the light/ models) fold whatever the limit: the model
    holds those bytes anyway, and ONNX Runtime folds them too."""
    m = io.load_proto(_model(
        [helper.make_node("ConstantOfShape", ["wshape"], ["w"], value=_c("v", np.array([0.25], np.float32))),
         helper.make_node("Conv", ["x", "w"], ["y"])],
        [_vi("x", [1, 3, 8, 8])], [_vi("y", [1, 16, 6, 6])], [_c("wshape", np.array([16, 3, 3, 3], np.int64))]))
    out, report, _ = optimize(m, passes=FOLD, max_fold_bytes=16)
    assert _ops(out) == ["Conv"]
    assert out.graph.const("w").shape == (16, 3, 3, 3)
    assert "skipped_size" not in report.passes["fold-constants"].stats
    assert verify(m, out).ok


def _expand_model():
    """Expand of a scalar to a 64 MB tensor that meets a live input in Max (not a parameter slot)."""
    n = 4096
    return io.load_proto(_model(
        [helper.make_node("Expand", ["scalar", "shape"], ["big"]),
         helper.make_node("Max", ["x", "big"], ["y"])],
        [_vi("x", [n, n])], [_vi("y", [n, n])],
        [_c("scalar", np.array(0.5, np.float32)), _c("shape", np.array([n, n], np.int64))]))


def test_size_guard_skips_a_fold_that_would_grow_the_model():
    m = _expand_model()
    out, report, _ = optimize(m, passes=FOLD, max_fold_bytes=1 << 20)
    assert _ops(out) == ["Expand", "Max"]
    assert report.passes["fold-constants"].stats["skipped_size"] == 1
    assert not out.graph.is_initializer("big")


def test_size_guard_allows_the_same_fold_with_a_large_limit():
    m = _expand_model()
    out, report, _ = optimize(m, passes=FOLD, max_fold_bytes=128 << 20)
    assert _ops(out) == ["Max"]
    assert out.graph.initializers["big"].nbytes == 64 << 20
    assert "skipped_size" not in report.passes["fold-constants"].stats
    big = out.graph.const("big")
    assert big.shape == (4096, 4096) and big.dtype == np.float32 and bool(np.all(big == np.float32(0.5)))


def test_a_broadcast_into_an_add_operand_is_not_exempt_from_the_guard():
    """Add(x, Expand(c, big)) : the runtime broadcasts for free what the file would have to store."""
    n = 2048
    m = io.load_proto(_model(
        [helper.make_node("Expand", ["scalar", "shape"], ["big"]), helper.make_node("Add", ["x", "big"], ["y"])],
        [_vi("x", [n, n])], [_vi("y", [n, n])],
        [_c("scalar", np.array(0.5, np.float32)), _c("shape", np.array([n, n], np.int64))]))
    out, report, _ = optimize(m, passes=FOLD, max_fold_bytes=1 << 20)
    assert _ops(out) == ["Expand", "Add"]
    assert report.passes["fold-constants"].stats["skipped_size"] == 1


def test_random_ops_never_fold():
    m = io.load_proto(_model(
        [helper.make_node("RandomUniform", [], ["r"], shape=[3], seed=1.0),
         helper.make_node("Add", ["r", "one"], ["y"]),
         helper.make_node("RandomNormalLike", ["one"], ["r2"]),
         helper.make_node("Mul", ["r2", "one"], ["y2"])],
        [], [_vi("y", [3]), _vi("y2", [3])], [_c("one", np.ones(3, np.float32))]))
    out, report, _ = optimize(m, passes=FOLD)
    assert _ops(out) == ["RandomUniform", "Add", "RandomNormalLike", "Mul"]
    assert report.passes["fold-constants"].changed_runs == 0


def test_training_mode_dropout_never_folds_but_inference_dropout_does():
    inits = [_c("x", np.ones(8, np.float32)), _c("ratio", np.array(0.5, np.float32)),
             _c("train", np.array(True)), _c("infer", np.array(False))]
    m = io.load_proto(_model(
        [helper.make_node("Dropout", ["x", "ratio", "train"], ["y_train"]),
         helper.make_node("Dropout", ["x", "ratio", "infer"], ["y_infer"])],
        [], [_vi("y_train", [8]), _vi("y_infer", [8])], inits))
    out, _, _ = optimize(m, passes=FOLD)
    assert _ops(out) == ["Dropout"]
    assert out.graph.nodes("Dropout")[0].outputs == ["y_train"]
    np.testing.assert_array_equal(out.graph.const("y_infer"), np.ones(8, np.float32))


def test_overridable_initializer_is_never_folded():
    m = io.load_proto(_model([helper.make_node("Neg", ["w"], ["y"])], [_vi("w", [2])], [_vi("y", [2])],
                             [_c("w", np.ones(2, np.float32))]))
    out, _, _ = optimize(m, passes=FOLD)
    assert _ops(out) == ["Neg"]


def test_ir3_folded_initializers_are_also_graph_inputs():
    m = io.load_proto(_model(
        [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Mul", ["x", "s"], ["y"])],
        [_vi("x", [2]), _vi("a", [2]), _vi("b", [2])], [_vi("y", [2])],
        [_c("a", np.ones(2, np.float32)), _c("b", np.ones(2, np.float32))], opset=9, ir_version=3))
    out, _, _ = optimize(m, passes=FOLD)
    assert _ops(out) == ["Mul"]
    assert out.graph.is_initializer("s") and out.graph.is_input("s")
    onnx.checker.check_model(onnx.load_from_string(io.to_bytes(out)))
    assert verify(m, out).ok


def test_a_fold_onnxruntime_cannot_evaluate_is_left_alone():
    m = io.load_proto(_model(
        [helper.make_node("Gather", ["data", "index"], ["g"]),  # index out of range: ORT fails
         helper.make_node("Neg", ["g"], ["y"]),
         helper.make_node("Neg", ["data"], ["y2"])],
        [], [_vi("y", [1]), _vi("y2", [3])],
        [_c("data", np.ones(3, np.float32)), _c("index", np.array([7], np.int64))]))
    out, report, _ = optimize(m, passes=FOLD)
    assert _ops(out) == ["Gather", "Neg"]
    assert out.graph.is_initializer("y2")
    assert report.passes["fold-constants"].stats["failed"] >= 1


def test_folding_inside_a_subgraph_uses_outer_constants():
    m = io.load(os.path.join(FIXTURES, "if_subgraph.onnx"))
    out, _, _ = optimize(m, passes=FOLD)
    if_node = out.graph.nodes("If")[0]
    else_graph = if_node.attr("else_branch")
    assert [n.op_type for n in else_graph.nodes()] == ["Mul"]
    np.testing.assert_array_equal(else_graph.const("six"), np.float32(6.0))
    for x in (np.array([1, 2, 3, 4], np.float32), np.array([-1, -2, -3, 4], np.float32)):
        assert verify(m, out, feeds={"x": x}).ok


def test_function_bodies_fold_into_constant_ops():
    fn = helper.make_function(
        "local", "AddSix", ["i"], ["o"],
        [helper.make_node("Constant", [], ["two"], value=_c("t", np.array(2.0, np.float32))),
         helper.make_node("Constant", [], ["three"], value=_c("t", np.array(3.0, np.float32))),
         helper.make_node("Mul", ["two", "three"], ["six"]),
         helper.make_node("Add", ["i", "six"], ["o"])],
        [helper.make_opsetid("", 17)])
    m = io.load_proto(_model([helper.make_node("AddSix", ["x"], ["y"], domain="local")],
                             [_vi("x", [2])], [_vi("y", [2])], functions=[fn],
                             extra_opsets=[helper.make_opsetid("local", 1)]))
    out, _, _ = optimize(m, passes=FOLD)
    body = out.functions[0].body
    assert sorted(n.op_type for n in body.nodes()) == ["Add", "Constant", "Constant", "Constant"]
    assert body.const("six") == np.float32(6.0)
    assert _ops(out) == ["AddSix"]  # a call of a model-local function is never folded
    assert verify(m, out).ok


def test_constant_chain_fixture_folds_all_constant_arithmetic():
    """Mul/Add of Constants fold; the Shape-based chain needs fold-shapes (see its tests)."""
    m = io.load(os.path.join(FIXTURES, "constant_chain.onnx"))
    out, _, _ = optimize(m, passes=FOLD)
    assert sorted(_ops(out)) == ["Add", "Concat", "Reshape", "Shape", "Slice"]
    np.testing.assert_array_equal(out.graph.const("c4"), np.array([2, 4, 6, 8], np.float32))


def test_light_vgg19_weights_fold_like_onnxruntime():
    m = io.load(light_model("vgg19"))
    out, report, _ = optimize(m, passes=FOLD)
    assert "ConstantOfShape" not in _ops(out)
    assert report.passes["fold-constants"].stats["folded"] == 36
    assert out.graph.initializers[out.graph.nodes("Gemm")[0].inputs[1]].nbytes == 25088 * 4096 * 4


@pytest.mark.slow
def test_folding_keeps_every_onnx_node_test_output():
    """fold-constants + fold-shapes over the 1,884 ONNX node tests: wherever onnxruntime runs the
    original and matches the expected outputs, the folded model must match them too."""
    from tests.corpus.node_cases import load, node_testcases, original_bytes, run_case

    counted = changed = 0
    failures = []
    for case in node_testcases():
        if not run_case(original_bytes(case), case).ok:
            continue
        counted += 1
        model = load(case)
        before = model.node_count()
        out, report, _ = optimize(model, passes=["fold-constants", "fold-shapes"])
        changed += bool(report.trace) or out.node_count() != before
        outcome = run_case(out, case)
        if not outcome.ok:
            failures.append(f"{case.name}: {outcome.reason}")
    print(f"{counted} node tests run in ORT, {changed} changed by folding, {len(failures)} broken")
    assert counted > 1400 and changed > 300
    assert failures == [], "\n".join(failures)


def _tied_embeddings(vocab=64, hidden=32):
    """SmolLM's tied head: the embedding table W is gathered for the input and, transposed, is the lm_head."""
    w = np.random.default_rng(0).standard_normal((vocab, hidden)).astype(np.float32)
    nodes = [helper.make_node("Gather", ["W", "ids"], ["h"]),
             helper.make_node("Relu", ["h"], ["a"]),
             helper.make_node("Transpose", ["W"], ["WT"], perm=[1, 0]),
             helper.make_node("MatMul", ["a", "WT"], ["logits"])]
    graph = helper.make_graph(nodes, "tied", [helper.make_tensor_value_info("ids", onnx.TensorProto.INT64, ["b", "s"])],
                              [helper.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, ["b", "s", vocab])],
                              [onnx.numpy_helper.from_array(w, "W")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _weight_bytes(model) -> int:
    return sum(t.nbytes for t in model.graph.initializers.values())


@pytest.mark.parametrize("level,target", [(1, "onnx"), (2, "onnx"), (2, "ort")])
def test_tied_embedding_weight_is_never_stored_twice(level, target):
    original = io.load_proto(_tied_embeddings())
    result, report, _ = optimize(original, level=level, target=target, max_fold_bytes=1024)
    assert _weight_bytes(result) <= _weight_bytes(original)
    assert not [t for t in result.graph.initializers.values() if tuple(t.dims) == (32, 64)]
    feeds = {"ids": np.array([[1, 5, 63], [0, 2, 7]], np.int64)}
    check = verify(original, result, feeds=feeds)
    assert check.ok, check.summary()
    if target == "ort":  # the transpose rides in the MatMul kernel instead
        assert "Transpose" not in _ops(result), _ops(result)


def test_a_transposed_weight_read_only_by_its_matmul_still_folds():
    proto = _tied_embeddings()
    proto.graph.node[0].input[0] = "W2"  # the Gather reads another table: W is the head's alone
    proto.graph.initializer.append(onnx.numpy_helper.from_array(np.ones((64, 32), np.float32), "W2"))
    result, _, _ = optimize(io.load_proto(proto), level=1, max_fold_bytes=1024)
    assert "Transpose" not in _ops(result)
