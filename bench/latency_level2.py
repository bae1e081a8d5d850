"""Latency where level-2 fusion pays: a BERT-base encoder, original vs ``optimize(level=2, target="ort")``.

    /work/torchenv/bin/python fixtures/make_torch_fixtures.py --bert-base /tmp/bertbase   # once
    python bench/latency_level2.py [--dir /tmp/bertbase] [--runs 40] [--models bert_base_ts,bert_base_dynamo]

For each export, both models run in this one process under onnxruntime at every optimization
level (off / basic / extended / all), one intra-op thread, on the export's own sample inputs
(batch 2, sequence 128). Each (model, level) gets warm-up runs, then ``--runs`` timed runs; the
table shows the median in milliseconds and, per level, graphtool's speed-up over the original at
that same level. The bar (issue: level-2 fusions): graphtool's result at ORT extended is faster
than the original at ORT extended. Outputs are checked equal (max abs diff) before timing.
"""

from __future__ import annotations

import argparse
import gc
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
from graphtool.runtime import make_session  # noqa: E402

LEVELS = ("off", "basic", "extended", "all")


def median_ms(path: str, level: str, feeds: dict[str, np.ndarray], runs: int, warmup: int = 5) -> tuple[float, list]:
    sess = make_session(path, level, threads=1)
    for _ in range(warmup):
        out = sess.run(None, feeds)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - start) * 1000)
    del sess
    gc.collect()
    return statistics.median(times), out


def bench(name: str, src: str, feeds: dict[str, np.ndarray], runs: int, tmp: str) -> None:
    start = time.perf_counter()
    model, report, _ = optimize(io.load(src), level=2, target="ort", in_place=True)
    fused = os.path.join(tmp, f"{name}.level2-ort.onnx")
    io.save(model, fused)
    seconds = time.perf_counter() - start
    counts: dict[str, int] = {}
    for node in model.graph.nodes():
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    del model
    gc.collect()
    print(f"\n### {name}: {report.nodes_before} → {report.nodes_after} nodes in {seconds:.1f} s "
          f"(Attention {counts.get('Attention', 0)}, SkipLayerNormalization {counts.get('SkipLayerNormalization', 0)}, "
          f"BiasGelu {counts.get('BiasGelu', 0)})\n")
    print("| ORT level | original ms | graphtool L2-ort ms | speed-up | max abs diff |")
    print("|---|---|---|---|---|")
    for level in LEVELS:
        ref_ms, ref_out = median_ms(src, level, feeds, runs)
        gt_ms, gt_out = median_ms(fused, level, feeds, runs)
        diff = max(float(np.max(np.abs(a - b))) for a, b in zip(ref_out, gt_out))
        gain = (ref_ms - gt_ms) / ref_ms * 100
        print(f"| {level} | {ref_ms:.1f} | {gt_ms:.1f} | {gain:+.1f}% | {diff:.1e} |", flush=True)
    os.remove(fused)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="/tmp/bertbase")
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--models", default="bert_base_ts,bert_base_dynamo")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            src = os.path.join(args.dir, f"{name}.onnx")
            if not os.path.exists(src):
                print(f"{src} missing: run fixtures/make_torch_fixtures.py --bert-base {args.dir}")
                continue
            feeds = dict(np.load(os.path.join(args.dir, f"{name}.inputs.npz")))
            bench(name, src, feeds, args.runs, tmp)


if __name__ == "__main__":
    main()
