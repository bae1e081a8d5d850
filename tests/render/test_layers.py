"""The layered page (``graphtool viz`` past --max-nodes) in a real headless chromium: it opens
folded into layers from the name scopes, a search for the last op opens the layers around it and
puts it on screen, a click opens a layer, boxes never overlap, the panel lists the model's inputs
and outputs first and a body's under its If; dynamo's name_scopes metadata makes layers too."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphtool import io
from graphtool.render.dot import infer_shapes
from graphtool.render.html import layered_page
from graphtool.render.layers import MAX_ITEMS, layered_data
from graphtool.render.text import shape_text
from tests.conftest import FIXTURES
from tests.render.browser import in_view, launch, open_page, visible


@pytest.fixture(scope="module")
def browser():
    yield from launch()


def chain(blocks: int) -> onnx.ModelProto:
    """``blocks`` scoped blocks (/stage.S/blk.B/{MatMul, Add, Relu}) with a skip Add every block."""
    nodes, inits, h = [], [], "x"
    for i in range(blocks):
        scope = f"/stage.{i // 50}/blk.{i}"
        w = f"w{i}"
        inits.append(numpy_helper.from_array(np.full((8, 8), 0.01, np.float32), w))
        nodes += [helper.make_node("MatMul", [h, w], [f"{scope}/mm"], name=f"{scope}/MatMul"),
                  helper.make_node("Relu", [f"{scope}/mm"], [f"{scope}/r"], name=f"{scope}/Relu"),
                  helper.make_node("Add", [f"{scope}/r", h], [f"{scope}/out"], name=f"{scope}/Add")]
        h = f"{scope}/out"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch_size", 8])],
                              [helper.make_tensor_value_info(h, TensorProto.FLOAT, ["batch_size", 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _page(tmp_path_factory, model, name: str):
    data = layered_data(infer_shapes(model), name)
    path = tmp_path_factory.mktemp("layers") / f"{name}.html"
    path.write_text(layered_page(data), encoding="utf-8")
    return str(path), data


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    return _page(tmp_path_factory, io.load_proto(chain(1200)), "chain")  # 3,600 ops, 24 stages


NO_OVERLAP = """() => {
  var p = graphtool.placed(), ids = Object.keys(p), bad = [];
  for (var i = 0; i < ids.length; i++) for (var j = i + 1; j < ids.length; j++) {
    var a = p[ids[i]], b = p[ids[j]];
    var apart = a.x + a.w <= b.x || b.x + b.w <= a.x || a.y + a.h <= b.y || b.y + b.h <= a.y;
    var inside = (a.x <= b.x && a.y <= b.y && a.x + a.w >= b.x + b.w && a.y + a.h >= b.y + b.h) ||
                 (b.x <= a.x && b.y <= a.y && b.x + b.w >= a.x + a.w && b.y + b.h >= a.y + a.h);
    if (!apart && !inside) { bad.push([ids[i], ids[j]]); }
  }
  return {count: ids.length, bad: bad.slice(0, 5)};
}"""


def test_layers_come_from_name_scopes_and_stay_small(big):
    _, data = big
    layers = data["layers"]
    assert data["opCount"] == 3600
    assert "/stage.3/blk.150" in layers["full"] and "/stage.23" in layers["full"]
    kids: dict[int, int] = {}
    for layer, parent in enumerate(layers["parent"]):
        if parent >= 0:
            kids[parent] = kids.get(parent, 0) + 1
    for layer in range(len(layers["parent"])):  # no layer shows more than MAX_ITEMS items when open
        assert kids.get(layer, 0) + layers["mid"][layer] - layers["lo"][layer] <= MAX_ITEMS
    # every op of a layer lies in its range, its children's ranges inside it
    for layer, parent in enumerate(layers["parent"]):
        if parent >= 0:
            assert layers["lo"][parent] <= layers["lo"][layer] <= layers["hi"][layer] <= layers["hi"][parent]


def test_search_opens_the_layers_around_the_last_op_and_shows_it(browser, big):
    path, data = big
    page = open_page(browser, path)
    last = "/stage.23/blk.1199/Add"
    k = page.evaluate("name => graphtool.find(name)", last)
    assert k >= 0 and page.locator(f"#n{k}").count() == 0  # folded away at first
    page.keyboard.press("/")
    page.keyboard.type(last)
    page.keyboard.press("Enter")
    page.wait_for_selector("g.node.lit")
    assert in_view(page, f"n{k}")
    assert last in page.text_content("#details") and "stage.23 / blk.1199" in page.text_content("#details")
    # a value name finds its producer too, and an op type every op of it
    page.fill("#search", "/stage.0/blk.3/r")
    page.keyboard.press("Enter")
    assert "/stage.0/blk.3/Relu" in page.text_content("#details")
    page.fill("#search", "Relu")
    page.keyboard.press("Enter")
    assert page.text_content("#hits").endswith("/ 1200")
    overlap = page.evaluate(NO_OVERLAP)
    assert overlap["count"] > 20 and overlap["bad"] == [], overlap
    assert page.errors == []


def test_a_click_opens_a_folded_layer_and_the_panel_lists_model_io_first(browser, big):
    path, _ = big
    page = open_page(browser, path)
    panel = page.text_content("#details")
    assert panel.index("Model inputs and outputs") < panel.index("Op types")
    assert "batch×8" in panel  # short symbolic dims
    page.keyboard.press("f")  # the whole picture: the folded stages further down
    ids = page.evaluate("Array.from(document.querySelectorAll('#view g.layer.shut')).map(g => g.id)")
    shown = visible(page, ids)
    assert shown, ids[:5]  # the first screen shows folded layers to open
    layer = shown[0][1:]
    before = page.locator("#view g.node, #view g.layer.shut").count()
    page.locator(f"#{shown[0]} > rect").first.click()
    assert page.locator(f'#view g.layer.open[data-layer="{layer}"]').count() == 1
    assert page.locator("#view g.node, #view g.layer.shut").count() > before
    assert in_view(page, f"l{layer}") or page.locator(f"#l{layer}").count() == 1
    page.locator(f'#view g.layer.open[data-layer="{layer}"] > g.head').click()  # and folds again
    assert page.locator(f'#view g.layer.shut[data-layer="{layer}"]').count() == 1
    assert page.evaluate(NO_OVERLAP)["bad"] == []
    assert page.errors == []


def test_if_bodies_are_layers_and_their_io_sits_under_the_if(browser, tmp_path_factory):
    path, data = _page(tmp_path_factory, io.load(f"{FIXTURES}/if_subgraph.onnx"), "if")
    kinds = data["layers"]["kind"]
    assert kinds.count("body") == 2 and kinds.count("op") == 1
    page = open_page(browser, path)
    panel = page.text_content("#details")
    assert panel.index("Model inputs and outputs") < panel.index("Subgraph inputs and outputs")
    model_io = panel[panel.index("Model inputs and outputs"): panel.index("Subgraph inputs and outputs")]
    assert "then_out" not in model_io and "else_out" in panel[panel.index("Subgraph inputs and outputs"):]
    assert page.errors == []


def test_dynamo_name_scopes_make_layers():
    data = layered_data(io.load(f"{FIXTURES}/hf/gpt2_eager_dynamo.onnx"), "gpt2")
    full = set(data["layers"]["full"])
    assert {"model.h.0", "model.h.1.attn"} <= full, sorted(full)[:20]
    labels = dict(zip(data["layers"]["full"], data["layers"]["label"]))
    assert labels["model.h.1.attn"] == "attn"  # relative to its parent scope


def test_shapes_read_short_with_full_names_kept():
    assert shape_text(["batch_size", 3, "height", "width"]) == "batch×3×H×W"
    assert shape_text(["p2o.DynamicDimension.0", 16]) == "d0×16"
    assert shape_text(["batch_size", "height"], full=True) == "batch_size×height"
    assert shape_text([7]) == "[7]" and shape_text([]) == "scalar"
