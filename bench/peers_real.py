"""graphtool against every peer on the real-model corpus and the torch fixtures.

Each tool runs in its own process (bench/peers.py): nodes after (subgraph nodes counted),
seconds, peak RSS, file size. Every result is then run against the original in onnxruntime on the
inputs graphtool's verification discovers for the original (graphtool.verify.verification.find_inputs), so a
peer's result counts only if it loads and gives the original's outputs; wrong or unloadable
results are marked and never counted as best.

Standard-op tools (ORT basic, onnxsim, onnxslim, onnxoptimizer, onnxscript) are compared with
graphtool level 1; ORT-target tools (ORT extended, onnxscript optimize_for_ort) with graphtool
level 2 --target ort.

    python bench/peers_real.py [--only a,b] [--tools x,y] [--json out.json]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import corpus  # noqa: E402
from peers import measure, transformer_type  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STANDARD = ("ort-basic", "onnxsim", "onnxslim", "onnxoptimizer", "onnxscript")
ORT_TARGET = ("ort-extended", "onnxscript-ort", "ort-transformers")
ATOL, RTOL = 1e-4, 1e-3


def _check(src: str, out: str, feeds: dict[str, np.ndarray] | None) -> tuple[bool, str]:
    """Does ``out`` load and give ``src``'s outputs (ORT, optimizations off) on ``feeds``?"""
    from graphtool.runtime import make_session
    from graphtool.verify import compare_arrays

    if feeds is None:
        return False, "no inputs"
    try:
        a, b = make_session(src), make_session(out)
        names = [o.name for o in a.get_outputs()]
        ra = dict(zip(names, a.run(None, feeds)))
        accepted = {i.name for i in b.get_inputs()}
        rb = dict(zip([o.name for o in b.get_outputs()], b.run(None, {k: v for k, v in feeds.items() if k in accepted})))
    except Exception as err:  # noqa: BLE001 - a result that does not load or run is "wrong"
        return False, f"does not run: {str(err).splitlines()[0][:80]}"
    for name, value in ra.items():
        if name not in rb:
            return False, f"output {name} missing"
        diff = compare_arrays(name, value, rb[name], RTOL, ATOL)
        if not diff.ok:
            return False, f"{name}: max abs {diff.max_abs:.3g}"
    return True, ""


def _feeds(path: str) -> dict[str, np.ndarray] | None:
    from graphtool import io
    from graphtool.verify import find_inputs

    try:
        return find_inputs(io.load(path), path).sets[0].feeds
    except Exception:  # noqa: BLE001 - a model nothing runs: no peer can be checked either
        return None


def _domains(path: str) -> set[str]:
    import onnx

    found: set[str] = set()

    def walk(graph) -> None:
        for node in graph.node:
            found.add(node.domain or "ai.onnx")
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    walk(attr.g)

    walk(onnx.load(path, load_external_data=False).graph)
    return found


def _size(path: str) -> int:
    data = path + ".data"
    return os.path.getsize(path) + (os.path.getsize(data) if os.path.exists(data) else 0)


def run_model(name: str, path: str, tools: list[str]) -> dict:
    feeds = _feeds(path)
    row: dict = {"model": name, "size": _size(path), "tools": {}, "domains": sorted(_domains(path))}
    with tempfile.TemporaryDirectory() as tmp:
        jobs = [("graphtool-l1", "graphtool", 1, "onnx"), ("graphtool-l2", "graphtool", 2, "ort")]
        jobs += [(t, t, 1, "onnx") for t in tools if t != "graphtool"
                 and (t != "ort-transformers" or transformer_type(path))]  # it has fusions for transformers only
        for key, tool, level, target in jobs:
            out = os.path.join(tmp, f"{key}.onnx")
            res = measure(tool, path, out, level, target, timeout=900, mem_limit_mb=12000)
            if "error" not in res:
                res["ok"], res["why"] = _check(path, out, feeds)
                res["size"] = _size(out)
                res["domains"] = sorted(_domains(out))
            row["tools"][key] = res
    return row


def _adds_contrib(row: dict, result: dict) -> bool:
    """The result uses com.microsoft ops the original did not (a quantized model may start with them)."""
    return "com.microsoft" in result.get("domains", []) and "com.microsoft" not in row.get("domains", [])


def best(row: dict, tools: tuple[str, ...]) -> tuple[str, int] | None:
    """The fewest nodes among correct results; a standard-op tool's result must be standard ops
    (onnxsim 0.8's default FuseAttention writes com.microsoft Attention, which is not portable)."""
    portable = set(tools) != set(ORT_TARGET)
    good = [(r["nodes"], t) for t, r in row["tools"].items() if t in tools and r.get("ok")
            and not (portable and _adds_contrib(row, r))]
    return (min(good)[1], min(good)[0]) if good else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only")
    ap.add_argument("--tools", default=",".join(("graphtool",) + STANDARD + ORT_TARGET))
    ap.add_argument("--json")
    ap.add_argument("--no-fixtures", action="store_true")
    ap.add_argument("--render", nargs="+", help="only print the table from saved --json files (later rows win)")
    args = ap.parse_args()
    if args.render:
        merged: dict[str, dict] = {}
        for path in args.render:
            with open(path) as handle:
                for row in json.load(handle):
                    if "domains" not in row:  # rows saved before the field existed
                        name = row["model"]
                        path = (os.path.join(REPO, "fixtures", name + ".onnx") if name.startswith(("torch/", "hf/"))
                                else str(corpus.CACHE / f"{name}.onnx"))
                        row["domains"] = sorted(_domains(path))
                    merged[row["model"]] = row
        table(list(merged.values()))
        return
    only = args.only.split(",") if args.only else None
    models = [(m["name"], m["path"]) for m in corpus.models(only)]
    if not args.no_fixtures:
        for folder in ("torch", "hf"):  # fixtures/hf: the transformers exports (eager/sdpa × TorchScript/dynamo)
            for path in sorted(glob.glob(os.path.join(REPO, "fixtures", folder, "*.onnx"))):
                name = f"{folder}/" + os.path.basename(path)[:-5]
                if not only or name in only:
                    models.append((name, path))
    rows = []
    for name, path in models:
        row = run_model(name, path, args.tools.split(","))
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=1)
    table(rows)


def table(rows: list[dict]) -> None:
    print()
    print("| model | gt L1 | best std peer | gt L2 ort | best ORT peer | " + " | ".join(STANDARD + ORT_TARGET) +
          " | size MB before → gt L1 | gt s / slim s | gt MB / slim MB |")
    print("|" + "---|" * (9 + len(STANDARD) + len(ORT_TARGET)))
    for row in rows:
        t = row["tools"]

        def cell(key: str) -> str:
            r = t.get(key, {})
            if not r:
                return "—"  # not run (--tools)
            if "error" in r:
                return "err"
            contrib = key in STANDARD and _adds_contrib(row, r)
            return f"{r['nodes']}" + ("" if r.get("ok") else " ✗") + (" (ms)" if contrib else "")

        b1, b2 = best(row, STANDARD), best(row, ORT_TARGET)
        g1, g2 = t.get("graphtool-l1", {}), t.get("graphtool-l2", {})
        mark1 = "" if not b1 or (g1.get("nodes", 1 << 30) <= b1[1]) else " ⚠"
        mark2 = "" if not b2 or (g2.get("nodes", 1 << 30) <= b2[1]) else " ⚠"
        slim = t.get("onnxslim", {})
        ratio_s = f"{g1['seconds'] / slim['seconds']:.2f}" if "seconds" in g1 and "seconds" in slim else "-"
        ratio_m = f"{g1['rss_mb'] / slim['rss_mb']:.2f}" if "rss_mb" in g1 and "rss_mb" in slim else "-"
        size = f"{row['size'] / 1e6:.2f} → {g1['size'] / 1e6:.2f}" if "size" in g1 else "-"
        print(f"| {row['model']} | {cell('graphtool-l1')}{mark1} | {f'{b1[1]} ({b1[0]})' if b1 else '-'} | "
              f"{cell('graphtool-l2')}{mark2} | {f'{b2[1]} ({b2[0]})' if b2 else '-'} | "
              + " | ".join(cell(k) for k in STANDARD + ORT_TARGET) + f" | {size} | {ratio_s} | {ratio_m} |")


if __name__ == "__main__":
    main()
