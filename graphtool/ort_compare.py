"""graphtool beside onnxruntime's own optimizer: what ORT does at L1/L2/L3 that graphtool does not.

For each level, ORT optimizes the original model and writes the result to a file
(``SessionOptions.optimized_model_filepath``); graphtool optimizes the same model at the same
level. The report puts the two graphs side by side: node counts, op histograms by domain, ops
found in only one of them, the fusions each applied — *named*, e.g. ``Conv+Relu → FusedConv ×16``
— and how far apart their outputs are on the same random inputs.

Naming a fusion needs no knowledge of ORT's optimizer: both optimizers keep the value names at
the boundary of what they rewrite, so every node of a rewritten graph is traced back to the
original ops it replaced (``graphtool.fusion_trace.trace_fusions``, which ``graphtool diff``'s
summary uses too).

L2/L3 graphs hold com.microsoft contrib ops, and ORT's L3 graph holds NCHWc layout ops chosen for
this machine's CPU: the report says so, because neither is portable ONNX.
"""

from __future__ import annotations

import html
import os
import statistics
import tempfile
import time
from collections import Counter
from typing import Any, Callable, Iterable

import numpy as np

from graphtool import io
from graphtool.fusion_trace import Fusion, Trace, short_op, trace_fusions
from graphtool.fusion_trace import group_fusions as _group
from graphtool.inspect import format_table, op_histogram
from graphtool.ir.model import Model
from graphtool.runtime import make_session, random_inputs
from graphtool.verify import compare_arrays

SCHEMA = "graphtool.compare/1"
ORT_LEVELS = {1: "basic", 2: "extended", 3: "all"}
LATENCY_ORT_LEVELS = ("off", "basic", "extended", "all")

# --------------------------------------------------------------------------- JSON schema
# The ``--json`` document, in JSON Schema vocabulary (type/properties/required/items/enum).
# tests/test_ort_compare.py validates real output against it, so it cannot drift from the code.

_INT = {"type": "integer", "minimum": 0}
_NUM_OR_NULL = {"type": ["number", "null"]}  # null: not comparable (shape/dtype differ, output missing)
_HISTOGRAM = {"type": "object", "additionalProperties": {"type": "object", "additionalProperties": _INT}}
_OP = {"type": "object", "required": ["domain", "op_type"],
       "properties": {"domain": {"type": "string"}, "op_type": {"type": "string"}}}
_FUSION_GROUP = {
    "type": "object",
    "required": ["pattern", "kind", "from", "to", "count", "examples"],
    "properties": {
        "pattern": {"type": "string"},  # "Conv+Relu → FusedConv"
        # fused: many ops → fewer; replaced: as many, other ops; expanded: fewer → more (inlined, decomposed)
        "kind": {"enum": ["fused", "replaced", "expanded"]},
        "from": {"type": "array", "items": {"type": "string"}},  # original op types on the fused data path
        "to": {"type": "array", "items": _OP},  # the op(s) that replaced them
        "count": {"type": "integer", "minimum": 1},
        "examples": {"type": "array", "items": {"type": "string"}},  # names of rewritten nodes
        "graphtool_did": {"type": "array", "items": {"type": "string"}},  # in ort_only: what graphtool did instead
        "ort_did": {"type": "array", "items": {"type": "string"}},  # in graphtool_only: what ORT did instead
        # layout clusters: per-node fusions read from attributes, e.g. {"Conv+Sum+Relu → nchwc.Conv": 16}
        "details": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 1}},
    },
}
_SIDE = {
    "type": "object",
    "required": ["nodes", "op_histogram", "removed", "untraced"],
    "properties": {
        "nodes": _INT,
        "op_histogram": _HISTOGRAM,
        "removed": {"type": "object", "additionalProperties": _INT},
        "untraced": {"type": "array", "items": {"type": "object", "required": ["domain", "op_type", "name"]}},
    },
}
_PAIR = {
    "type": "object",
    "required": ["max_abs", "max_rel", "ok", "outputs"],
    "properties": {
        "max_abs": _NUM_OR_NULL, "max_rel": _NUM_OR_NULL, "ok": {"type": "boolean"},
        "outputs": {"type": "array", "items": {
            "type": "object", "required": ["name", "max_abs", "max_rel", "ok", "reason"],
            "properties": {"name": {"type": "string"}, "max_abs": _NUM_OR_NULL, "max_rel": _NUM_OR_NULL,
                           "ok": {"type": "boolean"}, "reason": {"type": "string"}}}},
    },
}
LEVEL_SCHEMA = {
    "type": "object",
    "required": ["level", "ort_level", "graphtool_level", "target", "original_nodes", "ort", "graphtool",
                 "op_diff", "fusions", "outputs", "notes"],
    "properties": {
        "level": {"enum": [1, 2, 3]},
        "ort_level": {"enum": ["basic", "extended", "all"]},
        "graphtool_level": {"enum": [1, 2, 3]},
        "target": {"enum": ["onnx", "ort"]},
        "original_nodes": _INT,
        "ort": _SIDE,
        "graphtool": _SIDE,
        "op_diff": {"type": "array", "items": {
            "type": "object", "required": ["domain", "op_type", "ort", "graphtool", "only"],
            "properties": {"domain": {"type": "string"}, "op_type": {"type": "string"}, "ort": _INT,
                           "graphtool": _INT, "only": {"enum": ["ort", "graphtool", None]}}}},
        "fusions": {"type": "object", "required": ["ort", "graphtool", "ort_only", "graphtool_only"],
                    "additionalProperties": {"type": "array", "items": _FUSION_GROUP}},
        "outputs": {"type": "object", "required": ["ort_vs_graphtool", "ort_vs_original", "graphtool_vs_original"],
                    "additionalProperties": _PAIR},
        "notes": {"type": "array", "items": {"type": "string"}},
    },
}
JSON_SCHEMA = {
    "type": "object",
    "required": ["schema", "model", "target", "original", "levels", "latency"],
    "properties": {
        "schema": {"enum": ["graphtool.compare/1"]},
        "model": {"type": ["string", "null"]},
        "target": {"enum": ["onnx", "ort"]},
        "original": {"type": "object", "required": ["nodes", "op_histogram"],
                     "properties": {"nodes": _INT, "op_histogram": _HISTOGRAM}},
        "levels": {"type": "array", "items": LEVEL_SCHEMA},
        "latency": {"type": ["object", "null"], "required": ["runs", "warmup", "threads", "baseline", "rows"],
                    "properties": {
                        "runs": {"type": "integer", "minimum": 1}, "warmup": _INT, "threads": {"type": "integer", "minimum": 1},
                        "baseline": {"type": "object", "required": ["model", "ort_level"]},
                        "rows": {"type": "array", "items": {
                            "type": "object", "required": ["model", "ort_level", "median_ms", "p90_ms", "speedup"],
                            "properties": {"model": {"type": "string"},
                                           "ort_level": {"enum": ["off", "basic", "extended", "all"]},
                                           "median_ms": {"type": "number", "minimum": 0},
                                           "p90_ms": {"type": "number", "minimum": 0},
                                           "speedup": {"type": "number", "minimum": 0}}}}}},
    },
}


# --------------------------------------------------------------------------- ORT's optimized graph


def ort_optimized(model: Model, level: int) -> Model:
    """The graph ORT runs at ``level`` (1 basic, 2 extended, 3 all), read back into the IR.

    ORT serializes the graph after its graph transformers ran, before execution providers
    partition it; weights are written inline, so the temp folder can go once the file is read.
    """
    with tempfile.TemporaryDirectory(prefix="graphtool-ort-") as tmp:
        path = os.path.join(tmp, "ort_optimized.onnx")
        source: bytes | str
        if io.wants_external(model):
            # ORT's file points at the weights it read: keep them beside it while we read it back
            source = os.path.join(tmp, "model.onnx")
            io.save(model, source, external=True)
        else:
            source = io.to_bytes(model)
        # in the sandbox child: an optimizer that folds past the memory limit is one line, not a SIGKILL
        from graphtool import sandbox

        with sandbox.spilled(source) as arg:
            sandbox.call(f"optimizing this model at level {level}", sandbox.ort_optimize, arg, ORT_LEVELS[level], path)
        optimized = io.load(path)
        if any(t.external is not None for _, g in optimized.graphs() for t in g.initializers.values()):
            # weights ORT wrote beside the file: read them in before the folder disappears
            optimized = io.load_proto(io.parse_model(io.to_bytes(optimized)))
        return optimized


def layout_notes(model: Model) -> list[str]:
    """Warnings about ops that are not portable ONNX (contrib ops, CPU-specific layouts)."""
    notes = []
    hist = op_histogram(model)
    contrib = sum(n for d, ops in hist.items() if d == "com.microsoft" for n in ops.values())
    nchwc = sum(n for d, ops in hist.items() if d == "com.microsoft.nchwc" for n in ops.values())
    other = sorted(d for d in hist if d not in ("ai.onnx", "com.microsoft", "com.microsoft.nchwc"))
    if contrib:
        notes.append(f"{contrib} com.microsoft contrib ops: run only in onnxruntime")
    if nchwc:
        notes.append(f"{nchwc} com.microsoft.nchwc ops: NCHWc blocked layout chosen for this machine's CPU "
                     "(hardware-specific; the file is not portable across CPUs)")
    if other:
        notes.append("other non-standard domains: " + ", ".join(other))
    return notes


# --------------------------------------------------------------------------- fusions side by side


def compare_fusions(ort: Trace, ours: Trace) -> dict[str, list[dict[str, Any]]]:
    """Rewrites (fusions, replacements, expansions) found in one graph and not the other,
    grouped by pattern.

    An ORT rewrite counts as done by graphtool when one graphtool node stands for the same
    original ops or a superset of them; when graphtool fused only some of them, the entry says
    what graphtool did instead (``graphtool_did``).
    """
    def rewrites(trace: Trace) -> list[Fusion]:
        return [f for f in trace.fusions if f.kind in ("fused", "replaced", "expanded")]

    ort_f, our_f = rewrites(ort), rewrites(ours)

    def owner_map(fusions: list[Fusion]) -> dict[int, Fusion]:
        table: dict[int, Fusion] = {}
        for f in fusions:
            for i in f.absorbed:
                table.setdefault(i, f)
        return table

    our_owner, ort_owner = owner_map(our_f), owner_map(ort_f)

    def missing(fusions: list[Fusion], other: dict[int, Fusion]) -> tuple[list[Fusion], dict[int, list[str]]]:
        left: list[Fusion] = []
        instead: dict[int, list[str]] = {}
        for f in fusions:
            owners = {id(other[i]): other[i] for i in f.absorbed if i in other}
            if len(owners) == 1 and all(i in other for i in f.absorbed):
                continue  # the other side fused the same ops (or more) into one node
            left.append(f)
            instead[id(f)] = sorted({o.pattern for o in owners.values()})
        return left, instead

    ort_only, ort_instead = missing(ort_f, our_owner)
    our_only, our_instead = missing(our_f, ort_owner)
    return {
        "ort": _group(ort_f),
        "graphtool": _group(our_f),
        "ort_only": _group(ort_only, lambda f: {"graphtool_did": "; ".join(ort_instead[id(f)])}),
        "graphtool_only": _group(our_only, lambda f: {"ort_did": "; ".join(our_instead[id(f)])}),
    }


# --------------------------------------------------------------------------- histograms and outputs


def _flat(hist: dict[str, dict[str, int]]) -> dict[tuple[str, str], int]:
    return {(d, op): n for d, ops in hist.items() for op, n in ops.items()}


def histogram_diff(ort_hist: dict[str, dict[str, int]], our_hist: dict[str, dict[str, int]]) -> list[dict[str, Any]]:
    """Every (domain, op) whose count differs; ``only`` names the side that alone has it."""
    a, b = _flat(ort_hist), _flat(our_hist)
    rows = []
    for key in sorted(set(a) | set(b)):
        if a.get(key, 0) != b.get(key, 0):
            only = "ort" if key not in b else "graphtool" if key not in a else None
            rows.append({"domain": key[0], "op_type": key[1], "ort": a.get(key, 0), "graphtool": b.get(key, 0),
                         "only": only})
    return rows


def output_diffs(models: dict[str, Model], seed: int = 0, feeds: dict[str, np.ndarray] | None = None,
                 input_shapes: dict[str, list[int]] | None = None) -> dict[str, dict[str, Any]]:
    """Max abs/rel differences between the outputs of each pair of models, on the same inputs.

    Every model runs with ORT's optimizations off, so an optimized file runs as it was written.
    Keys of ``models``: "original", "ort", "graphtool"; result keys: "ort_vs_graphtool",
    "ort_vs_original", "graphtool_vs_original".
    """
    sessions = {k: make_session(m) for k, m in models.items()}
    if feeds is None:
        feeds = random_inputs(sessions["original"], seed, input_shapes)
    results: dict[str, dict[str, Any]] = {}
    for key, sess in sessions.items():
        names = [o.name for o in sess.get_outputs()]
        results[key] = dict(zip(names, sess.run(None, feeds_for(sess, feeds, seed))))
    pairs = [("ort", "graphtool"), ("ort", "original"), ("graphtool", "original")]
    out: dict[str, dict[str, Any]] = {}
    for a, b in pairs:
        if a not in results or b not in results:
            continue
        diffs = []
        for name, ref in results[b].items():
            if name not in results[a]:
                diffs.append({"name": name, "max_abs": None, "max_rel": None, "ok": False,
                              "reason": f"output missing from {a}"})
                continue
            diffs.append(compare_arrays(name, ref, results[a][name]).as_dict())
        for d in diffs:  # JSON has no infinity: null means "not comparable" (see JSON_SCHEMA)
            for key in ("max_abs", "max_rel"):
                d[key] = d[key] if d[key] is not None and np.isfinite(d[key]) else None
        out[f"{a}_vs_{b}"] = {
            "max_abs": _worst(d["max_abs"] for d in diffs),
            "max_rel": _worst(d["max_rel"] for d in diffs),
            "ok": all(d["ok"] for d in diffs),
            "outputs": diffs,
        }
    return out


def _worst(values: Iterable[float | None]) -> float | None:
    """The largest difference; None (not comparable) wins over any number."""
    worst: float | None = 0.0
    for v in values:
        if v is None:
            return None
        worst = max(worst, v)
    return worst


def feeds_for(sess: Any, feeds: dict[str, np.ndarray], seed: int = 0) -> dict[str, np.ndarray]:
    """``feeds`` restricted to the session's inputs, with random values for inputs it lacks.

    ORT's optimized file of an IR<4 model keeps declaring as graph inputs the initializers it
    folded away; nothing reads them, but a session still requires a value for each.
    """
    wanted = [i.name for i in sess.get_inputs()]
    chosen = {k: feeds[k] for k in wanted if k in feeds}
    if len(chosen) < len(wanted):
        extra = random_inputs(sess, seed)
        chosen.update({k: extra[k] for k in wanted if k not in chosen})
    return chosen


# --------------------------------------------------------------------------- one level


def _side(model: Model, trace: Trace | None = None) -> dict[str, Any]:
    side: dict[str, Any] = {"nodes": model.node_count(), "op_histogram": op_histogram(model)}
    if trace is not None:
        side["removed"] = dict(trace.removed.most_common())
        side["untraced"] = [{"domain": d or "ai.onnx", "op_type": o, "name": n} for d, o, n in trace.inserted]
    return side


def compare_level(original_model: Model, optimized_model: Model, level: int, target: str = "onnx",
                  ort_model: Model | None = None, seed: int = 0,
                  feeds: dict[str, np.ndarray] | None = None) -> dict[str, Any]:
    """ORT's graph at ``level`` beside graphtool's ``optimized_model`` (optimized at that level).

    This is what ``graphtool optimize --compare-ort`` prints (through ``format_compare``) and
    what ``graphtool compare`` builds once per level. ``ort_model`` can be passed when the caller
    already has ORT's graph; otherwise ORT optimizes ``original_model`` here.
    """
    if ort_model is None:
        ort_model = ort_optimized(original_model, level)
    ort_trace = trace_fusions(original_model, ort_model)
    our_trace = trace_fusions(original_model, optimized_model)
    ort_side, our_side = _side(ort_model, ort_trace), _side(optimized_model, our_trace)
    return {
        "level": level,
        "ort_level": ORT_LEVELS[level],
        "graphtool_level": level,
        "target": target,
        "original_nodes": original_model.node_count(),
        "ort": ort_side,
        "graphtool": our_side,
        "op_diff": histogram_diff(ort_side["op_histogram"], our_side["op_histogram"]),
        "fusions": compare_fusions(ort_trace, our_trace),
        "outputs": output_diffs({"original": original_model, "ort": ort_model, "graphtool": optimized_model},
                                seed=seed, feeds=feeds),
        "notes": layout_notes(ort_model),
    }


# --------------------------------------------------------------------------- latency


def _percentile(samples: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(samples), q))


def measure_latency(variants: list[tuple[str, Model]], ort_levels: Iterable[str] = LATENCY_ORT_LEVELS,
                    runs: int = 20, warmup: int = 3, feeds: dict[str, np.ndarray] | None = None,
                    seed: int = 0, baseline: tuple[str, str] | None = None) -> dict[str, Any]:
    """Median and p90 latency (ms, 1 intra-op thread) of each model under each ORT level.

    Runs are interleaved — run i of every session before run i+1 of any — so a noisy machine
    slows all rows alike and the speed-ups (over ``baseline``, by default the first model with
    ORT off) stay comparable within one call.
    """
    levels = list(ort_levels)
    rows: list[dict[str, Any]] = []
    sessions = []
    for label, model in variants:
        data = io.to_bytes(model)
        for level in levels:
            sess = make_session(data, level, threads=1, local=True)  # timed here, not in the sandbox
            sessions.append(sess)
            rows.append({"model": label, "ort_level": level, "samples": []})
    if feeds is None:
        feeds = random_inputs(sessions[0], seed)
    per_session_feeds = [feeds_for(sess, feeds, seed) for sess in sessions]
    for sess, f in zip(sessions, per_session_feeds):
        for _ in range(warmup):
            sess.run(None, f)
    for _ in range(runs):
        for sess, f, row in zip(sessions, per_session_feeds, rows):
            t0 = time.perf_counter()
            sess.run(None, f)
            row["samples"].append((time.perf_counter() - t0) * 1000.0)
    base_key = baseline or (variants[0][0], levels[0])
    base = next(statistics.median(r["samples"]) for r in rows if (r["model"], r["ort_level"]) == base_key)
    for row in rows:
        samples = row.pop("samples")
        row["median_ms"] = round(statistics.median(samples), 4)
        row["p90_ms"] = round(_percentile(samples, 90), 4)
        row["speedup"] = round(base / statistics.median(samples), 3) if samples else None
    return {"runs": runs, "warmup": warmup, "threads": 1, "baseline": {"model": base_key[0], "ort_level": base_key[1]},
            "rows": rows}


# --------------------------------------------------------------------------- whole report


def graphtool_level_for(level: int, target: str) -> int:
    """graphtool's level that matches ORT's: 3 only once graphtool has level-3 passes."""
    from graphtool.pass_manager import load_builtin_and_plugins

    top = max((cls.level for cls in load_builtin_and_plugins().values()
               if cls.target in ("onnx", target) and not cls.analysis), default=1)
    return min(level, max(2, min(top, 3)))


def compare(model: Model, levels: Iterable[int] = (1, 2, 3), target: str = "onnx", latency: bool = False,
            runs: int = 20, warmup: int = 3, seed: int = 0, path: str | None = None,
            feeds: dict[str, np.ndarray] | None = None,
            on_step: Callable[[str], None] | None = None,
            models: dict[int, tuple[Model, Model]] | None = None) -> dict[str, Any]:
    """The ``graphtool compare`` report (schema ``graphtool.compare/1``, see ``JSON_SCHEMA``).

    ``models``, when given, receives {level: (ORT's graph, graphtool's graph)} for callers that
    render the graphs themselves (``--html``).
    """
    from graphtool.optimize import optimize

    levels = sorted(set(levels))
    ours: dict[int, Model] = {}
    report: dict[str, Any] = {
        "schema": SCHEMA,
        "model": path,
        "target": target,
        "original": _side(model),
        "levels": [],
        "latency": None,
    }
    for level in levels:
        our_level = graphtool_level_for(level, target)
        if our_level not in ours:
            if on_step:
                on_step(f"graphtool optimize level {our_level}")
            ours[our_level] = optimize(model, level=our_level, target=target)[0]
        if on_step:
            on_step(f"onnxruntime level {level} ({ORT_LEVELS[level]})")
        ort_model = ort_optimized(model, level)
        entry = compare_level(model, ours[our_level], level, target, ort_model=ort_model, seed=seed, feeds=feeds)
        if models is not None:
            models[level] = (ort_model, ours[our_level])
        entry["graphtool_level"] = our_level  # L3 compares against graphtool's L2 until it has L3 passes
        report["levels"].append(entry)
    if latency:
        if on_step:
            on_step("latency")
        variants = [("original", model)] + [(f"graphtool L{lv}", m) for lv, m in sorted(ours.items())]
        ort_levels = ["off"] + [ORT_LEVELS[lv] for lv in levels]
        report["latency"] = measure_latency(variants, ort_levels, runs=runs, warmup=warmup, feeds=feeds, seed=seed)
    return report


# --------------------------------------------------------------------------- text


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


# --------------------------------------------------------------------------- HTML


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

    graphtool.diff matches the two graphs; graphtool.render.dot draws the changed nodes (added
    green, removed red, changed amber, with one hop of context) as an inline SVG, whose text dot
    and ``set_titles`` escape. Without those modules, or without Graphviz, or past
    ``max_picture_changes`` changed nodes (dot would take minutes), the diff's text summary is
    shown instead, escaped in a <pre>. Returns [] when graphtool.diff is not available.
    """
    try:
        from graphtool.diff import diff
        from graphtool.diff_text import format_diff
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
