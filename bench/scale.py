"""Does graphtool stay linear at 100k and 200k nodes? Prints markdown tables.

For each size a generated graph (bench/gen_models.py ``big_graph``) is timed, every step in a
fresh subprocess so one step's heap never slows the next:

* graphtool ``io.load`` + ``io.save`` against onnx_ir ``ir.load`` + ``ir.save`` on the same file;
* ``optimize(model, level=N, target=T)`` with whatever passes are registered (``--level``, default 1;
  ``--target onnx|ort``, default onnx);
* ``graphtool.diff.diff(model, optimized)`` when that module exists.

The verdict compares CPU seconds (``time.process_time``), which the other jobs on a shared
machine disturb far less than wall time; wall seconds are shown beside them. A step passes when
the largest size costs at most 2.3x the smallest for 2x the nodes.

    python bench/scale.py                      # 100k and 200k nodes
    python bench/scale.py --sizes 20000,40000  # quick look
    python bench/scale.py --level 2 --target ort --repo /tmp/old-d41   # another checkout's code

``--repo PATH`` runs every graphtool step with the code of the checkout at PATH (a git worktree of
an older commit, say), on the same generated files: the child gets ``PYTHONPATH=PATH`` and
``cwd=PATH``, and ``graphtool.passes`` is mapped to ``PATH/passes`` (pyproject's package-dir does
that for the installed copy; without the mapping the editable install's finder would hand the old
``graphtool`` the new passes). The footer prints where ``graphtool`` and a pass module came from.
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


class RepoPasses:
    """Meta-path finder: ``graphtool.passes`` is ``REPO/passes`` (the installed finder maps it to this checkout's)."""

    def __init__(self, repo: str) -> None:
        self.dir = os.path.join(repo, "passes")

    def find_spec(self, name: str, path=None, target=None):
        if name != "graphtool.passes":
            return None
        import importlib.util

        return importlib.util.spec_from_file_location(name, os.path.join(self.dir, "__init__.py"),
                                                      submodule_search_locations=[self.dir])


def worker(what: str, path: str, level: int = 1, target: str = "onnx", repo: str | None = None) -> dict:
    """One measurement, run in its own process; returns {step: {wall, cpu}, ...}."""
    if repo:
        sys.meta_path.insert(0, RepoPasses(repo))
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
                optimized, report, _ = optimize(model, level=level, target=target)
            out[f"optimize --level {level}"] = vars(c)
            out["nodes_after"] = report.nodes_after
            out["passes"] = sorted(r.name for r in report.passes.values())
            import graphtool

            out["graphtool_file"] = graphtool.__file__
            out["pass_file"] = sys.modules["graphtool.passes.attention"].__file__
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


def run_worker(what: str, path: str, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--worker", what, path, "--level", str(args.level), "--target", args.target]
    env, cwd = None, None
    if args.repo:
        cmd += ["--repo", args.repo]
        env, cwd = {**os.environ, "PYTHONPATH": args.repo}, args.repo
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
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
    ap.add_argument("--level", type=int, default=1, help="optimize level (default 1)")
    ap.add_argument("--target", choices=["onnx", "ort"], default="onnx", help="optimize target (default onnx)")
    ap.add_argument("--repo", help="run graphtool from this checkout (e.g. a worktree of an older commit)")
    ap.add_argument("--worker", nargs=2, metavar=("WHAT", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.repo:
        args.repo = os.path.abspath(args.repo)
    if args.worker:
        print(json.dumps(worker(*args.worker, level=args.level, target=args.target, repo=args.repo)))
        return 0

    sizes = [int(s) for s in args.sizes.split(",")]
    results: dict[int, dict] = {}
    for n in sizes:
        path = model_path(n)
        io_runs = [run_worker("io", path, args) for _ in range(args.repeat)]
        ir_runs = [run_worker("onnx_ir", path, args) for _ in range(args.repeat)]
        opt = run_worker("optimize", path, args)
        results[n] = {
            "load": best(io_runs, "load"),
            "save": best(io_runs, "save"),
            "onnx_ir load": best(ir_runs, "onnx_ir load"),
            "onnx_ir save": best(ir_runs, "onnx_ir save"),
            **{k: v for k, v in opt.items() if isinstance(v, dict)},
            "nodes_after": opt["nodes_after"],
            "passes": opt["passes"],
            "files": (opt["graphtool_file"], opt["pass_file"]),
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
    opt_step = f"optimize --level {args.level}"
    steps = ["load", "save", "onnx_ir load", "onnx_ir save", opt_step, "diff(model, optimized)"]
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
    print(f"\n{opt_step} --target {args.target}: {lo:,} -> {results[lo]['nodes_after']:,} nodes, {hi:,} -> "
          f"{results[hi]['nodes_after']:,} nodes; peak RSS (optimize + diff process) "
          f"{results[lo]['rss_opt']:.0f} / {results[hi]['rss_opt']:.0f} MB; passes: {', '.join(results[hi]['passes'])}")
    print(f"code: graphtool from {results[hi]['files'][0]}, passes from {results[hi]['files'][1]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
