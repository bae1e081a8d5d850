"""Issue 34's table: node counts of graphtool and its peers on the quantized / fp16 / TF-born /
classic-ML corpus that bench/qdq_corpus.py builds (at bench time, never committed).

    .venv/bin/python bench/qdq_table.py [--models /work/cache/qdq/models] [--only a,b] [--json out.json]
    .venv/bin/python bench/qdq_table.py --render out.json [more.json ...]

Columns: graphtool level 1 (standard ops) and level 2 --target ort; onnxruntime basic and extended
(``optimized_model_filepath``), onnxsim, onnxslim, the onnxscript optimizer; with ``--layout`` also graphtool
level 3 --target ort and onnxruntime all (its layout graph: counted, not always reloadable); each tool in its own
process (bench/peers.py). Every result runs in onnxruntime beside the original on the inputs
graphtool's verification discovers (graphtool.verify.find_inputs); a result counts only when it
loads and its outputs are equal:

* float models: |got - ref| <= 1e-4 + 1e-3 |ref| (bench/peers_real.py's bound);
* quantized models (QDQ, QOperator, dynamic): the reference is the original under onnxruntime with
  its optimizations off, and the bound is the one onnxruntime's own QDQ transformer tests use
  (TransformerTester(..., 0.01 per-sample, 0.01 relative per-sample)): |got - ref| <= 0.01 + 0.01 |ref|.
  A fused QLinear kernel requantizes in fixed point, so a deep network may move an output by a
  quantization step; a result whose error is no larger than onnxruntime extended's own on the same
  model is marked "≈" (equal as onnxruntime's own fusion is), not counted wrong;
* fp16 models: 1e-2 + 1e-2 |ref| (half precision: 11 bits of mantissa).

The last column judges graphtool L2's and ORT extended's quantized results as graphtool's own
verification does (graphtool.verify: 2 steps of the output's DequantizeLinear scale) and gives the
largest difference in steps.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from peers import measure  # noqa: E402

MODELS = "/work/cache/qdq/models"
STANDARD = ("ort-basic", "onnxsim", "onnxslim", "onnxscript")
ORT_TARGET = ("ort-extended",)
TOL = {"float": (1e-4, 1e-3), "quantized": (0.01, 0.01), "fp16": (1e-2, 1e-2)}


def tolerance_kind(kind: str) -> str:
    return {"qdq": "quantized", "qoperator": "quantized", "dynamic": "quantized", "fp16": "fp16"}.get(kind, "float")


def _feeds(path: str) -> dict[str, np.ndarray] | None:
    from graphtool import io
    from graphtool.verify import find_inputs

    try:
        return find_inputs(io.load(path), path).sets[0].feeds
    except Exception as err:  # noqa: BLE001 - a model nothing runs: no peer can be checked either
        print(f"{path}: no inputs: {err}", file=sys.stderr)
        return None


def _run(path: str, feeds: dict[str, np.ndarray]) -> dict[str, object]:
    from graphtool.runtime import make_session

    sess = make_session(path, "off")
    accepted = {i.name for i in sess.get_inputs()}
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, {k: v for k, v in feeds.items() if k in accepted})))


def _error(ref: dict, got: dict, atol: float, rtol: float) -> tuple[bool, float, str]:
    """(within the bound, worst excess |d| - (atol + rtol |ref|) normalised to max abs diff, why)."""
    from graphtool.verify import compare_arrays

    worst, ok, why = 0.0, True, ""
    for name, value in ref.items():
        if name not in got:
            return False, float("inf"), f"output {name} missing"
        diff = compare_arrays(name, value, got[name], rtol, atol)
        worst = max(worst, diff.max_abs)
        if not diff.ok:
            ok, why = False, f"{name}: max abs {diff.max_abs:.3g}"
    return ok, worst, why


def _grid(path: str, ref: dict, got: dict) -> tuple[bool, float | None]:
    """graphtool's own verdict (verification's quantization grid: 2 steps of each dequantized
    output's scale) and the largest difference in steps of that scale (None: no output on a grid)."""
    from graphtool import io
    from graphtool.verify import ATOL, RTOL, judge_output, quantized_outputs

    grids = quantized_outputs(io.load(path))
    ok, steps = True, None
    for name, value in ref.items():
        grid = grids.get(name)
        ok &= judge_output(name, value, got[name], RTOL, ATOL, None, grid).ok
        if grid is not None and not grid.integer:
            d = np.abs(np.asarray(value, np.float64) - np.asarray(got[name], np.float64))
            scale = np.broadcast_to(grid.atol(np.shape(value)), np.shape(value)) / grid.steps if grid.axis is not None else float(np.max(grid.scale))
            steps = max(steps or 0.0, float(np.max(d / scale)) if d.size else 0.0)
    return ok, steps


def run_model(name: str, path: str, kind: str, tools: list[str], layout: bool = False) -> dict:
    feeds = _feeds(path)
    atol, rtol = TOL[tolerance_kind(kind)]
    row: dict = {"model": name, "kind": kind, "tools": {}}
    ref = _run(path, feeds) if feeds is not None else None
    with tempfile.TemporaryDirectory() as tmp:
        jobs = [("graphtool-l1", "graphtool", 1, "onnx"), ("graphtool-l2", "graphtool", 2, "ort")]
        if layout:  # level 3 beside ORT's layout level ("all"); ORT saves its layout graph but may not reload it
            jobs += [("graphtool-l3", "graphtool", 3, "ort"), ("ort-all", "ort-all", 1, "onnx")]
        jobs += [(t, t, 1, "onnx") for t in tools]
        for key, tool, level, target in jobs:
            out = os.path.join(tmp, f"{key}.onnx")
            res = measure(tool, path, out, level, target, timeout=900, mem_limit_mb=12000)
            if "error" not in res:
                if ref is None:
                    res["ok"], res["why"] = False, "no inputs"
                else:
                    try:
                        got = _run(out, feeds)
                        res["ok"], res["max_abs"], res["why"] = _error(ref, got, atol, rtol)
                        if tolerance_kind(kind) == "quantized" and key in ("graphtool-l2", "ort-extended"):
                            res["grid_ok"], res["steps"] = _grid(path, ref, got)
                    except Exception as err:  # noqa: BLE001 - a result that does not run is wrong
                        res["ok"], res["max_abs"], res["why"] = False, float("inf"), f"does not run: {str(err)[:80]}"
            row["tools"][key] = res
    ort_err = row["tools"].get("ort-extended", {}).get("max_abs")
    if tolerance_kind(kind) == "quantized" and ort_err is not None:
        for res in row["tools"].values():
            if not res.get("ok") and res.get("max_abs", float("inf")) <= ort_err:
                res["ok"], res["approx"] = True, True
    return row


def best(row: dict, tools: tuple[str, ...]) -> tuple[str, int] | None:
    good = [(r["nodes"], t) for t, r in row["tools"].items() if t in tools and r.get("ok")]
    return (min(good)[1], min(good)[0]) if good else None


def table(rows: list[dict]) -> str:
    layout = any("graphtool-l3" in row["tools"] for row in rows)
    lines = ["| model | kind | gt L1 | best std peer | gt L2 ort | ORT ext | " + " | ".join(STANDARD)
             + " | gt L2 max abs | ORT ext max abs | gt L2 / ORT ext on the grid |"
             + (" gt L3 ort | ORT all (nodes) | gt L3 max abs |" if layout else ""),
             "|" + "---|" * (10 + len(STANDARD) + 3 * layout)]
    for row in rows:
        t = row["tools"]

        def cell(key: str) -> str:
            r = t.get(key, {})
            if not r:
                return "—"
            if "error" in r:
                return "err"
            return f"{r['nodes']}" + ("" if r.get("ok") else " ✗") + (" ≈" if r.get("approx") else "")

        b1 = best(row, STANDARD)
        g1, g2, ext = t.get("graphtool-l1", {}), t.get("graphtool-l2", {}), t.get("ort-extended", {})
        mark1 = "" if not b1 or g1.get("nodes", 1 << 30) <= b1[1] else " ⚠"
        peers2 = [r["nodes"] for k, r in t.items() if not k.startswith("graphtool") and k != "ort-all" and r.get("ok")]
        mark2 = "" if not peers2 or g2.get("nodes", 1 << 30) <= min(peers2) else " ⚠"

        def err(r: dict) -> str:
            return f"{r['max_abs']:.3g}" if "max_abs" in r else "-"

        def grid(r: dict) -> str:
            if "grid_ok" not in r:
                return "-"
            steps = f"{r['steps']:.2g} steps" if r.get("steps") is not None else "no grid"
            return ("ok " if r["grid_ok"] else "✗ ") + steps

        lines.append(f"| {row['model']} | {row['kind']} | {cell('graphtool-l1')}{mark1} | "
                     f"{f'{b1[1]} ({b1[0]})' if b1 else '-'} | {cell('graphtool-l2')}{mark2} | {cell('ort-extended')} | "
                     + " | ".join(cell(k) for k in STANDARD) + f" | {err(g2)} | {err(ext)} | {grid(g2)} / {grid(ext)} |"
                     + (f" {cell('graphtool-l3')} | {t.get('ort-all', {}).get('nodes', '—')} | "
                        f"{err(t.get('graphtool-l3', {}))} |" if layout else ""))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=MODELS)
    ap.add_argument("--only")
    ap.add_argument("--tools", default=",".join(STANDARD + ORT_TARGET))
    ap.add_argument("--layout", action="store_true", help="also graphtool level 3 --target ort and ORT all")
    ap.add_argument("--json")
    ap.add_argument("--render", nargs="+")
    args = ap.parse_args()
    if args.render:
        merged: dict[str, dict] = {}
        for path in args.render:
            with open(path) as handle:
                for row in json.load(handle):
                    merged[row["model"]] = row
        print(table(list(merged.values())))
        return
    with open(os.path.join(args.models, "corpus.json")) as handle:
        index = json.load(handle)
    only = set(args.only.split(",")) if args.only else None
    rows = []
    for name, info in index.items():
        if only and name not in only:
            continue
        row = run_model(name, os.path.join(args.models, name + ".onnx"), info["kind"], args.tools.split(","),
                        args.layout)
        rows.append(row)
        print(json.dumps(row), flush=True)
        if args.json:
            with open(args.json, "w") as handle:
                json.dump(rows, handle, indent=1)
    print(table(rows))


if __name__ == "__main__":
    main()
