"""graphtool.render.dot: labels, folding, clusters, limits, and text that must stay text."""

from __future__ import annotations

import re
import subprocess
import xml.etree.ElementTree as ET

import numpy as np
import onnx
import pytest

from graphtool import io
from graphtool.diff import diff
from graphtool.errors import UsageError
from graphtool.render.dot import COLORS, diff_picture, html_text, infer_shapes, model_picture
from tests.conftest import FIXTURES, light_model
from tests.render.models import EVIL, hand_edit, load_evil

SVG = "{http://www.w3.org/2000/svg}"


def _svg_texts(svg: str) -> tuple[list[str], dict[str, str]]:
    """(every <text>, {element id: <title>}) of an SVG, through a real XML parser."""
    root = ET.fromstring(svg)
    texts = [t.text or "" for t in root.iter(f"{SVG}text")]
    titles = {}
    for g in root.iter(f"{SVG}g"):
        title = g.find(f"{SVG}title")
        if title is not None and g.get("id"):
            titles[g.get("id")] = title.text or ""
    return texts, titles


def test_html_text_escapes_everything_dot_would_interpret():
    assert html_text('a"<b>&c') == "a&quot;&lt;b&gt;&amp;c"
    assert html_text("x\\Ny") == "x\\\\Ny"  # dot expands \N to the node id, even in HTML labels
    assert html_text("one\ntwo") == "one<BR/>two"
    assert html_text("bell\x07") == "bell\\\\x07"  # control characters shown, not passed to XML
    assert html_text("x" * 100, 10) == "x" * 9 + "…"


def test_hostile_names_render_as_text_in_dot_and_svg():
    model = load_evil()
    picture = model_picture(infer_shapes(model), names=True)  # names in the boxes too: every text path
    dot = subprocess.run(["dot", "-Tsvg"], input=picture.source.encode(), capture_output=True, check=False)
    assert dot.returncode == 0 and dot.stderr == b"", dot.stderr  # dot parses it, without warnings
    svg = picture.svg()
    texts, titles = _svg_texts(svg)  # parses as XML
    shown = "\n".join(texts)
    for name in EVIL:
        expected = name.replace("\x07", "\\x07").replace("\x1b", "\\x1b")
        for line in expected.split("\n"):  # multi-line names become one <text> per line
            assert line in shown, line
    assert "\\N \\G \\l end\\" in shown  # not expanded to the node's id or graph name
    # hover text is our own <title>, exact (names appear whole, newlines kept)
    node_titles = [t for t in titles.values() if t.startswith("Relu  ")]
    assert any("quote\"name" in t and "<script>alert(1)</script> input" in t for t in node_titles)
    assert any("line1\nline2" in t for t in titles.values())
    assert "<script" not in svg and "<img" not in svg
    # the symbolic dim and the custom op's domain survive as text
    assert 'N<&">×4' in texts and "evil.<dom>::Evil" in texts
    # by default (like Netron) a box has no name: names are in the hover text, still exact
    plain_texts, plain_titles = _svg_texts(model_picture(infer_shapes(model)).svg())
    assert "quote\"name" not in plain_texts
    assert any(t.startswith("Relu  quote\"name") for t in plain_titles.values())


def test_initializers_fold_into_their_consumer_and_edges_carry_shapes():
    picture = model_picture(infer_shapes(io.load(f"{FIXTURES}/conv_bn.onnx")))
    source = picture.source
    assert picture.shown == picture.total == 6  # 12 initializers, none drawn as a node
    assert "W 8×3×3×3" in source and "B [8]" in source
    assert "pads=[1,1,1,1]" in source
    assert '<TD>N×8×16×16</TD></TR></TABLE>>' in source and "xlabel=" in source  # shapes on edges (inferred)
    texts, _ = _svg_texts(picture.svg())
    assert "W 8×3×3×3" in texts


def test_key_attributes_and_small_constants_in_labels():
    picture = model_picture(io.load(light_model("resnet50")))
    assert "kernel_shape=7×7" in picture.source and "strides=2×2" in picture.source
    labels = {info["op_type"]: info for info in picture.info.values() if "op_type" in info}
    assert labels["Conv"]["attributes"]["kernel_shape"] in ("1×1", "3×3", "7×7")
    assert picture.shown == 415  # ConstantOfShape is an op here, not a constant: drawn


def test_subgraphs_are_clusters_with_captured_values():
    picture = model_picture(io.load(f"{FIXTURES}/if_subgraph.onnx"))
    source = picture.source
    assert source.count("subgraph cluster_") == 2
    assert "then_branch" in source and "else_branch" in source
    assert picture.shown == 8  # 10 nodes minus 2 Constant nodes folded into else_fold ("A = 2", "B = 3")
    assert "A = 2" in source and "B = 3" in source
    assert re.search(r"g0n0 -> g\d+n\d+ \[[^\]]*style=dashed", source)  # x_scaled read inside a branch
    ET.fromstring(picture.svg())


def test_around_draws_a_neighbourhood():
    model = io.load(light_model("resnet50"))
    picture = model_picture(model, around="n4", depth=1)  # a Conv: its producer, weights, consumer
    ops = sorted(info["op_type"] for info in picture.info.values() if "op_type" in info)
    assert ops == ["BatchNormalization", "ConstantOfShape", "Conv", "MaxPool"]
    assert picture.shown == 4 and picture.total == 415
    assert "showing 4" in picture.source
    by_value = model_picture(model, around="r6", depth=2)  # a value name: its producer (Relu n6)
    assert {info["name"] for info in by_value.info.values() if "name" in info} >= {"n6", "n5", "n7"}
    with pytest.raises(UsageError, match="no node or value named 'no such node'"):
        model_picture(model, around="no such node")


def test_max_nodes_draws_the_first_nodes_and_one_elision_node():
    model = io.load(light_model("densenet121"))
    picture = model_picture(model, max_nodes=100)
    assert picture.shown == 100 and picture.total == 1746
    assert "… 1646 more nodes" in picture.source
    assert any("1646 more nodes not drawn" in n for n in picture.notes)
    texts, _ = _svg_texts(picture.svg())
    assert "… 1646 more nodes" in texts
    with pytest.raises(UsageError):
        model_picture(model, max_nodes=0)


def test_densenet121_whole_svg():
    model = io.load(light_model("densenet121"))
    svg = model_picture(infer_shapes(model)).svg()
    texts, _ = _svg_texts(svg)
    assert texts.count("Conv") == 121 and texts.count("Concat") == 58


def test_diff_picture_colours_changes_and_keeps_context_small():
    a = io.load(light_model("resnet50"))
    result = diff(a, hand_edit(io.load(light_model("resnet50"))))
    picture = diff_picture(result, context=1)
    fills = {}
    for key, info in picture.info.items():
        if "change" in info:
            fills[info["change"]] = fills.get(info["change"], 0) + 1
    assert fills.pop("removed") == 1 and fills.pop("added") == 1 and fills.pop("changed") == 3
    assert 3 <= fills.pop("context") <= 12  # one hop around 5 nodes of a 415-node model
    source = picture.source
    for kind, n in (("removed", 1), ("added", 1), ("changed", 3)):
        assert source.count(f'fillcolor="{COLORS[kind][0]}"') == n
    assert len(picture.rows) == 5 + 4  # 5 node rows, 4 graph-level rows (dead BN parameters)
    assert picture.shown < 20
    wider = diff_picture(result, context=3)
    assert wider.shown > picture.shown
    texts, titles = _svg_texts(picture.svg())
    assert any(t.startswith("REMOVED\nBatchNormalization") for t in titles.values())


def test_diff_of_level1_optimized_resnet50_renders_svg_quickly():
    from graphtool.optimize import optimize

    model = io.load(light_model("resnet50"))
    optimized, report, _ = optimize(model, level=1)
    result = diff(infer_shapes(model), infer_shapes(optimized))
    svg = diff_picture(result, context=1).svg()
    c = result.counts
    assert c["removed"] - c["added"] == report.nodes_before - report.nodes_after
    ET.fromstring(svg)


def test_equal_models_give_a_no_differences_picture():
    model = io.load(f"{FIXTURES}/conv_bn.onnx")
    picture = diff_picture(diff(model, io.load(f"{FIXTURES}/conv_bn.onnx")))
    assert picture.shown == 0 and "no differences" in picture.source
    ET.fromstring(picture.svg())


def _nested_model():
    """A Loop whose body holds an If: clusters inside clusters."""
    from onnx import TensorProto, helper

    vi = lambda name, shape=(4,): helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))  # noqa: E731
    then_g = helper.make_graph([helper.make_node("Relu", ["acc_in"], ["t"], name="then_relu")], "then_g", [], [vi("t")])
    else_g = helper.make_graph([helper.make_node("Neg", ["acc_in"], ["e"], name="else_neg")], "else_g", [], [vi("e")])
    body = helper.make_graph(
        [helper.make_node("Greater", ["acc_in", "zero"], ["pos"], name="positive"),
         helper.make_node("ReduceMin", ["pos_f"], ["any"], keepdims=0, name="rmin"),
         helper.make_node("Cast", ["pos"], ["pos_f"], to=TensorProto.FLOAT, name="cast"),
         helper.make_node("Cast", ["any"], ["cond_out"], to=TensorProto.BOOL, name="cond"),
         helper.make_node("If", ["cond_out"], ["acc_out"], then_branch=then_g, else_branch=else_g, name="inner_if")],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         vi("acc_in")],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), vi("acc_out")],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["n", "", "x"], ["y"], body=body, name="loop")], "nested",
        [vi("x"), helper.make_tensor_value_info("n", TensorProto.INT64, [])], [vi("y")],
        [onnx.numpy_helper.from_array(np.zeros(4, np.float32), "zero")])
    return io.load_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def test_nested_subgraphs_are_nested_clusters():
    picture = model_picture(_nested_model())
    source = picture.source
    assert picture.shown == 8
    assert "\tsubgraph cluster_g" in source  # the body
    assert "\t\tsubgraph cluster_g" in source  # the If branches, inside the body's cluster
    assert source.count("subgraph cluster_") == 3
    _, titles = _svg_texts(picture.svg())
    assert any(t.startswith("Relu  then_relu") for t in titles.values())
    assert any(t.startswith("Neg  else_neg") for t in titles.values())


def test_untyped_values_and_empty_texts_still_render():
    """dot rejects empty HTML elements (<B></B>, <FONT></FONT>) and empty labels: an input with
    no type, a node with no name, an empty string attribute must not produce them."""
    from onnx import helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"], name="", tag="")], "g",
        [helper.make_value_info("x", onnx.TypeProto())], [helper.make_value_info("y", onnx.TypeProto())])
    model = io.load_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    ET.fromstring(model_picture(model).svg())


def test_a_diff_past_max_nodes_draws_its_first_changes_and_says_so():
    """graphviz lays out thousands of boxes in hours: the picture stops at ``max_nodes`` boxes,
    the first changes in graph order with their context, and its note gives both counts."""
    from graphtool.optimize import optimize

    model = io.load(light_model("resnet50"))
    optimized, _, _ = optimize(model, level=1)
    result = diff(model, optimized)
    changes = sum(len(gd.nodes) for gd in result.graphs)
    whole = diff_picture(result, context=1, max_nodes=None)
    assert whole.shown > 40 and "changed nodes in graph order" not in " ".join(whole.notes)
    capped = diff_picture(result, context=1, max_nodes=40)
    assert capped.shown == 40
    assert f"of {changes} changed nodes in graph order (--max-nodes 40" in " ".join(capped.notes)
    drawn = [key for key in capped.info if key.startswith("d")]
    first = [key for key in whole.info if key.startswith("d") and whole.info[key]["change"] != "context"]
    assert [k for k in drawn if capped.info[k]["change"] != "context"] == first[: len(
        [k for k in drawn if capped.info[k]["change"] != "context"])]  # the first changes, in order
    ET.fromstring(capped.svg())
