"""The compare report as terminal text."""

from __future__ import annotations

from collections import Counter
from typing import Any

from graphtool.compare.report import _flat
from graphtool.fusion_trace import short_op
from graphtool.inspect import format_table


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3g}"


def _hist_rows(report: dict[str, Any], levels: list[dict[str, Any]]) -> list[list[Any]]:
    columns = [_flat(report["original"]["op_histogram"])] if "original" in report else []
    for entry in levels:
        columns += [_flat(entry["ort"]["op_histogram"]), _flat(entry["graphtool"]["op_histogram"])]
    keys = sorted({k for c in columns for k in c}, key=lambda k: (k[0] != "ai.onnx", k[0], -max(c.get(k, 0) for c in columns), k[1]))
    return [[d, op, *[c.get((d, op), "") or "." for c in columns]] for d, op in keys]


def _level_heads(entry: dict[str, Any]) -> list[str]:
    return [f"ORT L{entry['level']}", f"gt L{entry.get('graphtool_level', entry['level'])}"]


def _fusion_lines(groups: list[dict[str, Any]], other_key: str | None = None, who: str = "") -> list[str]:
    lines = []
    for g in groups:
        line = f"  {g['pattern']} ×{g['count']}"
        if other_key and g.get(other_key):
            line += f"   ({who}: {'; '.join(g[other_key])})"
        line += f"   e.g. {g['examples'][0]}" if g["examples"] else ""
        lines.append(line)
        if g.get("why"):
            lines.append("      graphtool: " + "; ".join(g["why"]))
        if g.get("details"):
            lines.append("      inside: " + ", ".join(f"{k} ×{n}" for k, n in sorted(g["details"].items(), key=lambda kv: -kv[1])))
    return lines or ["  (none)"]


def format_level(entry: dict[str, Any]) -> str:
    """The per-level part of the text report: what differs, which fusions, how far outputs are."""
    lv = entry["level"]
    gl = entry.get("graphtool_level", lv)
    out = [f"level {lv}: ORT {entry['ort_level']} ({entry['ort']['nodes']} nodes) vs graphtool L{gl} "
           f"--target {entry['target']} ({entry['graphtool']['nodes']} nodes); original {entry['original_nodes']}"]
    out += [f"  note: {n}" for n in entry["notes"]]
    only_ort = [f"{short_op(r['domain'], r['op_type'])}×{r['ort']}" for r in entry["op_diff"] if r["only"] == "ort"]
    only_ours = [f"{short_op(r['domain'], r['op_type'])}×{r['graphtool']}" for r in entry["op_diff"] if r["only"] == "graphtool"]
    out.append("ops only in ORT: " + (", ".join(only_ort) or "(none)"))
    out.append("ops only in graphtool: " + (", ".join(only_ours) or "(none)"))
    f = entry["fusions"]
    for key, who, other, label in (("ort_only", "ORT", "graphtool_did", "graphtool did"),
                                   ("graphtool_only", "graphtool", "ort_did", "ORT did")):
        other_name = "graphtool" if who == "ORT" else "ORT"
        fused = [g for g in f[key] if g["kind"] == "fused"]
        rest = [g for g in f[key] if g["kind"] != "fused"]
        out.append(f"fusions {who} applied that {other_name} did not:")
        out += _fusion_lines(fused, other, label)
        if rest:
            out.append(f"other rewrites only {who} did (replaced or expanded ops):")
            out += _fusion_lines(rest, other, label)
    for side, label in (("ort", "ORT"), ("graphtool", "graphtool")):
        removed = entry[side].get("removed") or {}
        if removed:
            out.append(f"removed by {label} (folded or eliminated): "
                       + ", ".join(f"{op}×{n}" for op, n in removed.items()))
        untraced = entry[side].get("untraced") or []
        if untraced:
            ops = Counter(short_op("" if u["domain"] == "ai.onnx" else u["domain"], u["op_type"]) for u in untraced)
            out.append(f"{label} nodes with no traceable origin: " + ", ".join(f"{o}×{n}" for o, n in ops.items()))
    o = entry["outputs"]
    parts = []
    for key, label in (("ort_vs_graphtool", "ORT vs graphtool"), ("ort_vs_original", "ORT vs original"),
                       ("graphtool_vs_original", "graphtool vs original")):
        if key in o:
            parts.append(f"{label}: max abs {_num(o[key]['max_abs'])}, max rel {_num(o[key]['max_rel'])}"
                         + ("" if o[key]["ok"] else " (MISMATCH)"))
    out.append("outputs  " + "; ".join(parts))
    return "\n".join(out)


def format_latency(latency: dict[str, Any]) -> str:
    rows = [[f"{r['speedup']:.2f}x", r["model"], r["ort_level"], f"{r['median_ms']:.3f}", f"{r['p90_ms']:.3f}"]
            for r in latency["rows"]]
    base = latency["baseline"]
    head = (f"latency: {latency['runs']} interleaved runs after {latency['warmup']} warm-up, "
            f"{latency['threads']} thread; speed-up over {base['model']} with ORT {base['ort_level']}")
    return head + "\n" + format_table(rows, ["speed-up", "model", "ORT level", "median ms", "p90 ms"])


def format_compare(report: dict[str, Any]) -> str:
    """Human text for a whole ``compare`` report or for one ``compare_level`` entry."""
    if "levels" not in report:
        report = {"original": None, "levels": [report], "latency": None}
    levels = report["levels"]
    out: list[str] = []
    if report.get("model"):
        out.append(f"model: {report['model']}  (target {report.get('target', 'onnx')})")
    original = report.get("original")
    heads = (["original"] if original else []) + [h for e in levels for h in _level_heads(e)]
    node_row = (["", "nodes"] + ([original["nodes"]] if original else [])
                + [n for e in levels for n in (e["ort"]["nodes"], e["graphtool"]["nodes"])])
    hist_report = {"original": original} if original else {}
    rows = [node_row] + _hist_rows(hist_report, levels)
    out.append(format_table(rows, ["domain", "op", *heads]))
    for entry in levels:
        out += ["", format_level(entry)]
    if report.get("latency"):
        out += ["", format_latency(report["latency"])]
    return "\n".join(out)
