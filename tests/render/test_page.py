"""The HTML page as a person meets it, in a real headless chromium (Playwright driving Debian's
``chromium``): it opens readable at the graph's inputs, search jumps to a node, a click fills
the panel (weights with statistics), keys zoom and fit, the overview moves the view, a diff's
changed node shows before/after, and a summary group lights exactly its nodes."""

from __future__ import annotations

import re

import numpy as np
import pytest

from graphtool import io
from graphtool.diff import diff, summarize
from graphtool.render.dot import diff_picture, infer_shapes, model_picture
from tests.conftest import FIXTURES, light_model
from tests.render.browser import in_view, launch, open_page, visible
from tests.render.models import load_evil


@pytest.fixture(scope="module")
def browser():
    yield from launch()


def _write(tmp_path_factory, name: str, picture) -> str:
    path = tmp_path_factory.mktemp("pages") / name
    path.write_bytes(picture.render("html"))
    return str(path)


@pytest.fixture(scope="module")
def densenet(tmp_path_factory):
    picture = model_picture(infer_shapes(io.load(light_model("densenet121"))))
    return _write(tmp_path_factory, "densenet.html", picture), picture


@pytest.fixture(scope="module")
def level2_diff(tmp_path_factory):
    """light_resnet50 against its level-2 (ORT target) optimization: 400-odd changes in groups."""
    from graphtool.optimize import optimize

    a = io.load(light_model("resnet50"))
    b, _, _ = optimize(io.load(light_model("resnet50")), level=2, target="ort")
    result = diff(infer_shapes(a), infer_shapes(b))
    picture = diff_picture(result)
    return _write(tmp_path_factory, "diff.html", picture), picture, result


VISIBLE_NODE_FONTS = """() => {
  var v = document.getElementById('view').getBoundingClientRect();
  var scale = document.querySelector('#view svg').getScreenCTM().a, out = [];
  document.querySelectorAll('#view g.node text').forEach(function (t) {
    var r = t.getBoundingClientRect();
    if (r.bottom < v.top || r.top > v.bottom || r.right < v.left || r.left > v.right) { return; }
    out.push({px: parseFloat(t.getAttribute('font-size')) * scale, height: r.height,
              node: t.closest('g.node').id});
  });
  return out;
}"""


def test_opens_readable_at_the_first_input(browser, densenet):
    path, picture = densenet
    page = open_page(browser, path)
    fonts = page.evaluate(VISIBLE_NODE_FONTS)
    nodes = {f["node"] for f in fonts}
    assert len(nodes) >= 8, nodes  # a screenful of boxes, not one giant box
    assert min(f["px"] for f in fonts) >= 11, sorted(f["px"] for f in fonts)[:5]
    assert min(f["height"] for f in fonts) >= 11  # the laid-out glyph boxes agree
    first = picture.start[0]
    assert picture.info[first] == {"input": "data_0", "type": "float 1×3×224×224"} and in_view(page, first)
    assert page.evaluate("graphtool.view().h") < page.evaluate("graphtool.home.h") / 20  # not "fit to window"


def test_search_finds_a_node_by_name_and_scrolls_it_into_view(browser, densenet):
    path, picture = densenet
    page = open_page(browser, path)
    concats = [(k, info) for k, info in picture.info.items() if info.get("op_type") == "Concat"]
    target, info = concats[-1]  # near the bottom of a 1,746-node graph: far from the opening view
    assert not in_view(page, target)
    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.id") == "search"
    page.keyboard.type(info["name"])
    page.keyboard.press("Enter")
    assert in_view(page, target)
    assert "lit" in page.get_attribute(f"#{target}", "class")
    assert info["name"] in page.text_content("#details")
    assert page.text_content("#hits").startswith("1 / ")
    # a value name finds its producer (and consumers); an op type finds every node of that type
    value = info["outputs"][0]["value"]
    page.fill("#search", value)
    page.keyboard.press("Enter")
    lit = page.evaluate("document.querySelector('g.node.lit').id")
    assert in_view(page, lit) and value in page.text_content("#details")
    page.fill("#search", "Concat")
    page.keyboard.press("Enter")
    assert int(re.search(r"/ (\d+)", page.text_content("#hits")).group(1)) >= 58
    assert page.errors == []


def test_clicking_a_node_fills_the_panel_with_shapes_and_weight_stats(browser, tmp_path_factory):
    model = infer_shapes(io.load(f"{FIXTURES}/conv_bn.onnx"))
    picture = model_picture(model)
    page = open_page(browser, _write(tmp_path_factory, "conv_bn.html", picture))
    conv = next(k for k, info in picture.info.items() if info.get("op_type") == "Conv")
    page.click(f"#{conv} text >> nth=0")  # a real mouse click on the box
    panel = page.text_content("#details")
    for expected in ("Conv", "Attributes", "pads", "Inputs", "Outputs", "8×3×3×3", "min ", "max ", "mean ", "std "):
        assert expected in panel, expected
    weight = model.graph.nodes("Conv")[0].inputs[1]
    w = model.graph.initializers[weight].numpy()
    assert f"min {float(w.min()):.5g} · max {float(w.max()):.5g}" in panel
    assert f"mean {float(w.astype(np.float64).mean()):.5g}" in panel
    out = picture.info[conv]["outputs"][0]
    assert out["value"] in panel and out["type"] and out["type"] in panel  # output with its shape
    assert page.errors == []


def test_keys_fit_and_zoom_and_the_overview_moves_the_view(browser, densenet):
    page = open_page(browser, densenet[0])
    opened = page.evaluate("graphtool.view()")
    page.keyboard.press("+")
    assert page.evaluate("graphtool.view().scale") == pytest.approx(opened["scale"] * 1.25, rel=1e-3)
    page.keyboard.press("-")
    assert page.evaluate("graphtool.view().scale") == pytest.approx(opened["scale"], rel=1e-3)
    page.keyboard.press("f")
    fitted = page.evaluate("graphtool.view()")
    home = page.evaluate("graphtool.home")
    assert fitted["scale"] < opened["scale"] / 5 and (fitted["h"] >= home["h"] or fitted["w"] >= home["w"])
    page.keyboard.press("f")
    page.evaluate("id => graphtool.focus(id)", densenet[1].start[0])
    before = page.evaluate("graphtool.view()")
    box = page.locator("#overview canvas").bounding_box()
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] * 0.8)  # the overview's lower part
    after = page.evaluate("graphtool.view()")
    assert after["y"] > before["y"] + 1000 and after["scale"] == pytest.approx(before["scale"])
    assert page.errors == []


def test_changed_node_shows_before_and_after(browser, level2_diff):
    path, picture, _ = level2_diff
    page = open_page(browser, path)
    changed = next(r["id"] for r in picture.rows if r["change"] == "changed")
    page.click(f'tr[data-node="{changed}"]')
    assert in_view(page, changed)
    panel = page.text_content("#details")
    assert "Before → after" in panel and "changed" in panel
    assert page.locator("#details tr.differs").count() >= 1
    assert page.errors == []


def test_clicking_a_summary_group_lights_exactly_its_nodes(browser, level2_diff):
    path, picture, result = level2_diff
    page = open_page(browser, path)
    groups = summarize(result)
    assert len(groups) >= 3 and len(picture.groups) == len(groups)
    keys = {}  # the diff picture's element id of every NodeDiff (d<graph>b<id> or d<graph>a<id>)
    for gi, gd in enumerate(result.graphs):
        for nd in gd.nodes:
            keys[id(nd)] = f"d{gi}b{nd.b.id}" if nd.b is not None else f"d{gi}a{nd.a.id}"
    checked = 0
    for k, group in enumerate(groups):
        expected = {keys[id(nd)] for nd in group.nodes}
        if not expected:
            continue  # a graph-level group (opset, initializers): no node to light
        page.click(f'#groups li[data-group="{k}"]')
        lit = set(page.evaluate("Array.from(document.querySelectorAll('#view g.node.grp')).map(g => g.id)"))
        assert lit == expected, (group.title, len(lit), len(expected))
        assert visible(page, sorted(expected)), group.title  # the view went to the group
        assert str(len(expected)) in page.text_content("#details")
        checked += 1
    assert checked >= 2
    assert page.errors == []


def test_search_results_show_hostile_names_as_text(browser, tmp_path_factory):
    page = open_page(browser, _write(tmp_path_factory, "evil.html", model_picture(infer_shapes(load_evil()))))
    page.keyboard.press("/")
    page.keyboard.type("<img")
    page.wait_for_selector("#results li")
    assert "<img src=x onerror=alert(2)>" in page.text_content("#results")
    page.keyboard.press("Enter")
    assert "<img src=x onerror=alert(2)>" in page.text_content("#details")
    assert page.evaluate("document.querySelectorAll('img').length") == 0
    assert page.errors == []


@pytest.mark.parametrize("name", ["torch/mobilenet_ts", "hf/vit_eager_ts"])
def test_a_level2_diff_page_opens_on_its_first_group_with_constants_folded(browser, tmp_path_factory, name):
    """Issue 36: the page opens with the first changed group lit and in view, no Constant box
    drawn (they fold into their readers as in viz), no node cut off at the view's left edge."""
    from graphtool.optimize import optimize

    path = f"{FIXTURES}/{name}.onnx"
    optimized, _, _ = optimize(io.load(path), level=2)
    result = diff(infer_shapes(io.load(path)), infer_shapes(optimized))
    picture = diff_picture(result)
    assert not any(info.get("op_type") == "Constant" for info in picture.info.values())
    page = open_page(browser, _write(tmp_path_factory, name.replace("/", "_") + ".html", picture))
    first = next(g for g in picture.groups if any(i in picture.info for i in g["ids"]))
    lit = page.evaluate("Array.from(document.querySelectorAll('#view g.node.grp')).map(g => g.id)")
    assert set(lit) == {i for i in first["ids"] if i in picture.info} and visible(page, lit)
    assert first["title"] in page.text_content("#details")
    cut = page.evaluate("""() => {
      var v = document.getElementById('view').getBoundingClientRect();
      return Array.from(document.querySelectorAll('#view g.node')).filter(function (g) {
        var r = g.getBoundingClientRect(); return r.left < v.left && r.right > v.left; }).length; }""")
    assert cut == 0
    assert page.errors == []
