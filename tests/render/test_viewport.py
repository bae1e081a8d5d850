"""The view both HTML pages share (render/viewport.js), driven the same way on each in a real
headless chromium: the small Graphviz page (densenet121, 1,746 nodes) and the layered page (a
3,600-op chain). Keys zoom and fit, ctrl+wheel zooms around the cursor, the wheel scrolls, a drag
pans (and is not a click), the overview strip moves the view, and a window resize keeps its centre."""

from __future__ import annotations

import pytest

from graphtool import io
from graphtool.render.dot import infer_shapes, model_picture
from graphtool.render.html import layered_page
from graphtool.render.layers import layered_data
from tests.conftest import light_model
from tests.render.browser import launch, open_page
from tests.render.test_layers import chain


@pytest.fixture(scope="module")
def browser():
    yield from launch()


@pytest.fixture(scope="module", params=["small", "layered"])
def page_path(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("viewport") / f"{request.param}.html"
    if request.param == "small":
        path.write_bytes(model_picture(infer_shapes(io.load(light_model("densenet121")))).render("html"))
    else:
        path.write_text(layered_page(layered_data(io.load_proto(chain(1200)), "chain")), encoding="utf-8")
    return str(path)


def view(page) -> dict[str, float]:
    return page.evaluate("graphtool.view()")


def test_keys_wheel_drag_and_overview_move_the_view_alike(browser, page_path):
    page = open_page(browser, page_path)
    opened = view(page)
    page.keyboard.press("+")
    assert view(page)["scale"] == pytest.approx(opened["scale"] * 1.25, rel=1e-3)
    page.keyboard.press("-")
    assert view(page)["scale"] == pytest.approx(opened["scale"], rel=1e-3)
    # ctrl+wheel: zooms around the cursor (the world point under it stays under it)
    box = page.locator("#view").bounding_box()
    cx, cy = box["x"] + box["width"] * 0.3, box["y"] + box["height"] * 0.4
    before = view(page)
    page.mouse.move(cx, cy)
    page.keyboard.down("Control")
    page.mouse.wheel(0, -100)
    page.keyboard.up("Control")
    page.wait_for_timeout(100)
    after = view(page)
    assert after["scale"] > before["scale"] * 1.5
    for axis, screen in (("x", cx - box["x"]), ("y", cy - box["y"])):
        assert before[axis] + screen / before["scale"] == pytest.approx(after[axis] + screen / after["scale"], abs=1)
    # the wheel scrolls down by its delta in screen pixels
    before = view(page)
    page.mouse.wheel(0, 300)
    page.wait_for_timeout(100)
    assert view(page)["y"] == pytest.approx(before["y"] + 300 / before["scale"], rel=1e-3)
    # a drag pans by the distance dragged and does not select anything
    before = view(page)
    page.mouse.move(cx, cy)
    page.mouse.down()
    page.mouse.move(cx + 120, cy + 80, steps=4)
    page.mouse.up()
    after = view(page)
    assert after["x"] == pytest.approx(before["x"] - 120 / before["scale"], abs=0.5)
    assert after["y"] == pytest.approx(before["y"] - 80 / before["scale"], abs=0.5)
    # the overview: a click low on the strip moves the view down the picture, at the same zoom
    page.keyboard.press("f")
    page.keyboard.press("+")
    page.keyboard.press("+")
    page.keyboard.press("+")
    before = view(page)
    strip = page.locator("#overview canvas").bounding_box()
    page.mouse.click(strip["x"] + strip["width"] / 2, strip["y"] + strip["height"] * 0.9)
    after = view(page)
    assert after["y"] > before["y"] and after["scale"] == pytest.approx(before["scale"])
    frame = page.locator("#frame").bounding_box()
    assert strip["y"] + strip["height"] * 0.5 < frame["y"] + frame["height"]  # the frame followed
    # a resize keeps the view's centre
    before = view(page)
    page.set_viewport_size({"width": 1100, "height": 700})
    page.wait_for_timeout(200)
    after = view(page)
    for axis, size in (("x", "w"), ("y", "h")):
        assert before[axis] + before[size] / 2 == pytest.approx(after[axis] + after[size] / 2, abs=2)
    assert page.errors == []
