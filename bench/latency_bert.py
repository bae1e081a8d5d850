"""Latency of the BERT fixtures: original vs graphtool's levels, each under every ORT level.

    .venv/bin/python bench/latency_bert.py [--runs 300] [--warmup 10] [fixtures/torch/bert_ts.onnx ...]

Prints one markdown table per model: median and p90 (ms, 1 intra-op thread) and the speed-up of
each row over "original, ORT off". Runs are interleaved across all sessions (run i of every
session before run i+1 of any), so machine noise hits every row alike: compare rows within one
table, not across invocations. Inputs are the fixture's recorded ones (valid input_ids and
attention_mask); every graphtool variant is first checked against the original on them.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from graphtool import io  # noqa: E402
from graphtool.optimize import optimize  # noqa: E402
from graphtool.compare import measure_latency  # noqa: E402
from graphtool.verify import verify  # noqa: E402

DEFAULT_MODELS = [os.path.join(ROOT, "fixtures", "torch", f"bert_{kind}.onnx") for kind in ("ts", "dynamo")]
ORT_LEVELS = ["off", "basic", "extended", "all"]
VARIANTS = [("graphtool L1", 1, "onnx"), ("graphtool L2", 2, "onnx"), ("graphtool L2 --target ort", 2, "ort")]


def bench(path: str, runs: int, warmup: int) -> str:
    model = io.load(path)
    inputs_path = path[: -len(".onnx")] + ".inputs.npz"
    feeds = dict(np.load(inputs_path)) if os.path.exists(inputs_path) else None
    variants = [("original", model)]
    notes = []
    for label, level, target in VARIANTS:
        t0 = time.perf_counter()
        optimized = optimize(model, level=level, target=target)[0]
        seconds = time.perf_counter() - t0
        check = verify(model, optimized, feeds=feeds)
        notes.append(f"{label}: {model.node_count()} → {optimized.node_count()} nodes in {seconds:.2f}s; {check.summary()}")
        variants.append((label, optimized))
    lat = measure_latency(variants, ORT_LEVELS, runs=runs, warmup=warmup, feeds=feeds)
    lines = [f"### {os.path.relpath(path, ROOT)}", "",
             f"{runs} interleaved runs after {warmup} warm-up, 1 thread; speed-up over original with ORT off.", ""]
    lines += [f"- {n}" for n in notes]
    lines += ["", "| model | ORT level | median ms | p90 ms | speed-up |", "|---|---|---:|---:|---:|"]
    for row in lat["rows"]:
        lines.append(f"| {row['model']} | {row['ort_level']} | {row['median_ms']:.3f} | {row['p90_ms']:.3f} | "
                     f"**{row['speedup']:.2f}x** |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=DEFAULT_MODELS)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=10)
    args = parser.parse_args()
    for path in args.models:
        print(bench(path, args.runs, args.warmup))
        print()


if __name__ == "__main__":
    main()
