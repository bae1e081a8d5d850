"""Latency of QDQ CNNs: graphtool level 2 --target ort under onnxruntime *basic* vs the original under
onnxruntime *all* (issue 34: within 3% or faster).

    .venv/bin/python bench/qdq_latency.py [--models a,b] [--runs 60] [--dir /work/cache/qdq/models]

One process, one intra-op thread. Per model both sessions are created, outputs compared, then
warmed up and run **interleaved** (A, B, A, B, ...) ``--runs`` times on one random input, so load
from other processes falls on both alike. Medians of wall time (``perf_counter``) and of this
process's CPU time (``process_time``, what the run cost us on a shared machine) are reported as
ratios graphtool/original; < 1 is faster.
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
                                     "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}[level]
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


def measure(name: str, path: str, runs: int, tmp: str) -> dict:
    model, report, _ = optimize(io.load(path), level=2, target="ort", in_place=True)
    out = os.path.join(tmp, name + ".gt.onnx")
    io.save(model, out)
    a, b = _session(path, "all"), _session(out, "basic")
    rng = np.random.default_rng(0)
    inp = a.get_inputs()[0]
    shape = [d if isinstance(d, int) and d > 0 else 1 for d in inp.shape]
    if len(shape) == 4 and shape[1] == 3 and shape[2] == 1:  # dynamic H, W (PP-OCR's classifier): its own size
        shape[2:] = [48, 192]
    feed = {inp.name: rng.standard_normal(shape).astype(np.float32)}
    ra, rb = a.run(None, feed), b.run(None, feed)
    diff = max(float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)))) for x, y in zip(ra, rb))
    for _ in range(5):
        a.run(None, feed)
        b.run(None, feed)
    wall = {"a": [], "b": []}
    cpu = {"a": [], "b": []}
    for _ in range(runs):
        for key, sess in (("a", a), ("b", b)):
            w, c = time.perf_counter(), time.process_time()
            sess.run(None, feed)
            wall[key].append(time.perf_counter() - w)
            cpu[key].append(time.process_time() - c)
    med = {k: statistics.median(v) for k, v in wall.items()}
    cmed = {k: statistics.median(v) for k, v in cpu.items()}
    return {"model": name, "nodes": [report.nodes_before, report.nodes_after], "max_abs": diff,
            "orig_all_ms": med["a"] * 1e3, "gt_basic_ms": med["b"] * 1e3, "wall_ratio": med["b"] / med["a"],
            "cpu_ratio": cmed["b"] / cmed["a"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/work/cache/qdq/models")
    ap.add_argument("--models")
    ap.add_argument("--runs", type=int, default=60)
    args = ap.parse_args()
    with open(os.path.join(args.dir, "corpus.json")) as handle:
        index = json.load(handle)
    names = args.models.split(",") if args.models else [n for n, i in index.items() if i["kind"] == "qdq" and "bert" not in n]
    print("| model | nodes before → gt L2 ort | orig ORT all ms | gt L2 ort under ORT basic ms | wall ratio | cpu ratio | max abs |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            r = measure(name, os.path.join(args.dir, name + ".onnx"), args.runs, tmp)
            print(f"| {name} | {r['nodes'][0]} → {r['nodes'][1]} | {r['orig_all_ms']:.2f} | {r['gt_basic_ms']:.2f} | "
                  f"{r['wall_ratio']:.3f} | {r['cpu_ratio']:.3f} | {r['max_abs']:.3g} |", flush=True)


if __name__ == "__main__":
    main()
