"""Does ``graphtool diff`` say only what changed? On real model / level-2 pairs (the hf and torch
fixtures and their ``graphtool optimize --level 2`` result, as a user would run them): changed
nodes whose only listed change is an input read by the same name before and after (what a new
producer or a constant of the same name made look like a change: issue 36), whether the
summary's groups account for every node change exactly once, and the value-level notes.

    python bench/diff_honesty.py [model.onnx ...] [--out bench/out/diff]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT = [f"{ROOT}/fixtures/hf/vit_eager_ts.onnx", f"{ROOT}/fixtures/hf/gpt2_sdpa_dynamo.onnx",
           f"{ROOT}/fixtures/torch/mobilenet_ts.onnx", f"{ROOT}/fixtures/hf/bert_eager_ts.onnx",
           f"{ROOT}/fixtures/torch/cnn_dynamo.onnx"]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "graphtool", *args], capture_output=True, text=True)


def measure(model: str, out: str) -> dict:
    name = os.path.splitext(os.path.basename(model))[0]
    level2 = os.path.join(out, f"{name}.l2.onnx")
    done = cli("optimize", model, "--level", "2", "-o", level2)
    if done.returncode != 0:
        raise SystemExit(f"optimize {model}: {done.stderr.strip()}")
    done = cli("diff", model, level2, "--json")
    if done.returncode not in (0, 1):
        raise SystemExit(f"diff {model}: {done.stderr.strip()}")
    report = json.loads(done.stdout)
    changed = [n for g in report["graphs"] for n in g["nodes"] if n["change"] == "changed"]
    same_name_only = [n for n in changed if n["details"] and all(
        d["what"] == "input" and d.get("old") == d.get("new") for d in n["details"])]
    counts = report["counts"]
    nodes = counts["removed"] + counts["added"] + counts["changed"]
    in_groups = sum(sum(g["node_counts"].values()) for g in report.get("groups", []))
    values = [v for g in report["graphs"] for v in g.get("value_changes", [])]
    cli("diff", model, level2, "-o", os.path.join(out, f"{name}.diff.html"))
    return {"model": name, "changed": counts["changed"], "same_name_only": len(same_name_only),
            "removed": counts["removed"], "added": counts["added"], "unchanged": counts["unchanged"],
            "node_changes": nodes, "in_groups": in_groups, "value_notes": len(values),
            "a_nodes": report["nodes"]["a"], "b_nodes": report["nodes"]["b"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=DEFAULT)
    parser.add_argument("--out", default=os.path.join(HERE, "out", "diff"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    print("| pair (model vs its level 2) | nodes A → B | removed / added / changed / unchanged | changed with only a "
          "same-named input | node changes / in summary groups | value notes |")
    print("|---|---:|---:|---:|---:|---:|")
    for model in args.models:
        r = measure(model, args.out)
        print(f"| {r['model']} | {r['a_nodes']} → {r['b_nodes']} | {r['removed']} / {r['added']} / {r['changed']} / "
              f"{r['unchanged']} | {r['same_name_only']} | {r['node_changes']} / {r['in_groups']} | {r['value_notes']} |",
              flush=True)


if __name__ == "__main__":
    main()
