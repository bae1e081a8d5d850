"""Kernel by kernel: where a QDQ CNN's time goes, graphtool L2 --target ort under ORT basic beside
the original under ORT all (issue 34's latency bar), from onnxruntime's own profiler.

    .venv/bin/python bench/qdq_profile.py --models resnet18_qdq,resnet18_qdq_pc [--runs 100]

One intra-op thread. Both sessions run ``--runs`` times interleaved with profiling on (after warm-up
runs, dropped from the profile by their order); per op type (domain-qualified) the median of
per-run kernel time summed over the nodes of that type is printed, so a kernel that is slower in
one model than in the other shows in its row, and the Transpose row says what the entry Transpose of
the channels-last layout costs.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from graphtool import io  # noqa: E402
from graphtool.optimize import optimize  # noqa: E402

WARMUP = 5


def _session(path: str, level: str, prefix: str):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = {"basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
                                     "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}[level]
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    opts.enable_profiling = True
    opts.profile_file_prefix = prefix
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


def _medians(profile: str) -> dict[str, float]:
    """op type -> median per-run kernel microseconds over the measured runs (warm-up dropped)."""
    with open(profile) as handle:
        events = json.load(handle)
    measured = _split_runs(events)[WARMUP:]
    ops = sorted({op for r in measured for op in r})
    return {op: statistics.median(r.get(op, 0) for r in measured) for op in ops} | {
        "(total of kernels)": statistics.median(sum(r.values()) for r in measured)}


def _split_runs(events: list[dict]) -> list[collections.Counter]:
    """Node kernel times grouped by run: a run's node events come before its model_run event ends."""
    runs, current = [], collections.Counter()
    for event in sorted(events, key=lambda e: e.get("ts", 0)):
        if event.get("cat") == "Node" and event.get("name", "").endswith("_kernel_time"):
            current[event["args"].get("op_name", "?")] += event["dur"]
        elif event.get("cat") == "Session" and event.get("name") == "model_run":
            runs.append(current)
            current = collections.Counter()
    return runs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/work/cache/qdq/models")
    ap.add_argument("--models", default="resnet18_qdq,resnet18_qdq_pc")
    ap.add_argument("--runs", type=int, default=100)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            path = os.path.join(args.dir, name + ".onnx")
            model, _, _ = optimize(io.load(path), level=2, target="ort", in_place=True)
            out = os.path.join(tmp, name + ".gt.onnx")
            io.save(model, out)
            import onnxruntime as ort

            inp = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).get_inputs()[0]
            shape = [d if isinstance(d, int) and d > 0 else 1 for d in inp.shape]
            feed = {inp.name: np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
            a = _session(path, "all", os.path.join(tmp, "orig"))
            b = _session(out, "basic", os.path.join(tmp, "gt"))
            for _ in range(WARMUP + args.runs):  # interleaved: load from others falls on both alike
                a.run(None, feed)
                b.run(None, feed)
            orig, ours = _medians(a.end_profiling()), _medians(b.end_profiling())
            print(f"\n{name}: median per-run kernel µs over {args.runs} runs (1 thread)")
            print("| op | original under ORT all | graphtool L2 ort under ORT basic | ratio |")
            print("|---|---|---|---|")
            for op in sorted(set(orig) | set(ours), key=lambda o: -max(orig.get(o, 0), ours.get(o, 0))):
                a, b = orig.get(op, 0.0), ours.get(op, 0.0)
                print(f"| {op} | {a:.0f} | {b:.0f} | {b / a:.3f} |" if a else f"| {op} | – | {b:.0f} | – |", flush=True)


if __name__ == "__main__":
    main()
