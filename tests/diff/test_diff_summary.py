"""graphtool.diff.summary / diff_text: a diff told as a story — grouped, named, on one screen.

Real models and what graphtool's optimizer makes of them (the pair people diff), plus real
models edited in one place where a group kind needs a change no optimizer makes.
"""

from __future__ import annotations

from collections import Counter

import onnx
import pytest
from onnx import helper, numpy_helper

from graphtool import io
from graphtool.diff import (
    ADDED,
    CHANGED,
    CONST_INIT,
    DEAD,
    FOLDED,
    FUSION,
    GRAPH,
    MAX_LINES,
    REMOVED,
    RENAMED,
    WEIGHTS,
    ChangeGroup,
    DiffResult,
    diff,
    format_diff,
    summarize,
)
from graphtool.ir.model import Model
from graphtool.optimize import optimize
from tests.conftest import FIXTURES, light_model
from tests.render.models import hand_edit, scramble


def _optimized(path: str, level: int, target: str = "onnx") -> tuple[Model, Model]:
    model = io.load(path)
    out, _, _ = optimize(model, level=level, target=target)
    return model, out


@pytest.fixture(scope="module")
def resnet_l2() -> tuple[Model, Model, DiffResult]:
    a, b = _optimized(light_model("resnet50"), 2, "ort")
    return a, b, diff(a, b)


def assert_partition(result: DiffResult, groups: list[ChangeGroup]) -> None:
    """Every node change in exactly one group; graph-level changes all in graph groups."""
    every = [id(nd) for nd in result.node_diffs()]
    grouped = [id(nd) for g in groups for nd in g.nodes]
    assert len(grouped) == len(set(grouped)), "a node change is in two groups"
    assert sorted(grouped) == sorted(every), "a node change is in no group"
    c = result.counts
    assert sum(len(g.nodes) for g in groups) == c[ADDED] + c[REMOVED] + c[CHANGED]
    assert sum(g.count for g in groups if g.kind in (GRAPH, RENAMED)) == c["graph_changes"]
    for g in groups:
        assert g.count >= 1 and g.title
        occurrence_nodes = [id(nd) for occ in g.occurrences for nd in occ]
        assert len(occurrence_nodes) == len(set(occurrence_nodes)) and set(occurrence_nodes) <= set(map(id, g.nodes))


def _by_title(groups: list[ChangeGroup]) -> dict[str, ChangeGroup]:
    return {g.title: g for g in groups}


# ------------------------------------------------------------------------ one test per group kind


def test_resnet50_level2_names_every_batchnorm_fusion(resnet_l2):
    a, b, result = resnet_l2
    groups = summarize(result)
    assert_partition(result, groups)
    fusions = {g.title: g.count for g in groups if g.kind == FUSION}
    assert fusions == {
        "Conv+BatchNormalization+Relu → FusedConv": 33,
        "Conv+BatchNormalization+Sum+Relu → FusedConv": 16,
        "Conv+BatchNormalization → Conv": 4,
    }
    ops_a = Counter(n.op_type for n in a.graph.nodes())
    assert sum(fusions.values()) == ops_a["BatchNormalization"] == 53  # one rewrite per BN
    with_relu = [n for title, n in fusions.items() if title.endswith("Relu → FusedConv")]
    assert sum(with_relu) == ops_a["Relu"] == 49
    owner = {id(nd): g for g in groups for nd in g.nodes}
    for nd in result.node_diffs():
        if nd.change == REMOVED and nd.a.op_type in ("BatchNormalization", "Relu", "Sum"):
            assert owner[id(nd)].kind == FUSION, nd.a
    # the diff itself is unchanged by the grouping: removed - added = nodes before - nodes after
    c = result.counts
    assert c[REMOVED] - c[ADDED] == a.node_count() - b.node_count() == 415 - 58


def test_folded_shape_computations_are_named_by_their_ops():
    a, b = _optimized(f"{FIXTURES}/torch/vit_ts.onnx", 1)
    result = diff(a, b)
    groups = summarize(result)
    assert_partition(result, groups)
    folded = [g for g in groups if g.kind == FOLDED]
    assert any(g.title.startswith("Shape→") and "Concat" in g.title for g in folded), [g.title for g in groups]
    owner = {id(nd): g for g in groups for nd in g.nodes}
    removed_shapes = [nd for nd in result.node_diffs() if nd.change == REMOVED and nd.a.op_type == "Shape"]
    kinds = Counter(owner[id(nd)].kind for nd in removed_shapes)
    assert set(kinds) <= {FOLDED, FUSION} and kinds[FOLDED] > kinds[FUSION], kinds  # never "Shape removed"
    for g in folded:  # a region of removed ops, and the readers that now read a constant instead
        for occ in g.occurrences:
            assert any(nd.change == REMOVED for nd in occ)
            assert all(d["what"] in ("input", "constant", "initializer") for nd in occ for d in nd.details)


def test_constant_ops_that_became_initializers():
    a, b = _optimized(f"{FIXTURES}/torch/mobilenet_ts.onnx", 1)
    result = diff(a, b)
    groups = summarize(result)
    assert_partition(result, groups)
    group = _by_title(groups)["Constant → initializer"]
    assert group.kind == CONST_INIT and group.count == len(group.nodes) >= 5
    matched_b = {b_id for g in result.graphs for b_id in g.matches.values()}
    for nd in group.nodes:
        assert nd.change == REMOVED and nd.a.op_type == "Constant"
        readers = [c for v in nd.a.outputs for c in a.graph.consumers(v)]
        assert readers and all(result.graphs[0].matches.get(c.id) in matched_b for c in readers)


def test_dead_code_is_its_own_group():
    proto = onnx.load(light_model("resnet50"))
    mid = proto.graph.node[10].output[0]  # a dangling branch off a value in the middle
    proto.graph.node.extend([helper.make_node("Sigmoid", [mid], ["dead_1"], name="dead_sigmoid"),
                             helper.make_node("Relu", ["dead_1"], ["dead_2"], name="dead_relu")])
    a = io.load_proto(proto)
    b, _, _ = optimize(a, level=1)
    result = diff(a, b)
    groups = summarize(result)
    assert_partition(result, groups)
    dead = [g for g in groups if g.kind == DEAD]
    assert len(dead) == 1 and dead[0].count == 2
    assert sorted(nd.a.name for nd in dead[0].nodes) == ["dead_relu", "dead_sigmoid"]


def test_changed_weights_give_a_count_and_the_largest_difference():
    proto = onnx.load(f"{FIXTURES}/torch/cnn_ts.onnx")
    conv_weights = {n.input[1] for n in proto.graph.node if n.op_type == "Conv"}
    tensor = next(t for t in proto.graph.initializer if t.name in conv_weights)
    array = numpy_helper.to_array(tensor).copy()
    array.flat[0] += 0.5
    tensor.CopyFrom(numpy_helper.from_array(array, tensor.name))
    result = diff(io.load(f"{FIXTURES}/torch/cnn_ts.onnx"), io.load_proto(proto))
    groups = summarize(result)
    assert_partition(result, groups)
    assert [g.kind for g in groups] == [WEIGHTS]
    assert groups[0].count == 1 and groups[0].max_abs_diff == pytest.approx(0.5)
    assert "weights changed ×1 (max |diff| 0.5)" in format_diff(result)


def test_renamed_inputs_and_outputs_are_one_group():
    proto = onnx.load(light_model("resnet50"))
    result = diff(io.load_proto(proto), io.load_proto(scramble(proto, seed=3, keep_io=False)))
    groups = summarize(result)
    assert_partition(result, groups)
    assert [(g.kind, g.count) for g in groups] == [(RENAMED, 2)]
    assert [d["what"] for d in groups[0].changes] == ["input renamed", "output renamed"]


def test_graph_level_changes(resnet_l2):
    groups = summarize(resnet_l2[2])
    opset = _by_title(groups)["opset/IR version"]
    assert opset.kind == GRAPH and not opset.nodes
    assert opset.changes == [{"what": "opset", "domain": "com.microsoft", "old": None, "new": 1}]
    assert [g.kind for g in groups][-2:] == [GRAPH, GRAPH]  # after every node group


def test_plain_edits_group_by_op_with_their_rewired_readers():
    a = io.load(light_model("resnet50"))
    result = diff(a, hand_edit(io.load(light_model("resnet50"))))
    groups = summarize(result)
    assert_partition(result, groups)
    by_title = _by_title(groups)
    titles = ("BatchNormalization removed", "Sigmoid added", "Conv: pads changed")
    removed, added, changed = (by_title[t] for t in titles)
    assert (removed.kind, added.kind, changed.kind) == (REMOVED, ADDED, CHANGED)
    assert removed.tally() == {REMOVED: 1, ADDED: 0, CHANGED: 1}  # the Relu that now reads the Conv
    assert added.tally() == {REMOVED: 0, ADDED: 1, CHANGED: 1}  # the Conv that now reads the Sigmoid
    assert changed.count == 1 and by_title["unused initializers"].count == 4


# ------------------------------------------------------------------------ the whole report


PAIRS = {
    "resnet50 level 2": lambda: _optimized(light_model("resnet50"), 2, "ort"),
    "densenet121 level 2": lambda: _optimized(light_model("densenet121"), 2, "ort"),
    "bert_ts level 2": lambda: _optimized(f"{FIXTURES}/torch/bert_ts.onnx", 2, "ort"),
    "gpt2_ts level 1": lambda: _optimized(f"{FIXTURES}/torch/gpt2_ts.onnx", 1),
    "resnet50 vs densenet121": lambda: (io.load(light_model("resnet50")), io.load(light_model("densenet121"))),
    "if_subgraph vs local_function": lambda: (io.load(f"{FIXTURES}/if_subgraph.onnx"),
                                              io.load(f"{FIXTURES}/local_function.onnx")),
}


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_groups_add_up_and_the_text_fits_a_screen(name):
    a, b = PAIRS[name]()
    result = diff(a, b)
    groups = summarize(result)
    assert_partition(result, groups)
    text = format_diff(result, "a.onnx", "b.onnx", groups=groups)
    lines = text.splitlines()
    assert len(lines) <= MAX_LINES, text
    assert groups[0].title in text  # the largest group is named
    everything = format_diff(result, groups=groups, show_all=True).splitlines()
    node_lines = [l for l in everything if l.lstrip()[:2] in ("- ", "+ ", "~ ")]
    assert len(node_lines) == sum(len(g.nodes) for g in groups)  # --all: every change, once


def test_groups_as_dicts_point_at_the_nodes_of_the_json(resnet_l2):
    result = resnet_l2[2]
    doc = result.as_dict()
    groups = summarize(result)
    seen = []
    for g in groups:
        entry = g.as_dict()
        assert entry["kind"] == g.kind and entry["count"] == g.count
        assert sum(entry["node_counts"].values()) == len(entry["nodes"])
        for (gi, ni), nd in zip(entry["nodes"], g.nodes):
            assert doc["graphs"][gi]["nodes"][ni]["outputs"] == nd.node.outputs
            seen.append((gi, ni))
    assert sorted(seen) == [(gi, ni) for gi, g in enumerate(doc["graphs"]) for ni in range(len(g["nodes"]))]


def test_equal_models_say_so_in_one_line():
    proto = onnx.load(light_model("resnet50"))
    result = diff(io.load_proto(proto), io.load_proto(scramble(proto, seed=9)))
    assert summarize(result) == []
    assert format_diff(result).splitlines()[-1] == "no differences (415 nodes matched)"


def test_summary_cost_is_linear_in_the_graph():
    """Grouping does a bounded amount of work per node and edge: 4x the graph, ~4x the time."""
    import time

    def timed(path: str) -> float:
        a, b = _optimized(path, 2, "ort")
        result = diff(a, b)
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            summarize(result)
            best = min(best, time.perf_counter() - start)
        return best / a.node_count()

    per_node_small, per_node_big = timed(light_model("resnet50")), timed(light_model("densenet121"))
    assert per_node_big < 4 * per_node_small + 1e-4, (per_node_small, per_node_big)


def test_weight_differences_are_numbers_in_json():
    proto = onnx.load(f"{FIXTURES}/torch/cnn_ts.onnx")
    tensor = next(t for t in proto.graph.initializer if t.data_type == onnx.TensorProto.FLOAT and len(t.dims) > 1)
    array = numpy_helper.to_array(tensor) * 2
    tensor.CopyFrom(numpy_helper.from_array(array, tensor.name))
    result = diff(io.load(f"{FIXTURES}/torch/cnn_ts.onnx"), io.load_proto(proto))
    entry = summarize(result)[0].as_dict()
    assert entry["kind"] == WEIGHTS and isinstance(entry["max_abs_diff"], float) and entry["max_abs_diff"] > 0
