"""Does graphtool stay linear at 100k and 200k nodes? Prints markdown tables.

For each size a generated graph (bench/gen_models.py ``big_graph``) is timed, every step in a
fresh subprocess so one step's heap never slows the next:

* graphtool ``io.load`` + ``io.save`` against onnx_ir ``ir.load`` + ``ir.save`` on the same file;
* ``optimize(model, level=1)`` with whatever passes are registered;
* ``graphtool.diff.diff(model, optimized)`` when that module exists.

The verdict compares CPU seconds (``time.process_time``), which the other jobs on a shared
machine disturb far less than wall time; wall seconds are shown beside them. A step passes when
the largest size costs at most 2.3x the smallest for 2x the nodes.

    python bench/scale.py                      # 100k and 200k nodes
    python bench/scale.py --sizes 20000,40000  # quick look
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

LIMIT = 2.3
CACHE = os.environ.get("GRAPHTOOL_BENCH_DIR", os.path.join(tempfile.gettempdir(), "graphtool-bench"))


class Clock:
    """Wall and CPU seconds of one block."""

    def __enter__(self) -> "Clock":
        self.w, self.c = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc) -> None:
        self.wall, self.cpu = time.perf_counter() - self.w, time.process_time() - self.c


def worker(what: str, path: str) -> dict:
    """One measurement, run in its own process; returns {step: {wall, cpu}, ...}."""
    out: dict = {}
    scratch = tempfile.mkdtemp(prefix="gt-scale-")
    if what == "onnx_ir":
        import onnx_ir as ir

        with Clock() as c:
            model = ir.load(path)
        out["onnx_ir load"] = vars(c)
        with Clock() as c:
            ir.save(model, os.path.join(scratch, "out.onnx"))
        out["onnx_ir save"] = vars(c)
    else:
        from graphtool import io

        with Clock() as c:
            model = io.load(path)
        out["load"] = vars(c)
        if what == "io":
            with Clock() as c:
                io.save(model, os.path.join(scratch, "out.onnx"))
            out["save"] = vars(c)
        elif what == "optimize":
            from graphtool.optimize import optimize

            with Clock() as c:
                optimized, report, _ = optimize(model, level=1)
            out["optimize --level 1"] = vars(c)
            out["nodes_after"] = report.nodes_after
            out["passes"] = sorted(r.name for r in report.passes.values())
            try:
                from graphtool.diff import diff
            except ImportError:
                diff = None
            if diff is not None:
                with Clock() as c:
                    diff(model, optimized)
                out["diff(model, optimized)"] = vars(c)
    for name in os.listdir(scratch):
        os.unlink(os.path.join(scratch, name))
    os.rmdir(scratch)
    out["max_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    for v in out.values():
        if isinstance(v, dict):
            v.pop("w", None), v.pop("c", None)
    return out


def run_worker(what: str, path: str) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--worker", what, path], capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"worker {what} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def model_path(nodes: int) -> str:
    from gen_models import write_big_graph

    return write_big_graph(nodes, os.path.join(CACHE, f"graph_v1_{nodes}.onnx"))


def fmt(t: dict) -> str:
    return f"{t['cpu']:.2f} ({t['wall']:.2f})"


def best(runs: list[dict], key: str) -> dict:
    return min((r[key] for r in runs), key=lambda t: t["cpu"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100000,200000")
    ap.add_argument("--repeat", type=int, default=2, help="load/save runs per tool (best is kept)")
    ap.add_argument("--worker", nargs=2, metavar=("WHAT", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(*args.worker)))
        return 0

    sizes = [int(s) for s in args.sizes.split(",")]
    results: dict[int, dict] = {}
    for n in sizes:
        path = model_path(n)
        io_runs = [run_worker("io", path) for _ in range(args.repeat)]
        ir_runs = [run_worker("onnx_ir", path) for _ in range(args.repeat)]
        opt = run_worker("optimize", path)
        results[n] = {
            "load": best(io_runs, "load"),
            "save": best(io_runs, "save"),
            "onnx_ir load": best(ir_runs, "onnx_ir load"),
            "onnx_ir save": best(ir_runs, "onnx_ir save"),
            **{k: v for k, v in opt.items() if isinstance(v, dict)},
            "nodes_after": opt["nodes_after"],
            "passes": opt["passes"],
            "rss": max(r["max_rss_mb"] for r in io_runs),
            "rss_opt": opt["max_rss_mb"],
            "file_mb": os.path.getsize(path) / 1e6,
        }
        print(f"[{n} nodes done]", file=sys.stderr, flush=True)

    print("### Load + save against onnx_ir (CPU s, wall s in parentheses)\n")
    print("| nodes | file MB | graphtool load | graphtool save | onnx_ir load | onnx_ir save | graphtool / onnx_ir (load+save, CPU) | peak RSS load+save MB |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, r in results.items():
        gt = r["load"]["cpu"] + r["save"]["cpu"]
        ir_ = r["onnx_ir load"]["cpu"] + r["onnx_ir save"]["cpu"]
        print(f"| {n:,} | {r['file_mb']:.1f} | {fmt(r['load'])} | {fmt(r['save'])} | {fmt(r['onnx_ir load'])} "
              f"| {fmt(r['onnx_ir save'])} | {gt / ir_:.2f}x | {r['rss']:.0f} |")
    lo, hi = sizes[0], sizes[-1]
    steps = ["load", "save", "onnx_ir load", "onnx_ir save", "optimize --level 1", "diff(model, optimized)"]
    print(f"\n### Scaling {hi:,} vs {lo:,} nodes (CPU s; pass when ratio <= {LIMIT} for {hi / lo:g}x nodes)\n")
    print(f"| step | {lo:,} nodes | {hi:,} nodes | ratio | verdict |")
    print("|---|---:|---:|---:|---|")
    failed = 0
    for step in steps:
        if step not in results[lo] or step not in results[hi]:
            print(f"| {step} | – | – | – | not available |")
            continue
        a, b = results[lo][step], results[hi][step]
        ratio = b["cpu"] / a["cpu"]
        ok = ratio <= LIMIT * (hi / lo) / 2
        failed += not ok and not step.startswith("onnx_ir")
        print(f"| {step} | {fmt(a)} | {fmt(b)} | {ratio:.2f} | {'ok' if ok else 'TOO SLOW'} |")
    print(f"\noptimize --level 1: {lo:,} -> {results[lo]['nodes_after']:,} nodes, {hi:,} -> "
          f"{results[hi]['nodes_after']:,} nodes; peak RSS (optimize + diff process) "
          f"{results[lo]['rss_opt']:.0f} / {results[hi]['rss_opt']:.0f} MB; passes: {', '.join(results[hi]['passes'])}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
