"""One self-contained HTML page around a picture: inline SVG that opens readable, search,
overview, click-for-details, and — for a diff — the summary groups and the table of changes.

The first screen is what people judge, so the page does not open "fit to window" (a 1,700-node
graph would be a strip of unreadable boxes): it opens at the zoom where the smallest node text
is ``READABLE_PX`` on screen, at the graph's first input, with an overview strip to navigate,
``/`` to search (node name, op type, value name), ``f`` to fit, ``+``/``-`` to zoom.

Nothing is fetched: no CDN, no fonts, no images; a Content-Security-Policy allows exactly our one
inline script (by its hash), so even text that slipped through escaping could not run. The
script and the style are package data (``page.js``, ``page.css``), read once per process. Model
text reaches the page three ways, each escaped for its context: in the SVG (escaped by dot and
by ``set_titles``), in the group list and table of changes (``html.escape``), and as JSON data
for the panel and search (with ``<``, ``>``, ``&`` as ``\\u`` escapes so it cannot close its
``<script>`` element); the script only ever writes it with ``textContent``.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import html
import json
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from graphtool.render.text import SMALL_POINTS

# No import of graphtool.render.picture here: Picture.render imports this module to write itself
# as HTML, so the page takes any object with its interface (svg(), info, groups, weight_stats() …).
Picture = Any

_HERE = os.path.dirname(os.path.abspath(__file__))
READABLE_PX = 12  # the smallest node text on screen at the opening zoom (the "readable" zoom)


@functools.lru_cache(maxsize=None)
def _asset(name: str) -> str:
    """The page's script and style ship as package data (page.js, page.css) next to this file."""
    with open(os.path.join(_HERE, name), encoding="utf-8") as handle:
        return handle.read()


def _json_for_script(value: Any) -> str:
    """JSON that cannot end its <script> element or open markup inside it."""
    text = json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":"))
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


def _groups_list(groups: list[dict[str, Any]]) -> str:
    """The diff's summary: one clickable line per group (the script lights its nodes)."""
    if not groups:
        return ""
    items = "".join(
        f'<li data-group="{k}" title="{html.escape(g["kind"])}"><span class="count">{int(g["count"])}</span>'
        f'<span>{html.escape(g["title"])}</span></li>'
        for k, g in enumerate(groups))
    return f'<h2>Summary <small class="hint">click a line to light its nodes</small></h2><ul id="groups">{items}</ul>'


def _legend(entries: list[dict[str, Any]]) -> str:
    """The key to a diff's colours, under the overview strip (in the picture's SVG it sat at the
    top of the graph, out of view or under the strip once the page zooms to the first change)."""
    if not entries:
        return ""
    items = "".join(
        f'<li><span class="swatch" style="background:{html.escape(e["fill"])};border:1px solid '
        f'{html.escape(e["border"])}"></span>{html.escape(e["text"])}</li>' for e in entries)
    return f'<ul id="legend" title="">{items}</ul>'


def page(picture: Picture, heading: str | None = None) -> str:
    """The whole page as a string. Weight statistics are computed here, not when the picture is
    built, so SVG/DOT output never reads a weight (``Picture.weight_stats`` bounds the work)."""
    script, style = _asset("viewport.js") + _asset("page.js"), _asset("page.css")
    with ThreadPoolExecutor(max_workers=1) as pool:  # dot lays out while the weights are read
        layout = pool.submit(picture.svg, not picture.legend)  # a legend goes under the overview
        data = _json_for_script({
            "info": picture.info,
            "stats": picture.weight_stats(),
            "groups": [{"title": g["title"], "ids": g["ids"]} for g in picture.groups],
            "start": picture.start,
            "minFont": SMALL_POINTS,
            "readable": READABLE_PX,
        })
        svg = _inline_svg(layout.result())
    title = heading or picture.title or "graphtool"
    notes = " · ".join(picture.notes)
    csp = f"default-src 'none'; script-src '{_csp_hash(script)}'; style-src 'unsafe-inline'; img-src data:"
    hint = "Click a node to see its attributes, inputs, outputs and weights."
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">'  # our constant: no quotes to escape
        f"<title>{html.escape(title)}</title><style>{style}</style></head>\n<body>"
        f"<header><h1>{html.escape(title)}</h1><span class=\"notes\">{html.escape(notes)}</span>"
        '<div class="tools"><input id="search" type="search" autocomplete="off" spellcheck="false" '
        'placeholder="Search node, op type, value" aria-label="search"><ul id="results"></ul>'
        '<span id="hits"></span>'
        '<button id="zoom-out" type="button" title="zoom out (-)">−</button>'
        '<button id="zoom-in" type="button" title="zoom in (+)">+</button>'
        '<button id="fit" type="button" title="fit (f)">fit</button>'
        '<span class="keys"><kbd>/</kbd> search <kbd>f</kbd> fit <kbd>+</kbd><kbd>-</kbd> or <kbd>ctrl</kbd>+wheel zoom</span></div>'
        "</header>\n"
        f'<main><div id="view">{svg}</div><div id="overview" title="overview: click or drag to move">'
        f'<canvas></canvas><div id="frame"></div>{_legend(picture.legend)}</div>\n'
        f'<aside><h2>Details</h2><div id="details"><p class="hint">{hint}</p></div>'
        f'{_groups_list(picture.groups)}<div id="changes">{_changes_table(picture.rows)}</div></aside></main>\n'
        f'<script type="application/json" id="gt-data">{data}</script>\n'
        f"<script>{script}</script>\n</body></html>\n"
    )


def layered_page(data: dict[str, Any], notes: list[str] | None = None) -> str:
    """The layered page (``render.layers``): a model of any size, folded into layers that open
    on click and are laid out in the page when first shown; search over every op and value."""
    # one script in one scope: the shared view, then the model, the layout, the drawing (by job)
    script = (_asset("viewport.js") + '(function () {\n  "use strict";\n' + _asset("layers_model.js")
              + _asset("layers_layout.js") + _asset("layers.js") + "})();\n")
    style = _asset("page.css")
    title = data.get("title") or "graphtool"
    csp = f"default-src 'none'; script-src '{_csp_hash(script)}'; style-src 'unsafe-inline'; img-src data:"
    note = " · ".join(notes or [])
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">'
        f"<title>{html.escape(title)}</title><style>{style}</style></head>\n<body>"
        f"<header><h1>{html.escape(title)}</h1><span class=\"notes\">{html.escape(note)}</span>"
        '<div class="tools"><input id="search" type="search" autocomplete="off" spellcheck="false" '
        'placeholder="Search op, name, value" aria-label="search"><ul id="results"></ul>'
        '<span id="hits"></span>'
        '<button id="zoom-out" type="button" title="zoom out (-)">−</button>'
        '<button id="zoom-in" type="button" title="zoom in (+)">+</button>'
        '<button id="fit" type="button" title="fit (f)">fit</button>'
        '<span class="keys"><kbd>/</kbd> search <kbd>f</kbd> fit <kbd>+</kbd><kbd>-</kbd> or <kbd>ctrl</kbd>+wheel zoom</span></div>'
        "</header>\n"
        '<main><div id="view" class="layers"></div><div id="overview" title="overview: click or drag to move">'
        '<canvas></canvas><div id="frame"></div></div>\n'
        '<aside><h2>Details</h2><div id="details"></div></aside></main>\n'
        f'<script type="application/json" id="gt-data">{_json_for_script(data)}</script>\n'
        f"<script>{script}</script>\n</body></html>\n"
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
