"""Latency of QDQ CNNs: graphtool level 2 and level 3 --target ort under onnxruntime *basic* vs the
original under onnxruntime *all* (issue 34: within 3% or faster), beside the original under *extended*.

    .venv/bin/python bench/qdq_latency.py [--models a,b] [--runs 60] [--rounds 5] [--dir ...]

One process, one intra-op thread. Per model the sessions are created, outputs compared, then
warmed up and run **interleaved** (A, B, C, D, A, ...) ``--runs`` times per round on one random input,
so load from other processes falls on all alike; each round starts the rotation with another contender.
Per round the medians of wall time (``perf_counter``) and of this process's CPU time (``process_time``,
what the run cost us on a shared machine) give a ratio contender/original-under-all (< 1 is faster); the
table shows the median ratio over ``--rounds`` rounds and its range, so a reader sees the spread, not one
draw. ``--sessions N`` opens N sessions per contender and runs them in turn (two sessions of one file can
differ by 10-50 % for a whole run). Contenders: graphtool level 2 (ORT extended's NCHW kernels, channels-last
only where it adds no node) and level 3 (the channels-last layout) under ORT basic, and the original under
ORT extended (what level 2 mirrors).
Default rows: the corpus's QDQ CNNs but BERT and the light_* models (IR < 4: their initializers are
also graph inputs, which one random feed does not cover).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from graphtool import io  # noqa: E402
from graphtool.optimize import optimize  # noqa: E402


def _session(path: str, level: str):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = {"basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
                                     "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
                                     "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}[level]
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


def _optimized(path: str, out: str, level: int) -> tuple[int, int]:
    model, report, _ = optimize(io.load(path), level=level, target="ort", in_place=True)
    io.save(model, out)
    return report.nodes_before, report.nodes_after


def _feed(sess) -> dict:
    rng = np.random.default_rng(0)
    inp = sess.get_inputs()[0]
    shape = [d if isinstance(d, int) and d > 0 else 1 for d in inp.shape]
    dynamic = [not (isinstance(d, int) and d > 0) for d in inp.shape]
    if len(shape) == 4 and shape[1] == 3 and dynamic[2] and dynamic[3] and inp.name == "images":
        shape[2:] = [320, 320]  # a YOLO export's image (NudeNet's detector: 320)
    elif len(shape) == 4 and shape[1] == 3 and shape[2] == 1:  # dynamic H, W (PP-OCR's classifier): its own size
        shape[2:] = [48, 192]
    return {inp.name: rng.standard_normal(shape).astype(np.float32)}


def _max_abs(ra: list, rb: list) -> float:
    return max(float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)))) for x, y in zip(ra, rb))


class _Sessions:
    """Several sessions of one model and level, run in turn: two sessions of the same file can
    differ by 10-50 % for a whole run (where the allocator placed their weights), more than the bar."""

    def __init__(self, path: str, level: str, count: int):
        self.sessions = [_session(path, level) for _ in range(count)]
        self.turn = 0

    def run(self, names, feed):
        sess = self.sessions[self.turn % len(self.sessions)]
        self.turn += 1
        return sess.run(names, feed)

    def get_inputs(self):
        return self.sessions[0].get_inputs()


CONTENDERS = {"gt-L2@basic": 2, "gt-L3@basic": 3, "orig@extended": 0}


def measure(name: str, path: str, runs: int, rounds: int, tmp: str, sessions: int = 1) -> dict:
    contenders = {"orig@all": _Sessions(path, "all", sessions)}
    nodes: dict[str, int] = {}
    for key, level in CONTENDERS.items():
        out = path
        if level:
            out = os.path.join(tmp, f"{name}.L{level}.onnx")
            nodes["before"], nodes[key] = _optimized(path, out, level)
        contenders[key] = _Sessions(out, "basic" if level else "extended", sessions)
    feed = _feed(contenders["orig@all"])
    ref = contenders["orig@all"].run(None, feed)
    diffs = {k: _max_abs(ref, s.run(None, feed)) for k, s in contenders.items()}
    for _ in range(5):
        for sess in contenders.values():
            sess.run(None, feed)
    ratios: dict[str, dict[str, list[float]]] = {k: {"wall": [], "cpu": []} for k in contenders if k != "orig@all"}
    ms: dict[str, list[float]] = {k: [] for k in contenders}
    keys = list(contenders)
    for r in range(rounds):
        wall = {k: [] for k in contenders}
        cpu = {k: [] for k in contenders}
        order = keys[r % len(keys):] + keys[:r % len(keys)]  # each round starts with another: no seat is favoured
        for _ in range(runs):
            for key in order:
                sess = contenders[key]
                w, c = time.perf_counter(), time.process_time()
                sess.run(None, feed)
                wall[key].append(time.perf_counter() - w)
                cpu[key].append(time.process_time() - c)
        med = {k: statistics.median(v) for k, v in wall.items()}
        cmed = {k: statistics.median(v) for k, v in cpu.items()}
        for k in ms:
            ms[k].append(med[k] * 1e3)
        for k in ratios:
            ratios[k]["wall"].append(med[k] / med["orig@all"])
            ratios[k]["cpu"].append(cmed[k] / cmed["orig@all"])
    return {"model": name, "nodes": nodes, "max_abs": diffs, "ms": ms, "ratios": ratios}


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}–{max(values):.3f})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/work/cache/qdq/models")
    ap.add_argument("--models")
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sessions", type=int, default=1, help="sessions per contender, run in turn")
    ap.add_argument("--json")
    args = ap.parse_args()
    with open(os.path.join(args.dir, "corpus.json")) as handle:
        index = json.load(handle)
    names = args.models.split(",") if args.models else [n for n, i in index.items() if i["kind"] == "qdq" and "bert" not in n and not n.startswith("light_")]
    print(f"{args.rounds} rounds × {args.runs} interleaved runs, {args.sessions} session(s) per contender in turn; "
          "ratio = wall time / the original under ORT all, median over rounds (range)", flush=True)
    head = ("| model | nodes before → gt L2 / L3 | orig ORT all ms | gt L2 @basic | gt L3 @basic | orig @extended "
            "| L3 cpu ratio | max abs L2 / L3 |")
    print(head)
    print("|---" * (head.count("|") - 1) + "|")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            r = measure(name, os.path.join(args.dir, name + ".onnx"), args.runs, args.rounds, tmp, args.sessions)
            rows.append(r)
            n, q, d = r["nodes"], r["ratios"], r["max_abs"]
            print(f"| {name} | {n['before']} → {n['gt-L2@basic']} / {n['gt-L3@basic']} | "
                  f"{statistics.median(r['ms']['orig@all']):.2f} | {_spread(q['gt-L2@basic']['wall'])} | "
                  f"{_spread(q['gt-L3@basic']['wall'])} | {_spread(q['orig@extended']['wall'])} | "
                  f"{_spread(q['gt-L3@basic']['cpu'])} | {d['gt-L2@basic']:.3g} / {d['gt-L3@basic']:.3g} |", flush=True)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=1)


if __name__ == "__main__":
    main()
