"""The compare report as a self-contained HTML page (with the diff of each level)."""

from __future__ import annotations

import html
from typing import Any

from graphtool.compare.schema import ORT_LEVELS
from graphtool.compare.text import _hist_rows, _level_heads, _num
from graphtool.fusion_trace import short_op
from graphtool.ir.model import Model

_CSS = """body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse;margin:1em 0}
td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}th{background:#f3f3f3}td.n{text-align:right}
.note{color:#8a5a00}.bad{color:#b00020;font-weight:bold}h2{margin-top:2em}pre{background:#f7f7f7;padding:1em;overflow:auto}
.diff{max-width:100%;overflow:auto;border:1px solid #ddd}.diff svg{max-width:100%;height:auto}"""


def _html_table(headers: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = []
    for row in rows:
        cells = "".join(
            f'<td class="n">{html.escape(str(c))}</td>' if isinstance(c, (int, float)) else f"<td>{html.escape(str(c))}</td>"
            for c in row
        )
        body.append(f"<tr>{cells}</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def to_html(report: dict[str, Any], extra_sections: list[tuple[str, str]] | None = None) -> str:
    """A self-contained page (no external resource) with the report's tables.

    ``extra_sections`` are (title, trusted HTML fragment) pairs — e.g. a rendered graph diff
    produced by graphtool.render; everything taken from the report is escaped here.
    """
    esc = html.escape
    levels = report["levels"]
    csp = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"  # no script may run, whatever slips in
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><meta http-equiv='Content-Security-Policy' content=\"{csp}\">"
             f"<title>graphtool compare: {esc(str(report.get('model') or ''))}</title>",
             f"<style>{_CSS}</style></head><body>",
             f"<h1>graphtool vs onnxruntime: {esc(str(report.get('model') or '(in memory)'))}</h1>",
             f"<p>target {esc(str(report.get('target', 'onnx')))}; original {report['original']['nodes']} nodes</p>"]
    heads = ["original"] + [h for e in levels for h in _level_heads(e)]
    node_row = ["", "nodes", report["original"]["nodes"]] + [n for e in levels for n in (e["ort"]["nodes"], e["graphtool"]["nodes"])]
    parts.append(_html_table(["domain", "op", *heads], [node_row] + _hist_rows(report, levels)))
    for entry in levels:
        parts.append(f"<h2>Level {entry['level']}: ORT {esc(entry['ort_level'])} vs graphtool "
                     f"L{entry.get('graphtool_level', entry['level'])}</h2>")
        parts += [f"<p class='note'>{esc(n)}</p>" for n in entry["notes"]]
        for key, title, other, who in (("ort_only", "Rewrites ORT applied that graphtool did not", "graphtool_did", "graphtool did"),
                                       ("graphtool_only", "Rewrites graphtool applied that ORT did not", "ort_did", "ORT did")):
            rows = [[g["pattern"], g["kind"], g["count"], "; ".join(g.get(other) or []), ", ".join(g["examples"])]
                    for g in entry["fusions"][key]]
            parts.append(f"<h3>{esc(title)}</h3>"
                         + (_html_table(["pattern", "kind", "count", who, "examples"], rows) if rows else "<p>(none)</p>"))
        rows = [[short_op("" if r["domain"] == "ai.onnx" else r["domain"], r["op_type"]), r["ort"], r["graphtool"], r["only"] or ""]
                for r in entry["op_diff"]]
        parts.append("<h3>Op counts that differ</h3>" + (_html_table(["op", "ORT", "graphtool", "only in"], rows) if rows else "<p>(none)</p>"))
        rows = []
        for key, value in entry["outputs"].items():
            rows.append([key.replace("_", " "), _num(value["max_abs"]), _num(value["max_rel"]), "ok" if value["ok"] else "MISMATCH"])
        parts.append("<h3>Outputs on the same random inputs</h3>" + _html_table(["pair", "max abs", "max rel", ""], rows))
    if report.get("latency"):
        lat = report["latency"]
        rows = [[f"{r['speedup']:.2f}x", r["model"], r["ort_level"], r["median_ms"], r["p90_ms"]] for r in lat["rows"]]
        parts.append(f"<h2>Latency</h2><p>{lat['runs']} interleaved runs after {lat['warmup']} warm-up, {lat['threads']} thread</p>"
                     + _html_table(["speed-up", "model", "ORT level", "median ms", "p90 ms"], rows))
    for title, fragment in extra_sections or []:
        parts.append(f"<h2>{esc(title)}</h2>{fragment}")
    parts.append("</body></html>")
    return "\n".join(parts)


def diff_sections(pairs: dict[int, tuple[Model, Model]], limit: int = 300,
                  max_picture_changes: int = 400) -> list[tuple[str, str]]:
    """HTML fragments showing, per level, how graphtool's graph differs from ORT's.

    graphtool.diff.run matches the two graphs; graphtool.render.dot draws the changed nodes (added
    green, removed red, changed amber, with one hop of context) as an inline SVG, whose text dot
    and ``set_titles`` escape. Without those modules, or without Graphviz, or past
    ``max_picture_changes`` changed nodes (dot would take minutes), the diff's text summary is
    shown instead, escaped in a <pre>. Returns [] when graphtool.diff.run is not available.
    """
    try:
        from graphtool.diff import diff, format_diff
    except ImportError:
        return []
    try:
        from graphtool.render.dot import diff_picture
    except ImportError:
        diff_picture = None
    from graphtool.errors import GraphtoolError

    sections = []
    for level, (ort_model, ours) in sorted(pairs.items()):
        label = f"ORT L{level} ({ORT_LEVELS[level]})"
        try:
            result = diff(ort_model, ours)
            text = format_diff(result, label, "graphtool", max_lines=limit)
        except Exception as err:  # an add-on view: its failure must not take the report down
            sections.append((f"Level {level}: graph diff", f"<p class='bad'>graph diff failed: {html.escape(repr(err))}</p>"))
            continue
        fragment = f"<pre>{html.escape(text)}</pre>"
        changes = sum(result.counts[k] for k in ("added", "removed", "changed"))
        if diff_picture is not None and 0 < changes <= max_picture_changes:
            try:
                svg = diff_picture(result).svg()
                fragment = f"<div class='diff'>{svg[svg.find('<svg'):]}</div>" + fragment
            except GraphtoolError:
                pass  # no Graphviz: the text alone
        sections.append((f"Level {level}: graph diff, {label} → graphtool", fragment))
    return sections
