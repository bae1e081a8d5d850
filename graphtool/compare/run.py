"""The onnxruntime side of compare: ORT's optimized graph at a level, outputs of several models
on the same inputs, and interleaved latency."""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from typing import Any, Iterable

import numpy as np

from graphtool import io
from graphtool.compare.schema import LATENCY_ORT_LEVELS, ORT_LEVELS
from graphtool.inspect import op_histogram
from graphtool.ir.model import Model
from graphtool.runtime import make_session, random_inputs, sandbox
from graphtool.verify import ATOL, RTOL, judge_output, low_precision_inside, quantized_outputs


def ort_optimized(model: Model, level: int) -> Model:
    """The graph ORT runs at ``level`` (1 basic, 2 extended, 3 all), read back into the IR."""
    return ort_optimized_session(model, level)[0]


def ort_optimized_session(model: Model, level: int) -> tuple[Model, Any]:
    """ORT's graph at ``level`` and the session that made it, which runs that very graph: its
    outputs need no second session (on 200k nodes one costs ORT ~5 s to open).

    ORT serializes the graph after its graph transformers ran, before execution providers
    partition it; weights are written inline, so the temp folder can go once the file is read.
    The session lives in the sandbox child when the CLI sandboxes sessions: an optimizer that
    folds past the memory limit is one line, not a SIGKILL.
    """
    with tempfile.TemporaryDirectory(prefix="graphtool-ort-") as tmp:
        if not io.wants_external(model):
            return _ort_optimized_source(io.to_bytes(model), level, tmp)
        # ORT's file points at the weights it read: keep them beside it while we read it back
        source = os.path.join(tmp, "model.onnx")
        io.save(model, source, external=True)
        return _ort_optimized_source(source, level, tmp)


def _ort_optimized_source(source: bytes | str, level: int, tmp: str) -> tuple[Model, Any]:
    """``ort_optimized_session`` for the model's bytes, or its path in ``tmp`` when its weights are
    external; ORT writes its graph into ``tmp`` too."""
    path = os.path.join(tmp, "ort_optimized.onnx")
    what = f"optimizing this model at level {level}"
    if sandbox.sessions_enabled():
        with sandbox.spilled(source) as arg:
            session: Any = sandbox.RemoteSession(arg, ORT_LEVELS[level], 1, path, what=what)
    else:
        session = make_session(source, ORT_LEVELS[level], optimized_path=path)
    optimized = io.load(path)
    if any(t.external is not None for _, g in optimized.graphs() for t in g.initializers.values()):
        # weights ORT wrote beside the file: read them in before the folder disappears
        optimized = io.load_proto(io.parse_model(io.to_bytes(optimized)))
    return optimized, session


def ort_job(model: Model, level: int, turn: int = 0) -> sandbox.Background:
    """``ort_optimized_session`` started now (a big model's in a child of its own, the
    ``turn``-th of ``sandbox.ORT_CHILDREN``), so ORT optimizes the model while graphtool does (on 200k
    nodes each takes seconds)."""
    return sandbox.Background(lambda: ort_optimized_session(model, level),
                              child=sandbox.child_for(sandbox.ORT_CHILDREN[turn % 2], model.node_count()))


def ort_job_from_file_bytes(data: bytes, nodes: int, level: int) -> sandbox.Background | None:
    """``ort_job`` for a model file's bytes as soon as they parse, before graphtool's IR of it is
    built (1.6 s of a 200k-node load, the head start ORT's optimizer needs on such a model);
    None for a model whose bytes may name external data (``location``): that one's weights must
    pass graphtool's checks first, and when sessions are not sandboxed."""
    if b"location" in data or not sandbox.sessions_enabled():
        return None

    def job() -> tuple[Model, Any]:
        with tempfile.TemporaryDirectory(prefix="graphtool-ort-") as tmp:
            return _ort_optimized_source(data, level, tmp)

    return sandbox.Background(job, child=sandbox.child_for(sandbox.ORT_CHILDREN[0], nodes))


class EarlyORT:
    """ORT's first level, started from ``io.load``'s ``parsed`` hook (``start``) and kept only
    for a model that loaded ``pristine()``: its bytes then say what graphtool's IR says."""

    def __init__(self, level: int) -> None:
        self.level = level
        self._job: sandbox.Background | None = None

    def start(self, data: bytes, proto: Any) -> None:
        self._job = ort_job_from_file_bytes(data, len(proto.graph.node), self.level)

    def job_for(self, model: Model) -> sandbox.Background | None:
        if self._job is not None and not model.pristine():
            self._job.cancel()
            self._job = None
        return self._job


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


# --------------------------------------------------------------------------- histograms and outputs


def output_diffs(models: dict[str, Model], seed: int = 0, feeds: dict[str, np.ndarray] | None = None,
                 input_shapes: dict[str, list[int]] | None = None,
                 known: dict[str, dict[str, Any]] | None = None,
                 sessions: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Max abs/rel differences between the outputs of each pair of models, on the same inputs.

    Every model runs with ORT's optimizations off, so an optimized file runs as it was written.
    Keys of ``models``: "original", "ort", "graphtool"; result keys: "ort_vs_graphtool",
    "ort_vs_original", "graphtool_vs_original". ``known``: outputs a model already gave on
    ``feeds`` (the original's, from input discovery), so no session is built for it again;
    ``sessions``: sessions already open for some keys (ORT's graph: the session that made it).
    """
    results: dict[str, dict[str, Any]] = dict(known or {}) if feeds is not None else {}
    opened = sessions or {}
    sessions = {k: opened[k] if k in opened else make_session(m) for k, m in models.items() if k not in results}
    if feeds is None:
        feeds = random_inputs(sessions["original"], seed, input_shapes)
    for key, sess in sessions.items():
        names = [o.name for o in sess.get_outputs()]
        results[key] = dict(zip(names, sess.run(None, feeds_for(sess, feeds, seed))))
    pairs = [("ort", "graphtool"), ("ort", "original"), ("graphtool", "original")]
    # the original's tolerances (verify's): quantization grids of its outputs, fp16/bf16 inside
    original = models.get("original")
    grids = quantized_outputs(original) if original is not None else {}
    inside = low_precision_inside(original) if original is not None else None
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
            diffs.append(judge_output(name, ref, results[a][name], RTOL, ATOL, inside, grids.get(name)).as_dict())
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
