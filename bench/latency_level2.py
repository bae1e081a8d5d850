"""Latency where level-2 fusion should pay: a BERT-base encoder, original vs ``optimize(level=2, target="ort")``.

    /work/torchenv/bin/python fixtures/make_torch_fixtures.py --bert-base /tmp/bertbase   # once
    python bench/latency_level2.py [--dir /tmp/bertbase] [--runs 40] [--models bert_base_ts] [--peers]

First a kernel check: one residual + LayerNorm at BERT-base size as Add, Add, LayerNormalization and
as com.microsoft SkipLayerNormalization. Then for each export, the original and graphtool's level-2
``--target ort`` result (also with only SkipLayerNormalization skipped — what attention fusion itself
gains — and, as a control, with the attention / SkipLayerNormalization / EmbedLayerNormalization
fusions skipped) run in this one process under onnxruntime at every
optimization level (off / basic / extended / all), one intra-op thread, on the export's own sample
inputs (batch 2, sequence 128). Per level the variants' sessions are created together and their
runs are **interleaved** (A, B, C, A, B, C, ...) after warm-up, so load from other processes falls on
all of them alike. Two medians per cell over ``--runs`` runs:

* wall — ``time.perf_counter`` around ``session.run``;
* cpu  — ``time.process_time`` around it: what the run cost this process, which stays meaningful
  on a shared machine where wall time mostly measures the neighbours.

``--peers`` adds onnxscript's ``optimize_for_ort`` and ORT's transformer optimizer (opt_level 0) as
extra variants. Outputs are compared with the original's (max abs diff) before timing.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import statistics
import sys
import tempfile
import time
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from graphtool import io  # noqa: E402
from graphtool.optimize import optimize  # noqa: E402
from graphtool.runtime import make_session  # noqa: E402

LEVELS = ("off", "basic", "extended", "all")
# The fusions whose onnxruntime CPU kernels measured slower than the unfused MLAS path here
# (com.microsoft Attention / SkipLayerNormalization; EmbedLayerNormalization lets ORT infer the
# shapes it needs to run its own SkipLayerNormFusion at extended).
LATENCY_SKIP = ("fuse-attention-ort", "ort-skip-layer-norm", "ort-embed-layer-norm")
# Only SkipLayerNormalization off: isolates what the attention fusion itself gains.
SLN_SKIP = ("ort-skip-layer-norm",)


def build_variants(name: str, src: str, tmp: str, peers: bool) -> dict[str, str]:
    variants = {"original": src}
    for label, skip in (("graphtool L2-ort", ()), ("graphtool L2-ort, SkipLayerNorm off", SLN_SKIP),
                        ("graphtool L2-ort, contrib attention/LN off", LATENCY_SKIP)):
        start = time.perf_counter()
        model, report, _ = optimize(io.load(src), level=2, target="ort", skip=skip, in_place=True)
        path = os.path.join(tmp, f"{name}.{len(variants)}.onnx")
        io.save(model, path)
        counts: dict[str, int] = {}
        for node in model.graph.nodes():
            counts[node.op_type] = counts.get(node.op_type, 0) + 1
        print(f"- {label}: {report.nodes_before} → {report.nodes_after} nodes in {time.perf_counter() - start:.1f} s; "
              + ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])[:8]))
        variants[label] = path
        del model
        gc.collect()
    if peers:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            logging.disable(logging.WARNING)
            import onnx_ir as ir
            from onnxscript.rewriter.ort_fusions import optimize_for_ort
            from onnxruntime.transformers.optimizer import optimize_model

            m = ir.load(src)
            optimize_for_ort(m)
            path = os.path.join(tmp, f"{name}.onnxscript.onnx")
            ir.save(m, path, external_data=os.path.basename(path) + ".data")
            variants["onnxscript optimize_for_ort"] = path
            om = optimize_model(src, model_type="bert", num_heads=12, hidden_size=768, opt_level=0)
            path = os.path.join(tmp, f"{name}.ortT.onnx")
            om.save_model_to_file(path, use_external_data_format=True)
            variants["ORT transformers opt0"] = path
            logging.disable(logging.NOTSET)
    return variants


def measure(variants: dict[str, str], level: str, feeds: dict[str, np.ndarray], runs: int, warmup: int = 3):
    sessions = {k: make_session(p, level, threads=1) for k, p in variants.items()}
    outputs = {}
    for key, sess in sessions.items():
        for _ in range(warmup):
            outputs[key] = sess.run(None, feeds)
    wall: dict[str, list[float]] = {k: [] for k in sessions}
    cpu: dict[str, list[float]] = {k: [] for k in sessions}
    for _ in range(runs):
        for key, sess in sessions.items():
            w, c = time.perf_counter(), time.process_time()
            sess.run(None, feeds)
            cpu[key].append((time.process_time() - c) * 1000)
            wall[key].append((time.perf_counter() - w) * 1000)
    ref = outputs["original"]
    diffs = {k: max(float(np.max(np.abs(a - b))) for a, b in zip(ref, out)) for k, out in outputs.items()}
    del sessions
    gc.collect()
    return ({k: statistics.median(v) for k, v in wall.items()}, {k: statistics.median(v) for k, v in cpu.items()}, diffs)


def kernel_check(runs: int = 300) -> None:
    """One residual + LayerNorm at BERT-base size, both ways, with ORT optimizations off: the
    contrib SkipLayerNormalization kernel against the Add, Add, LayerNormalization it replaces."""
    import onnx
    from onnx import helper, numpy_helper

    d, shape = 768, [2, 128, 768]
    inits = [numpy_helper.from_array(np.full(d, v, np.float32), n) for n, v in (("g", 1.0), ("b", 0.0), ("bias", 0.1))]
    ins = [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, shape) for n in ("x", "s")]
    out = [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, shape)]
    forms = {
        "Add, Add, LayerNormalization": [helper.make_node("Add", ["x", "bias"], ["xb"]), helper.make_node("Add", ["xb", "s"], ["r"]),
                                         helper.make_node("LayerNormalization", ["r", "g", "b"], ["y"], epsilon=1e-12)],
        "com.microsoft SkipLayerNormalization": [helper.make_node("SkipLayerNormalization", ["x", "s", "g", "b", "bias"], ["y"],
                                                                  domain="com.microsoft", epsilon=1e-12)],
    }
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal(shape).astype(np.float32) for n in ("x", "s")}
    sessions = {}
    for label, nodes in forms.items():
        graph = helper.make_graph(nodes, "k", ins, out, inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
        sessions[label] = make_session(model.SerializeToString(), "off", threads=1)
    times: dict[str, list[float]] = {k: [] for k in sessions}
    results = {k: s.run(None, feeds)[0] for k, s in sessions.items()}
    for _ in range(runs):
        for label, sess in sessions.items():
            start = time.perf_counter()
            sess.run(None, feeds)
            times[label].append((time.perf_counter() - start) * 1e6)
    a, b = results.values()
    print(f"\n### Kernel check: residual + LayerNorm on [2, 128, 768], median of {runs} interleaved runs, 1 thread\n")
    print("| form | µs |\n|---|---|")
    for label, t in times.items():
        print(f"| {label} | {statistics.median(t):.0f} |")
    print(f"\nmax abs diff {float(np.max(np.abs(a - b))):.1e}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="/tmp/bertbase")
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--models", default="bert_base_ts")
    parser.add_argument("--levels", default=",".join(LEVELS))
    parser.add_argument("--peers", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    kernel_check()
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            src = os.path.join(args.dir, f"{name}.onnx")
            if not os.path.exists(src):
                print(f"{src} missing: run fixtures/make_torch_fixtures.py --bert-base {args.dir}")
                continue
            feeds = dict(np.load(os.path.join(args.dir, f"{name}.inputs.npz")))
            print(f"\n### {name} (batch 2, seq 128), median of {args.runs} interleaved runs, 1 thread\n")
            variants = build_variants(name, src, tmp, args.peers)
            print()
            keys = list(variants)
            print("| ORT level | " + " | ".join(f"{k} wall / cpu ms" for k in keys) + " | cpu speed-up vs original (same level) | max abs diff |")
            print("|---|" + "---|" * len(keys) + "---|---|")
            for level in args.levels.split(","):
                wall, cpu, diffs = measure(variants, level, feeds, args.runs)
                cells = [f"{wall[k]:.0f} / {cpu[k]:.0f}" for k in keys]
                gains = ", ".join(f"{k}: {(cpu['original'] - cpu[k]) / cpu['original'] * 100:+.1f}%" for k in keys[1:])
                worst = max(diffs[k] for k in keys[1:])
                print(f"| {level} | " + " | ".join(cells) + f" | {gains} | {worst:.1e} |", flush=True)


if __name__ == "__main__":
    main()
