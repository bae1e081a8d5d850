"""graphtool.diff.run: matching (structure, names, neighbours) and the classification of changes."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphtool import io
from graphtool.diff import ADDED, CHANGED, REMOVED, diff, format_diff
from tests.conftest import FIXTURES, count_calls, light_model
from tests.render.models import hand_edit, scramble


def _by_op(result, change):
    return Counter(nd.node.op_type for nd in result.node_diffs() if nd.change == change)


def _model(nodes, inputs, outputs, inits=(), opset=17, **kw):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return io.load_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], **kw))


def _vi(name, shape=(4,)):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


def test_same_model_is_equal():
    a, b = io.load(light_model("resnet50")), io.load(light_model("resnet50"))
    result = diff(a, b)
    assert result.equal
    assert result.counts == {ADDED: 0, REMOVED: 0, CHANGED: 0, "unchanged": 415, "graph_changes": 0}
    assert "no differences" in format_diff(result)


@pytest.mark.parametrize("path", [
    light_model("resnet50"),
    light_model("densenet121"),
    f"{FIXTURES}/if_subgraph.onnx",
    f"{FIXTURES}/local_function.onnx",
])
def test_renamed_and_shuffled_copy_has_no_changes(path):
    original = onnx.load(path)
    copy = scramble(original, seed=7)
    a, b = io.load_proto(original), io.load_proto(copy)
    assert [n.name for n in a.graph.nodes()] != [n.name for n in b.graph.nodes()]
    result = diff(a, b)
    assert result.equal, format_diff(result)
    assert result.counts["unchanged"] == a.node_count() + sum(len(fn.body) for fn in a.functions)
    # names were all changed, so every pair was found by structure alone
    assert all(set(g.matched_by) == {"structure"} for g in result.graphs)
    if path.endswith("if_subgraph.onnx"):
        scopes = sorted(g.scope.split(")")[-1] for g in result.graphs)
        assert scopes == [".else_branch", ".then_branch", "main"]  # branches paired by attribute


def test_renaming_a_main_input_is_one_graph_change():
    proto = onnx.load(f"{FIXTURES}/conv_bn.onnx")
    copy = scramble(proto, keep_io=False)  # the interface names change too
    result = diff(io.load_proto(proto), io.load_proto(copy))
    c = result.counts
    assert (c[ADDED], c[REMOVED], c[CHANGED]) == (0, 0, 0)
    whats = [d["what"] for d in result.graphs[0].graph_changes]
    assert whats == ["input renamed", "output renamed"]


def test_level1_optimized_resnet50_counts_match_the_pass_report():
    from graphtool.optimize import optimize

    model = io.load(light_model("resnet50"))
    optimized, report, _ = optimize(model, level=1)
    assert report.nodes_before > report.nodes_after
    for left in (model, io.load_proto(scramble(onnx.load(light_model("resnet50"))))):
        result = diff(left, optimized)
        c = result.counts
        assert c[REMOVED] - c[ADDED] == report.nodes_before - report.nodes_after
        # and minimal: no op type is both removed and added beyond what the histograms force
        hist_a = Counter(n.op_type for n in left.graph.nodes())
        hist_b = Counter(n.op_type for n in optimized.graph.nodes())
        removed, added = _by_op(result, REMOVED), _by_op(result, ADDED)
        for op in set(hist_a) | set(hist_b):
            assert removed[op] == max(0, hist_a[op] - hist_b[op]), op
            assert added[op] == max(0, hist_b[op] - hist_a[op]), op


def test_hand_edit_is_found_exactly():
    a = io.load(light_model("resnet50"))
    b = hand_edit(io.load(light_model("resnet50")))
    result = diff(a, b)
    c = result.counts
    assert (c[REMOVED], c[ADDED], c[CHANGED]) == (1, 1, 3)
    assert _by_op(result, REMOVED) == {"BatchNormalization": 1}
    assert _by_op(result, ADDED) == {"Sigmoid": 1}
    changed = {(nd.node.op_type, d["what"], d.get("name")) for nd in result.node_diffs() if nd.change == CHANGED
               for d in nd.details}
    assert changed == {("Relu", "input", None), ("Conv", "attribute", "pads"), ("Conv", "input", None)}
    # the removed BN's four parameters are now dead weight
    assert Counter(d["what"] for d in result.graphs[0].graph_changes) == {"initializer no longer used": 4}
    assert c["unchanged"] == 415 - 1 - 3


def test_renumbered_names_do_not_mislead_the_matching():
    """An exporter numbers nodes; one inserted op renumbers all later ones. Matching by name
    first would pair n5 with the new n5; structure pairs them right."""
    ops = ["Relu", "Sigmoid", "Tanh", "Abs", "Neg", "Exp", "Relu", "Sigmoid", "Tanh", "Abs"]

    def chain(op_list):
        nodes, prev = [], "x"
        for i, op in enumerate(op_list):
            out = "y" if i == len(op_list) - 1 else f"{op}_{i}_out"
            nodes.append(helper.make_node(op, [prev], [out], name=f"{op}_{i}"))
            prev = out
        return _model(nodes, [_vi("x")], [_vi("y")])

    result = diff(chain(ops), chain(ops[:5] + ["Softplus"] + ops[5:]))
    c = result.counts
    assert (c[ADDED], c[REMOVED], c[CHANGED], c["unchanged"]) == (1, 0, 1, 9)
    assert _by_op(result, ADDED) == {"Softplus": 1}
    (changed,) = [nd for nd in result.node_diffs() if nd.change == CHANGED]
    assert changed.a.name == "Exp_5" and changed.b.name == "Exp_6"
    assert [d["what"] for d in changed.details] == ["input"]


def test_initializer_value_change_reports_shape_and_max_abs_diff():
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    w2 = w.copy()
    w2[1, 2] += 0.25

    def model(weight):
        return _model([helper.make_node("MatMul", ["x", "w"], ["y"])], [_vi("x", (2, 3))], [_vi("y", (2, 4))],
                      [numpy_helper.from_array(weight, "w")])

    result = diff(model(w), model(w2))
    (nd,) = list(result.node_diffs())
    assert nd.change == CHANGED
    (detail,) = nd.details
    assert detail["what"] == "initializer" and detail["slot"] == 1
    assert detail["shape_old"] == detail["shape_new"] == [3, 4]
    assert detail["max_abs_diff"] == pytest.approx(0.25)
    assert "max |diff| 0.25" in format_diff(result) and "3x4" in format_diff(result)
    # a Constant node turned into an initializer of the same value is not a change of its consumer
    as_node = _model([helper.make_node("Constant", [], ["w"], value=numpy_helper.from_array(w, "w")),
                      helper.make_node("MatMul", ["x", "w"], ["y"])], [_vi("x", (2, 3))], [_vi("y", (2, 4))])
    result = diff(as_node, model(w))
    assert result.counts[REMOVED] == 1 and result.counts[CHANGED] == 0


def test_op_type_change_of_a_nameless_node():
    def model(op):
        return _model([helper.make_node("Abs", ["x"], ["a"]), helper.make_node(op, ["a"], ["b"]),
                       helper.make_node("Neg", ["b"], ["y"])], [_vi("x")], [_vi("y")])

    result = diff(model("Relu"), model("Sigmoid"))
    (nd,) = list(result.node_diffs())
    assert nd.change == CHANGED and nd.details == [{"what": "op_type", "old": "Relu", "new": "Sigmoid"}]


def test_change_inside_a_subgraph_of_a_renamed_copy():
    proto = onnx.load(f"{FIXTURES}/if_subgraph.onnx")
    edited = onnx.ModelProto()
    edited.CopyFrom(proto)
    branch = next(n for n in edited.graph.node if n.op_type == "If")
    else_graph = next(a.g for a in branch.attribute if a.name == "else_branch")
    else_graph.node[2].op_type = "Add"  # else_fold: Mul -> Add
    result = diff(io.load_proto(proto), io.load_proto(scramble(edited, seed=3)))
    changed = [nd for nd in result.node_diffs() if nd.change == CHANGED]
    assert [(nd.scope.split(")")[-1], nd.details) for nd in changed] == [
        (".else_branch", [{"what": "op_type", "old": "Mul", "new": "Add"}])]
    assert result.counts["unchanged"] == 9


def test_graph_and_model_level_changes():
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    a = _model(nodes, [_vi("x")], [_vi("y")])
    b_proto = helper.make_model(
        helper.make_graph(nodes + [helper.make_node("Neg", ["x"], ["z"])], "g", [_vi("x", (8,))], [_vi("y"), _vi("z")]),
        opset_imports=[helper.make_opsetid("", 18)], producer_name="someone")
    onnx.helper.set_model_props(b_proto, {"note": "hi"})
    result = diff(a, io.load_proto(b_proto))
    model_whats = {d["what"] for d in result.model_changes}
    assert {"opset", "producer_name", "metadata"} <= model_whats
    graph_whats = [d["what"] for d in result.graphs[0].graph_changes]
    assert graph_whats == ["input type", "output added"]
    assert result.counts[ADDED] == 1 and not result.equal


def test_whole_subgraph_and_function_changes_are_counted():
    proto = onnx.load(f"{FIXTURES}/local_function.onnx")
    edited = onnx.ModelProto()
    edited.CopyFrom(proto)
    edited.functions[0].node[4].op_type = "Neg"  # Identity -> Neg inside the function body
    result = diff(io.load_proto(proto), io.load_proto(edited))
    (nd,) = list(result.node_diffs())
    assert nd.scope == "function custom:Standardize" and nd.details[0]["what"] == "op_type"
    # a removed If takes its branches' nodes with it: counts stay consistent with node_count()
    plain = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x")], [_vi("y")])
    with_if = io.load(f"{FIXTURES}/if_subgraph.onnx")
    result = diff(with_if, plain)
    assert result.counts[REMOVED] - result.counts[ADDED] == with_if.node_count() - plain.node_count()


def test_json_is_json():
    a = io.load(light_model("resnet50"))
    result = diff(a, hand_edit(io.load(light_model("resnet50"))))
    doc = json.loads(json.dumps(result.as_dict(), allow_nan=False))
    assert doc["equal"] is False and doc["counts"][REMOVED] == 1
    assert {n["change"] for n in doc["graphs"][0]["nodes"]} == {ADDED, REMOVED, CHANGED}


@pytest.mark.slow
def test_cost_grows_linearly():
    """Structural matching is dict lookups: 4x the nodes must not cost 16x the work (counted in
    calls, which are deterministic; wall time on a shared machine is not)."""

    def chain(n, seed):
        nodes, prev = [], "x"
        ops = ["Relu", "Sigmoid", "Tanh", "Abs"]
        for i in range(n):
            nodes.append(helper.make_node(ops[i % 4], [prev], [f"v{i}"]))
            if i % 7 == 6:  # a side branch joining back in, so hashes depend on more than one path
                nodes.append(helper.make_node("Add", [f"v{i}", f"v{i - 3}"], [f"s{i}"]))
                prev = f"s{i}"
            else:
                prev = f"v{i}"
        graph = helper.make_graph(nodes, "c", [_vi("x")], [_vi(prev)])
        proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        return io.load_proto(proto), io.load_proto(scramble(proto, seed))

    def work(n):
        a, b = chain(n, 1)
        result = {}
        calls = count_calls(lambda: result.setdefault("equal", diff(a, b).equal))
        assert result["equal"]
        return calls

    small, big = work(2000), work(8000)
    assert big / small < 5, (small, big)  # linear: ~4; quadratic: ~16


def test_renamed_copy_of_a_fused_transformer_matches_as_well_as_names_do():
    """bert (TorchScript export: Constant ops everywhere, hand-written LayerNorm and GELU) against
    its level-2 result: with every name scrambled, the diff must pair nodes as well as it does
    when names help — no op type both removed and added beyond what the names-based diff has."""
    from graphtool.optimize import optimize

    path = f"{FIXTURES}/torch/bert_ts.onnx"
    model = io.load(path)
    optimized, report, _ = optimize(model, level=2)

    def spurious(result):
        removed, added = _by_op(result, REMOVED), _by_op(result, ADDED)
        return sum(min(removed[op], added[op]) for op in removed)

    plain = diff(model, optimized)
    renamed = diff(io.load_proto(scramble(onnx.load(path), seed=5)), optimized)
    for result in (plain, renamed):
        assert result.counts[REMOVED] - result.counts[ADDED] == report.nodes_before - report.nodes_after
    assert spurious(renamed) <= spurious(plain) + 2, (plain.counts, renamed.counts)
    assert renamed.counts[ADDED] <= plain.counts[ADDED] + 2


@pytest.mark.parametrize("twin_in_b", [False, True])
def test_unique_node_names_pair_what_structure_could_not(twin_in_b):
    """A changed attribute breaks both structural hashes; a node name unique on both sides still
    pairs the op (a CHANGED, not a removal plus an addition). A name used twice on either side
    pairs nothing by name."""
    def leaky(alpha, out, name):
        return helper.make_node("LeakyRelu", ["x"], [out], name=name, alpha=alpha)

    a = _model([leaky(0.1, "t", "act"), helper.make_node("Neg", ["x"], ["u"], name="dup"),
                helper.make_node("Abs", ["x"], ["v"], name="dup")], [_vi("x")], [_vi("t"), _vi("u"), _vi("v")])
    b_nodes = [leaky(0.2, "t", "act"), helper.make_node("Neg", ["x"], ["u"], name="dup"),
               helper.make_node("Abs", ["x"], ["v"], name="dup")]
    if twin_in_b:
        b_nodes.append(leaky(0.3, "w", "act"))
    b = _model(b_nodes, [_vi("x")], [_vi("t"), _vi("u"), _vi("v")] + ([_vi("w")] if twin_in_b else []))
    main = diff(a, b).graphs[0]
    assert main.matched_by["structure"] == 2  # Neg and Abs
    if twin_in_b:
        assert "name" not in main.matched_by  # "act" is not unique in b
        assert main.matched_by["value name"] == 1  # the LeakyRelu that still writes "t"
    else:
        assert main.matched_by["name"] == 1
    changed = [nd for nd in main.nodes if nd.change == CHANGED]
    assert [(nd.node.op_type, nd.details[0]["name"]) for nd in changed] == [("LeakyRelu", "alpha")]
