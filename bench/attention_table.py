"""Attention fusion on the transformer fixtures: graphtool beside ORT and onnxscript, one markdown table.

Node counts alone hide whether the attention blocks, the fusion that matters most for transformer
latency, were found. Per fixture this says how many of its attention layers (Softmax nodes in the
original) each tool turned into Attention / MultiHeadAttention / GroupQueryAttention /
PackedAttention (any domain), and whether the result still gives the exporter's outputs
(``X.expected.npz``) on ``X.inputs.npz``, run by ORT on CPU with graph optimizations off, so a diff
is the rewrite's own. Nodes count main graph plus subgraphs (bench/peers.py ``_count``). Each tool
runs in its own process, so a crash or hang is an "error: ..." cell:

* graphtool ``optimize(level=2, target="ort")``;
* ORT extended: a session at ``ORT_ENABLE_EXTENDED`` saved with ``optimized_model_filepath``;
* ORT transformers ``optimize_model(model_type="gpt2" for gpt2 else "bert", num_heads=0,
  hidden_size=0)`` at its default ``opt_level=1``, which fuses at least as much as 0 and 2 on every
  fixture. Level 1 imports torch only for a GPU check, so the script runs that ORT pass itself
  (``ORT_ENABLE_BASIC``, ``ConstantSharing`` disabled, as ``optimize_by_onnxruntime`` does), then
  ``optimize_model(..., opt_level=0)``;
* onnxscript ``optimizer.optimize`` then ``ort_fusions.optimize_for_ort`` (as bench/peers.py does).

    .venv/bin/python bench/attention_table.py [--models 'fixtures/hf/bert_*.onnx'] [--json rows.json]
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from peers import _count  # noqa: E402

DEFAULT_MODELS = [os.path.join(ROOT, "fixtures", "hf", "*.onnx")] + [
    os.path.join(ROOT, "fixtures", "torch", f"{m}_{e}.onnx") for m in ("bert", "gpt2", "vit") for e in ("ts", "dynamo")]
ATTENTION = {"Attention", "MultiHeadAttention", "GroupQueryAttention", "PackedAttention"}
TOOLS = ("graphtool", "ort-extended", "ort-transformers", "onnxscript-ort")
HAS_DIFF = {"graphtool", "ort-transformers", "onnxscript-ort"}
TIMEOUT = 600
HEADS = {"graphtool": "graphtool L2 ort", "ort-extended": "ORT extended", "ort-transformers": "ORT transformers",
         "onnxscript-ort": "onnxscript ort"}


def _ops(path: str) -> collections.Counter:
    """op_type histogram over the main graph and every subgraph."""
    import onnx

    hist: collections.Counter = collections.Counter()

    def walk(graph) -> None:
        for node in graph.node:
            hist[node.op_type] += 1
            for attr in node.attribute:
                for g in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else
                          attr.graphs if attr.type == onnx.AttributeProto.GRAPHS else []):
                    walk(g)

    walk(onnx.load(path, load_external_data=False).graph)
    return hist


def _max_abs_diff(path: str, stem: str) -> float:
    """Max abs diff of ``path``'s outputs vs ``stem.expected.npz``; NaN where the other is not counts as inf."""
    import numpy as np
    import onnxruntime as ort

    from graphtool.runtime import session_options

    sess = ort.InferenceSession(path, session_options("off"), providers=["CPUExecutionProvider"])
    feeds = dict(np.load(stem + ".inputs.npz"))
    got = dict(zip([o.name for o in sess.get_outputs()],
                   sess.run(None, {i.name: feeds[i.name] for i in sess.get_inputs()})))
    worst = 0.0
    for name, want in np.load(stem + ".expected.npz").items():
        a, b = want.astype(np.float64), np.asarray(got[name]).astype(np.float64)
        if a.shape != b.shape or (np.isnan(a) != np.isnan(b)).any():
            return math.inf
        delta = np.abs(a - b)
        delta[(a == b) | np.isnan(a)] = 0.0  # equal infs, NaN where NaN was expected
        worst = max(worst, float(delta.max(initial=0.0)))
    return worst


def worker(tool: str, src: str, out: str) -> dict:
    """Run inside the child: optimize ``src`` with ``tool`` into ``out``, then count and compare."""
    import logging
    import warnings

    import onnx
    import onnxruntime as ort

    from graphtool.runtime import session_options

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    if tool == "graphtool":
        from graphtool import io
        from graphtool.optimize import optimize

        model, _, _ = optimize(io.load(src), level=2, target="ort", in_place=True)
        io.save(model, out)
    elif tool == "ort-extended":
        ort.InferenceSession(src, session_options("extended", optimized_path=out), providers=["CPUExecutionProvider"])
    elif tool == "ort-transformers":
        from onnxruntime.transformers.optimizer import optimize_model

        basic = out + ".basic.onnx"  # what optimize_model(opt_level=1) runs first, minus its torch import
        ort.InferenceSession(src, session_options("basic", optimized_path=basic), providers=["CPUExecutionProvider"],
                             disabled_optimizers=["ConstantSharing"])
        kind = "gpt2" if os.path.basename(src).startswith("gpt2") else "bert"
        optimize_model(basic, model_type=kind, num_heads=0, hidden_size=0, opt_level=0).save_model_to_file(out)
    elif tool == "onnxscript-ort":
        import onnx_ir as ir
        from onnxscript import optimizer
        from onnxscript.rewriter.ort_fusions import optimize_for_ort

        fused, _ = optimize_for_ort(ir.from_proto(optimizer.optimize(onnx.load(src))))
        onnx.save(ir.to_proto(fused), out)
    else:
        raise SystemExit(f"unknown tool {tool}")
    hist = _ops(out)
    row = {"nodes": _count(out), "attention": sum(hist[op] for op in ATTENTION)}
    if tool in HAS_DIFF:
        try:
            row["diff"] = _max_abs_diff(out, src[:-len(".onnx")])
        except Exception as err:  # noqa: BLE001 - a result that does not run keeps its counts
            row["diff_error"] = _short(f"{type(err).__name__}: {err}")
    return row


def _short(text: str) -> str:
    """One table-sized line from an error: ORT's module path, status boilerplate and C++ location cut."""
    text = text.strip().splitlines()[0].replace("onnxruntime.capi.onnxruntime_pybind11_state.", "")
    text = re.sub(r"\[ONNXRuntimeError\] : \d+ : \w+ : |Non-zero status code returned while ", "", text)
    return re.sub(r"Status Message: \S+:\d+ \S+\(.*?\) ", "", text)[:110].replace("|", "/")


def measure(tool: str, src: str, out: str) -> dict:
    """``worker`` in a fresh process: {"nodes", "attention"[, "diff"]} or {"error", "stderr"}."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT)
    try:
        proc = subprocess.run([sys.executable, __file__, "--worker", tool, src, out], capture_output=True,
                              text=True, timeout=TIMEOUT, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout {TIMEOUT}s", "stderr": ""}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"]
        return {"error": _short(tail[-1]), "stderr": "\n".join(tail[-25:])}
    return json.loads(lines[-1])


def _diff(value: float | None) -> str:
    return "-" if value is None else "inf" if math.isinf(value) else f"{value:.1e}"


def cells(result: dict, tool: str) -> list[str]:
    n = 3 if tool in HAS_DIFF else 2
    if "error" in result:
        return [f"error: {result['error']}"] + ["error"] * (n - 1)
    diff = f"error: {result['diff_error']}" if "diff_error" in result else _diff(result.get("diff"))
    return [str(result["nodes"]), str(result["attention"]), diff][:n]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", action="append", metavar="GLOB",
                        help="models (repeatable); default fixtures/hf/*.onnx, fixtures/torch/{bert,gpt2,vit}_*")
    parser.add_argument("--json", metavar="PATH", help="also save the rows as JSON")
    args = parser.parse_args()
    paths = sorted({p for pattern in args.models or DEFAULT_MODELS for p in glob.glob(pattern)})
    if not paths:
        raise SystemExit("no models match")
    start = time.perf_counter()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="gt-attention-") as tmp:
        for path in paths:
            name = os.path.relpath(path, ROOT)[:-len(".onnx")].replace("fixtures/", "")
            row = {"model": name, "layers": _ops(path)["Softmax"], "original": _count(path)}
            for tool in TOOLS:
                row[tool] = measure(tool, path, os.path.join(tmp, f"{name.replace('/', '_')}.{tool}.onnx"))
            rows.append(row)
            print(f"  {name}: " + ", ".join(f"{t}={row[t].get('attention', 'error')}" for t in TOOLS),
                  file=sys.stderr, flush=True)
    seconds = time.perf_counter() - start

    print("| model | layers | original nodes | " + " | ".join(f"{HEADS[t]} nodes | {HEADS[t]} attn" + (
        f" | {HEADS[t]} max abs diff" if t in HAS_DIFF else "") for t in TOOLS) + " |")
    print("|---|---|---|" + "---|" * sum(3 if t in HAS_DIFF else 2 for t in TOOLS))
    for row in rows:
        print(f"| {row['model']} | {row['layers']} | {row['original']} | "
              + " | ".join(" | ".join(cells(row[t], t)) for t in TOOLS) + " |")
    total, summary = ["**sum**", str(sum(r["layers"] for r in rows)), str(sum(r["original"] for r in rows))], []
    for tool in TOOLS:
        ok = [r for r in rows if "error" not in r[tool]]
        full = sum(r[tool]["attention"] == r["layers"] for r in ok)
        errors = f" ({len(rows) - len(ok)} errors)" if len(ok) < len(rows) else ""
        ran = [r[tool]["diff"] for r in ok if "diff" in r[tool]]
        worst = _diff(max(ran, default=None)) if tool in HAS_DIFF else None
        unrun = f", {len(ok) - len(ran)} results do not run" if tool in HAS_DIFF and len(ran) < len(ok) else ""
        total += [f"{sum(r[tool]['nodes'] for r in ok)}{errors}", f"{sum(r[tool]['attention'] for r in ok)} "
                  f"({full}/{len(rows)} full)"] + ([f"max {worst}{unrun and ' of those that run'}"] if worst else [])
        summary.append(f"- {HEADS[tool]}: {full}/{len(rows)} models fully fused (attention == layers)"
                       + (f", max of max abs diff {worst}" if worst else "") + errors + unrun)
    print("| " + " | ".join(total) + " |\n")
    print("\n".join(summary))
    for row in rows:
        for tool in TOOLS:
            for key, what in (("error", "fails"), ("diff_error", "result does not run")):
                if key in row[tool]:
                    print(f"- {tool} {what} on {row['model']}: {row[tool][key]}")
    print(f"\n{len(rows)} models, {seconds:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--worker":
        print(json.dumps(worker(*sys.argv[2:5])))
    else:
        main()
