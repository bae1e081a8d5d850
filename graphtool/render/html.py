"""One self-contained HTML page around a picture: inline SVG, pan/zoom, hover details, changes.

Nothing is fetched: no CDN, no fonts, no images; a Content-Security-Policy allows exactly our one
inline script (by its hash), so even text that slipped through escaping could not run. Model
text reaches the page three ways, each escaped for its context: in the SVG (escaped by dot and by
``set_titles``), in the table of changes (``html.escape``), and as JSON data for the hover panel
(with ``<``, ``>``, ``&`` as ``\\u`` escapes so it cannot close its ``<script>`` element); the
script only ever writes it with ``textContent``.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
from typing import Any

# No import of graphtool.render.dot here: dot imports this module to write a picture as HTML, so
# the page takes any object with dot's Picture interface (svg(), title, notes, rows, titles …).
Picture = Any

_SCRIPT = r"""
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("gt-data").textContent);
  var view = document.getElementById("view");
  var svg = view.querySelector("svg");
  var panel = document.getElementById("details");
  if (!svg) { return; }
  var base = svg.viewBox.baseVal;
  var home = {x: base.x, y: base.y, w: base.width, h: base.height};
  var vb = {x: home.x, y: home.y, w: home.w, h: home.h};
  svg.removeAttribute("width");
  svg.removeAttribute("height");
  svg.setAttribute("preserveAspectRatio", "xMidYMid meet");
  function apply() { svg.setAttribute("viewBox", vb.x + " " + vb.y + " " + vb.w + " " + vb.h); }
  function toSvg(clientX, clientY) {
    var pt = svg.createSVGPoint();
    pt.x = clientX; pt.y = clientY;
    return pt.matrixTransform(svg.getScreenCTM().inverse());
  }
  svg.addEventListener("wheel", function (e) {
    e.preventDefault();
    var k = Math.exp(Math.max(-1, Math.min(1, e.deltaY * 0.0015)));
    var p = toSvg(e.clientX, e.clientY);  // in viewBox units: zoom around the cursor
    vb.x = p.x - (p.x - vb.x) * k; vb.y = p.y - (p.y - vb.y) * k;
    vb.w *= k; vb.h *= k; apply();
  }, {passive: false});
  var drag = null;
  svg.addEventListener("mousedown", function (e) {
    drag = {x: e.clientX, y: e.clientY, vx: vb.x, vy: vb.y, scale: 1 / svg.getScreenCTM().a};
    view.classList.add("dragging");
  });
  window.addEventListener("mousemove", function (e) {
    if (!drag) { return; }
    vb.x = drag.vx - (e.clientX - drag.x) * drag.scale;
    vb.y = drag.vy - (e.clientY - drag.y) * drag.scale;
    apply();
  });
  window.addEventListener("mouseup", function () { drag = null; view.classList.remove("dragging"); });
  function show(id) {
    var info = data.info[id];
    if (!info) { return; }
    while (panel.firstChild) { panel.removeChild(panel.firstChild); }
    var dl = document.createElement("dl");
    Object.keys(info).forEach(function (key) {
      var value = info[key];
      if (value === "" || value === null || (Array.isArray(value) && !value.length)) { return; }
      var dt = document.createElement("dt");
      dt.textContent = key;
      dl.appendChild(dt);
      var items = Array.isArray(value) ? value : (typeof value === "object" ?
        Object.keys(value).map(function (k) { return k + " = " + value[k]; }) : [String(value)]);
      items.forEach(function (item) {
        var dd = document.createElement("dd");
        dd.textContent = item === "" ? "(none)" : String(item);
        dl.appendChild(dd);
      });
    });
    panel.appendChild(dl);
  }
  svg.addEventListener("mouseover", function (e) {
    var g = e.target.closest ? e.target.closest("g.node") : null;
    if (g) { show(g.id); }
  });
  var lit = null;
  function focusNode(id) {
    var el = document.getElementById(id);
    if (!el || !el.getBBox) { return; }
    var box = el.getBBox();
    var ctm = el.getCTM(), top = svg.getCTM();
    var x = box.x, y = box.y;
    if (ctm && top) {
      var pt = svg.createSVGPoint(); pt.x = box.x; pt.y = box.y;
      var q = pt.matrixTransform(top.inverse().multiply(ctm)); x = q.x; y = q.y;
    }
    var w = Math.min(Math.max(box.width * 4, 200), home.w), h = Math.min(Math.max(box.height * 8, 150), home.h);
    vb = {x: x + box.width / 2 - w / 2, y: y + box.height / 2 - h / 2, w: w, h: h};
    apply();
    if (lit) { lit.classList.remove("lit"); }
    el.classList.add("lit"); lit = el;
    show(id);
  }
  document.querySelectorAll("tr[data-node]").forEach(function (row) {
    row.addEventListener("click", function () { focusNode(row.getAttribute("data-node")); });
  });
  document.getElementById("fit").addEventListener("click", function () {
    vb = {x: home.x, y: home.y, w: home.w, h: home.h}; apply();
  });
})();
"""

_STYLE = """
html, body { margin: 0; height: 100%; font: 13px/1.4 system-ui, sans-serif; color: #222; }
body { display: flex; flex-direction: column; }
header { padding: 6px 12px; border-bottom: 1px solid #ddd; display: flex; gap: 12px; align-items: baseline; }
header h1 { font-size: 15px; margin: 0; }
header .notes { color: #666; }
main { flex: 1; display: flex; min-height: 0; }
#view { flex: 1; overflow: hidden; cursor: grab; background: #fafafa; }
#view.dragging { cursor: grabbing; }
#view svg { width: 100%; height: 100%; user-select: none; }
aside { width: 460px; border-left: 1px solid #ddd; overflow: auto; padding: 8px; }
aside h2 { font-size: 13px; margin: 8px 0 4px; }
#details dl { margin: 0; }
#details dt { font-weight: 600; margin-top: 6px; }
#details dd { margin: 0 0 0 10px; font-family: ui-monospace, monospace; font-size: 12px; word-break: break-all; white-space: pre-wrap; }
table { border-collapse: collapse; width: 100%; font-size: 12px; }
td, th { text-align: left; padding: 2px 4px; border-bottom: 1px solid #eee; vertical-align: top; overflow-wrap: anywhere; }
td:first-child, td:nth-child(2) { white-space: nowrap; }
tr[data-node] { cursor: pointer; }
tr[data-node]:hover { background: #eef3fb; }
tr.added td:first-child { background: #c6efce; }
tr.removed td:first-child { background: #ffc7ce; }
tr.changed td:first-child { background: #ffe699; }
g.lit > path, g.lit > polygon, g.lit > ellipse { stroke: #0057d9; stroke-width: 4px; }
button { font: inherit; }
"""


def _json_for_script(value: Any) -> str:
    """JSON that cannot end its <script> element or open markup inside it."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(ch, esc)
    return text


def _csp_hash(script: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")


def _inline_svg(svg: str) -> str:
    """The <svg> element alone (no XML declaration or DOCTYPE, which HTML does not allow)."""
    start = svg.find("<svg")
    return svg[start:] if start >= 0 else svg


def _changes_table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return ""
    out = ['<h2>Changes</h2><table><thead><tr><th></th><th>op</th><th>node</th><th>what</th></tr></thead><tbody>']
    for row in rows:
        attrs = f' class="{html.escape(row["change"])}"'
        if row.get("id"):
            attrs += f' data-node="{html.escape(row["id"])}"'
        details = "<br>".join(html.escape(d) for d in row.get("details", []))
        scope = "" if row["scope"] == "main" else f'<br><small>{html.escape(row["scope"])}</small>'
        out.append(
            f"<tr{attrs}><td>{html.escape(row['change'])}</td><td>{html.escape(row['op_type'])}</td>"
            f"<td>{html.escape(row['name'])}{scope}</td><td>{details}</td></tr>"
        )
    out.append("</tbody></table>")
    return "".join(out)


def page(picture: Picture, heading: str | None = None) -> str:
    """The whole page as a string."""
    svg = _inline_svg(picture.svg())
    data = _json_for_script({"info": picture.info})
    title = heading or picture.title or "graphtool"
    notes = " · ".join(picture.notes)
    csp = f"default-src 'none'; script-src '{_csp_hash(_SCRIPT)}'; style-src 'unsafe-inline'; img-src data:"
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">'  # our constant: no quotes to escape
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head>\n<body>"
        f"<header><h1>{html.escape(title)}</h1><span class=\"notes\">{html.escape(notes)}</span>"
        '<button id="fit" type="button">fit</button></header>\n'
        f'<main><div id="view">{svg}</div>\n'
        '<aside><h2>Details</h2><div id="details">Hover a node to see its attributes.</div>'
        f"{_changes_table(picture.rows)}</aside></main>\n"
        f'<script type="application/json" id="gt-data">{data}</script>\n'
        f"<script>{_SCRIPT}</script>\n</body></html>\n"
    )


def diff_fragment(picture: Picture, max_drawn: int = 1500) -> str:
    """A script-free HTML fragment for other pages (``graphtool compare --html``): a diff's
    picture (``render.dot.diff_picture``) as inline SVG (when Graphviz is there and the picture
    stays readable) and the table of changes."""
    from graphtool.errors import GraphtoolError

    figure = ""
    if 0 < picture.shown <= max_drawn:
        try:
            figure = f'<div style="max-height:80vh;overflow:auto">{_inline_svg(picture.svg())}</div>'
        except GraphtoolError as err:
            figure = f"<p>{html.escape(str(err))}</p>"
    summary = html.escape(picture.title + (" · " + " · ".join(picture.notes) if picture.notes else ""))
    return f"<p>{summary}</p>{figure}{_changes_table(picture.rows)}"
