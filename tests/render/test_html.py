"""graphtool.render.html in a real headless browser (Debian's ``chromium``): the page parses,
its script runs under its own Content-Security-Policy, pan/zoom/hover work, and hostile names
stay text — no element, attribute or script of theirs ever reaches the DOM."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
from html.parser import HTMLParser

import onnx
import pytest

from graphtool import io
from graphtool.diff import diff
from graphtool.render.dot import diff_picture, infer_shapes, model_picture
from graphtool.render.html import diff_fragment
from tests.conftest import light_model
from tests.render.models import EVIL, evil_model, hand_edit, load_evil


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no chromium browser found: `apt-get install -y chromium` to run the HTML browser tests")


def dump_dom(page: str, tmp_path) -> str:
    """The DOM after the page's scripts ran, serialized by headless chromium."""
    html_path = tmp_path / "page.html"
    html_path.write_text(page, encoding="utf-8")
    profile = tmp_path / "profile"
    profile.mkdir(exist_ok=True)
    cmd = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={profile}", "--window-size=1200,900", "--dump-dom", html_path.as_uri()]
    done = subprocess.run(cmd, capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    return done.stdout.decode("utf-8")


class _Dom(HTMLParser):
    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.scripts: list[str] = []
        self._in_script = False
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"
        if self._in_script:
            self.scripts.append("")

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts[-1] += data
        else:
            self.text.append(data)

    def body_attr(self, name: str) -> str | None:
        return next((attrs.get(name) for tag, attrs in self.tags if tag == "body"), None)


ALLOWED_TAGS = {
    "html", "head", "meta", "title", "style", "body", "header", "h1", "h2", "span", "button", "main", "div",
    "aside", "table", "thead", "tbody", "tr", "th", "td", "br", "small", "script", "dl", "dt", "dd",
    "svg", "g", "path", "polygon", "polyline", "ellipse", "text", "font", "b",
    "p", "input", "kbd", "ul", "li", "canvas", "h3", "details", "summary",  # search, keys, groups, overview, panel
}


def assert_nothing_injected(dom: _Dom) -> None:
    tags = {tag for tag, _ in dom.tags}
    assert tags <= ALLOWED_TAGS, tags - ALLOWED_TAGS
    assert "svg" in tags
    scripts = [attrs for tag, attrs in dom.tags if tag == "script"]
    assert len(scripts) == 2 and scripts[0].get("type") == "application/json" and "src" not in scripts[1]
    for tag, attrs in dom.tags:
        for name, value in attrs.items():
            assert not name.startswith("on"), (tag, name)
            assert name not in ("src", "href", "xlink:href"), (tag, name, value)
    # <b> only ever comes from our own labels (HTML-like labels use <B> for the op type): the
    # hostile "<b>bold</b>" must be text
    assert "it's <b>bold</b>" in "".join(dom.text)


def with_test_script(page: str, script: str) -> str:
    """The page plus one more script, allowed by adding its hash to the page's CSP."""
    digest = "sha256-" + base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    page = page.replace("script-src '", f"script-src '{digest}' '", 1)
    return page.replace("</body>", f"<script>{script}</script></body>", 1)


def test_viz_page_of_hostile_names_injects_nothing(tmp_path):
    picture = model_picture(infer_shapes(load_evil()))
    dom = _Dom(dump_dom(picture.render("html").decode(), tmp_path))
    assert_nothing_injected(dom)
    text = "".join(dom.text)
    for name in ("<script>alert(1)</script>", "<img src=x onerror=alert(2)>", 'quote"name', "\\N \\G \\l end\\",
                 "ünïcødé ☃ 😀", "&amp; &lt; &#60; &", "--> ]]> <!-- ?>"):
        assert name in text, name
    svg = next(attrs for tag, attrs in dom.tags if tag == "svg")
    # our script ran (under the CSP): it took over the viewBox and dropped the fixed size
    assert svg.get("preserveaspectratio") == "xMidYMid meet" and "width" not in svg


def test_diff_page_of_hostile_names_injects_nothing(tmp_path):
    proto = evil_model()
    edited = onnx.ModelProto()
    edited.CopyFrom(proto)
    for node in edited.graph.node:
        if node.name == EVIL[1]:
            node.op_type = "Neg"
        if node.op_type == "Evil":
            node.attribute[0].s = (EVIL[2] + EVIL[4]).encode()
    result = diff(io.load_proto(proto), io.load_proto(edited))
    assert result.counts["changed"] == 2
    dom = _Dom(dump_dom(diff_picture(result).render("html").decode(), tmp_path))
    assert_nothing_injected(dom)
    # the table of changes (its rows carry the change as class; the panel lists the first group too)
    rows = [attrs for tag, attrs in dom.tags if tag == "tr" and "data-node" in attrs and "class" in attrs]
    assert len(rows) == 2
    text = "".join(dom.text)
    assert "op_type: Sigmoid -> Neg" in text and "<script>alert(1)</script>" in text
    assert "<img src=x onerror=alert(2)>" in text  # the new attribute value, shown in the table


def test_pan_zoom_click_and_row_click_work(tmp_path):
    a = io.load(light_model("resnet50"))
    picture = diff_picture(diff(a, hand_edit(io.load(light_model("resnet50")))))
    removed = next(k for k, info in picture.info.items() if info.get("change") == "removed")
    script = """
      var out = {}, svg = document.querySelector('#view svg');
      var r = svg.getBoundingClientRect(), cx = r.left + r.width / 2, cy = r.top + r.height / 2;
      out.start = svg.getAttribute('viewBox');
      var node = document.getElementById('REMOVED');
      node.querySelector('text').dispatchEvent(new MouseEvent('click', {bubbles: true}));
      out.panel = document.getElementById('details').textContent;
      svg.dispatchEvent(new WheelEvent('wheel', {deltaY: 120, clientX: cx, clientY: cy, bubbles: true, cancelable: true}));
      out.scrolled = svg.getAttribute('viewBox');
      svg.dispatchEvent(new WheelEvent('wheel', {deltaY: -40, ctrlKey: true, clientX: cx, clientY: cy, bubbles: true, cancelable: true}));
      out.zoomed = svg.getAttribute('viewBox');
      svg.dispatchEvent(new MouseEvent('mousedown', {clientX: cx, clientY: cy, bubbles: true}));
      window.dispatchEvent(new MouseEvent('mousemove', {clientX: cx + 50, clientY: cy + 30, bubbles: true}));
      window.dispatchEvent(new MouseEvent('mouseup', {bubbles: true}));
      out.dragged = svg.getAttribute('viewBox');
      document.getElementById('fit').click();
      out.fit = svg.getAttribute('viewBox');
      document.querySelector('tr[data-node="REMOVED"]').click();
      out.lit = node.getAttribute('class');
      out.focused = svg.getAttribute('viewBox');
      document.body.setAttribute('data-test', JSON.stringify(out));
    """.replace("REMOVED", removed)
    dom = _Dom(dump_dom(with_test_script(picture.render("html").decode(), script), tmp_path))
    out = json.loads(dom.body_attr("data-test"))
    start, scrolled, zoomed, dragged, fit, focused = (
        [float(v) for v in out[k].split()] for k in ("start", "scrolled", "zoomed", "dragged", "fit", "focused"))
    assert scrolled[1] > start[1] and scrolled[2:] == start[2:]  # the wheel scrolls down, like a document
    assert zoomed[2] < start[2] and zoomed[3] < start[3]  # ctrl+wheel up (a pinch) zooms in
    assert dragged[2] == zoomed[2] and dragged[0] < zoomed[0] and dragged[1] < zoomed[1]  # drag pans
    # the page opens zoomed in to a readable scale, not fitted: fit shows more of the graph
    assert fit[2] > start[2] and fit[3] > start[3]
    assert focused[2] < fit[2]  # clicking a row zooms to its node
    assert "BatchNormalization" in out["panel"] and "removed" in out["panel"]
    assert "lit" in out["lit"].split()  # (the first summary group is lit too: "grp")


def test_csp_blocks_scripts_that_are_not_ours(tmp_path):
    page = model_picture(load_evil()).render("html").decode()
    page = page.replace("</body>", "<script>document.body.setAttribute('data-pwned', '1')</script></body>", 1)
    dom = _Dom(dump_dom(page, tmp_path))
    assert dom.body_attr("data-pwned") is None


def test_page_is_self_contained():
    page = model_picture(io.load(light_model("resnet50"))).render("html").decode()
    urls = {u for u in __import__("re").findall(r"https?://[^\s\"'<>)]+", page)}
    assert urls <= {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}, urls
    assert "<svg" in page and "<?xml" not in page and "<!DOCTYPE svg" not in page
    assert "default-src 'none'" in page


def test_diff_fragment_for_other_pages_has_no_script():
    a = io.load(light_model("resnet50"))
    fragment = diff_fragment(diff_picture(diff(a, hand_edit(io.load(light_model("resnet50"))))))
    assert "<svg" in fragment and "<script" not in fragment and "<table>" in fragment
    assert fragment.count("data-node=") == 5


def test_the_injection_check_itself_catches_raw_markup(tmp_path):
    """The DOM checks above can fail: the same page with one name left unescaped is caught."""
    page = model_picture(load_evil()).render("html").decode()
    raw = page.replace("<h1>", "<h1><img src=x onerror=alert(3)>", 1)
    with pytest.raises(AssertionError):
        assert_nothing_injected(_Dom(dump_dom(raw, tmp_path)))
