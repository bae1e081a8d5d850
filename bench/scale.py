"""Does graphtool stay linear at 100k and 200k nodes? Prints markdown tables.

For each size a generated graph (bench/gen_models.py ``big_graph``) is timed, every step in a
fresh subprocess so one step's heap never slows the next:

* graphtool ``io.load`` + ``io.save`` against onnx_ir ``ir.load`` + ``ir.save`` on the same file;
* ``optimize(model, level=N, target=T)`` with whatever passes are registered (``--level``, default 1;
  ``--target onnx|ort``, default onnx);
* ``graphtool.diff.run.diff(model, optimized)`` when that module exists.

The verdict compares CPU seconds (``time.process_time``), which the other jobs on a shared
machine disturb far less than wall time; wall seconds are shown beside them. A step passes when
the largest size costs at most 2.3x the smallest for 2x the nodes.

    python bench/scale.py                      # 100k and 200k nodes
    python bench/scale.py --sizes 20000,40000  # quick look
    python bench/scale.py --level 2 --target ort --repo /tmp/old-d41   # another checkout's code
    python bench/scale.py --phases             # also: where optimize's time goes, pass by pass

Issue 19 (cost per node, a million nodes): ``--steps`` times the commands' steps one by one, each
in a fresh process (seconds and that process's peak RSS), on ``--model chain`` (the Relu chain of
``tests/bad_inputs``, a million nodes in 25 MB) or ``blocks`` (``big_graph``), and ``--against``
runs every step with another checkout too, interleaved, for a before/after table:

    git worktree add /tmp/gt-before HEAD
    python bench/scale.py --model chain --sizes 100000,1000000 \
        --steps load,inspect,optimize,diffself,save --against /tmp/gt-before

``--peers onnx_ir,onnxsim,onnxslim`` times those tools on the same files in the same run
(``--peer-timeout`` wall seconds each; a run past it is reported as "did not finish in N s").

Steps: ``load`` (io.load), ``inspect`` (what ``graphtool inspect`` computes, load included: the
report, onnx's checker and the check summary), ``optimize`` (load + optimize --level N, no verification), ``diffself`` (load +
diff(model, model)), ``save`` (load + io.save). Time is the step's own; RSS is the process peak,
load included.

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


STEP_NAMES = {"load": "load", "inspect": "inspect (load included)", "optimize": "optimize --level {level}",
              "diffself": "diff(model, model)", "save": "save"}


def step_worker(step: str, path: str, level: int, target: str) -> dict:
    """One step of ``--steps`` (after a load, which is timed too); returns {step: {wall, cpu}, ...}.
    ``inspect`` is timed whole, load included, as ``graphtool inspect`` runs it: a checkout with
    ``inspect_file`` runs onnx's checker before building the IR, an older one after."""
    from graphtool import io

    out: dict = {}
    name = STEP_NAMES[step].format(level=level)
    if step == "inspect":
        import importlib

        from graphtool.check import check

        inspecting = importlib.import_module("graphtool.inspect")  # graphtool.inspect is also a function

        with Clock() as c:
            if hasattr(inspecting, "inspect_file"):
                model, report = inspecting.inspect_file(path)
            else:
                model = io.load(path)
                report = inspecting.inspect_model(model, path)
            report["check"] = check(model).summary()
        out[name] = vars(c)
        return out
    with Clock() as c:
        model = io.load(path)
    out["load"] = vars(c)
    if step == "optimize":
        from graphtool.optimize import optimize

        with Clock() as c:
            _, report, _ = optimize(model, level=level, target=target)
        out[name] = vars(c)
        out["nodes_after"] = report.nodes_after
        out["pass_seconds"] = {r.name: r.seconds for r in report.passes.values()}
    elif step == "diffself":
        from graphtool.diff import diff

        with Clock() as c:
            diff(model, model)
        out[name] = vars(c)
    elif step == "save":
        scratch = tempfile.mkdtemp(prefix="gt-scale-")
        try:
            with Clock() as c:
                io.save(model, os.path.join(scratch, "out.onnx"))
            out[name] = vars(c)
        finally:
            for leftover in os.listdir(scratch):
                os.unlink(os.path.join(scratch, leftover))
            os.rmdir(scratch)
    return out


PEER_STEPS = {"onnx_ir": ("onnx_ir load", "onnx_ir save"), "onnxsim": ("onnxsim simplify",),
              "onnxslim": ("onnxslim slim",)}


def peer_worker(tool: str, path: str) -> dict:
    """A peer on the same file, as its user calls it: onnx_ir ``load`` and ``save`` timed apart;
    onnxsim (``onnx.load`` + ``simplify`` + ``onnx.save``) and onnxslim (``slim(src, out)``) whole."""
    out: dict = {}
    scratch = tempfile.mkdtemp(prefix="gt-scale-")
    target = os.path.join(scratch, "out.onnx")
    try:
        if tool == "onnx_ir":
            import onnx_ir as ir

            with Clock() as c:
                model = ir.load(path)
            out["onnx_ir load"] = vars(c)
            with Clock() as c:
                ir.save(model, target)
            out["onnx_ir save"] = vars(c)
        elif tool == "onnxsim":
            import onnx
            from onnxsim import simplify

            with Clock() as c:
                model, _ = simplify(onnx.load(path))
                onnx.save(model, target)
            out["onnxsim simplify"] = vars(c)
            out["nodes_after"] = len(model.graph.node)
        elif tool == "onnxslim":
            import onnx
            import onnxslim

            with Clock() as c:
                onnxslim.slim(path, target)
            out["onnxslim slim"] = vars(c)
            out["nodes_after"] = len(onnx.load(target, load_external_data=False).graph.node)
        else:
            raise SystemExit(f"unknown peer {tool!r} (choose from {', '.join(PEER_STEPS)})")
    finally:
        for leftover in os.listdir(scratch):
            os.unlink(os.path.join(scratch, leftover))
        os.rmdir(scratch)
    return out


def worker(what: str, path: str, level: int = 1, target: str = "onnx", repo: str | None = None) -> dict:
    """One measurement, run in its own process; returns {step: {wall, cpu}, ...}."""
    if repo:
        sys.meta_path.insert(0, RepoPasses(repo))
    if what.startswith(("step:", "peer:")):
        out = step_worker(what[5:], path, level, target) if what.startswith("step:") else peer_worker(what[5:], path)
        out["max_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        for v in out.values():
            if isinstance(v, dict):
                v.pop("w", None), v.pop("c", None)
        return out
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
            out["pass_seconds"] = {r.name: r.seconds for r in report.passes.values()}
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


def run_worker(what: str, path: str, args: argparse.Namespace, timeout: float | None = None) -> dict:
    """``worker(what, path)`` in a fresh process; with ``timeout``, {"timeout": seconds} if it
    ran out of time (the child is killed)."""
    cmd = [sys.executable, __file__, "--worker", what, path, "--level", str(args.level), "--target", args.target]
    env, cwd = None, None
    if args.repo:
        cmd += ["--repo", args.repo]
        env, cwd = {**os.environ, "PYTHONPATH": args.repo}, args.repo
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"timeout": timeout}
    if proc.returncode:
        raise SystemExit(f"worker {what} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def model_path(nodes: int, kind: str = "blocks") -> str:
    """The generated model of ``nodes`` ops: ``blocks`` (gen_models.big_graph) or ``chain`` (Relu chain)."""
    if kind == "chain":
        path = os.path.join(CACHE, f"chain_{nodes}.onnx")
        if not os.path.exists(path):
            sys.path.insert(0, os.path.dirname(HERE))
            from tests.bad_inputs.make_bad_inputs import chain_model_bytes

            os.makedirs(CACHE, exist_ok=True)
            with open(path + ".tmp", "wb") as f:
                f.write(chain_model_bytes(nodes))
            os.replace(path + ".tmp", path)
        return path
    from gen_models import write_big_graph

    return write_big_graph(nodes, os.path.join(CACHE, f"graph_v1_{nodes}.onnx"))


def steps_table(args: argparse.Namespace) -> int:
    """``--steps``: each step of each size in a fresh process, this checkout and ``--against``
    interleaved (the order alternates per round), best CPU of ``--rounds`` kept; prints markdown."""
    sizes = [int(s) for s in args.sizes.split(",")]
    steps = [s for s in args.steps.split(",") if s]
    unknown = [s for s in steps if s not in STEP_NAMES]
    if unknown:
        raise SystemExit(f"unknown step {unknown[0]!r} (choose from {', '.join(STEP_NAMES)})")
    checkouts = {"after": args.repo, **({"before": os.path.abspath(args.against)} if args.against else {})}
    best: dict[tuple[str, int, str], dict] = {}
    for round_ in range(args.rounds):
        for n in sizes:
            path = model_path(n, args.model)
            for step in steps:
                order = list(checkouts.items())
                if round_ % 2:
                    order.reverse()
                for label, repo in order:
                    run = run_worker(f"step:{step}", path, argparse.Namespace(level=args.level, target=args.target,
                                                                              repo=repo))
                    name = STEP_NAMES[step].format(level=args.level)
                    got = {**run[name], "rss": run["max_rss_mb"], "nodes_after": run.get("nodes_after")}
                    key = (label, n, step)
                    if key not in best or got["cpu"] < best[key]["cpu"]:
                        best[key] = got
                    print(f"[{label} {n:,} {step}: {fmt(got)} s, {got['rss']:.0f} MB]", file=sys.stderr, flush=True)
    peers = [p for p in (args.peers or "").split(",") if p]
    peer_runs: dict[tuple[str, int], dict] = {}
    for n in sizes:
        path = model_path(n, args.model)
        for tool in peers:
            run = run_worker(f"peer:{tool}", path, args, timeout=args.peer_timeout)
            peer_runs[(tool, n)] = run
            print(f"[{tool} {n:,}: {run}]", file=sys.stderr, flush=True)
    labels = list(checkouts)
    print(f"### {args.model} graphs, each step in a fresh process (CPU s, wall s in parentheses; peak RSS MB of "
          "that process, load included)\n")
    head = " | ".join(f"{label} s | {label} MB" for label in labels)
    print(f"| step | nodes | {head} |" + (" after/before CPU |" if "before" in checkouts else ""))
    print("|---|---:|" + "---:|" * (2 * len(labels)) + ("---:|" if "before" in checkouts else ""))
    for step in steps:
        for n in sizes:
            cells = " | ".join(f"{fmt(best[(label, n, step)])} | {best[(label, n, step)]['rss']:,.0f}" for label in labels)
            ratio = (f" {best[('after', n, step)]['cpu'] / best[('before', n, step)]['cpu']:.2f} |"
                     if "before" in checkouts else "")
            print(f"| {STEP_NAMES[step].format(level=args.level)} | {n:,} | {cells} |{ratio}")
    if len(sizes) > 1:
        lo, hi = sizes[0], sizes[-1]
        print(f"\n{hi:,} / {lo:,} nodes (x{hi / lo:g}), CPU ratio per step:\n")
        for label in labels:
            ratios = ", ".join(f"{s} {best[(label, hi, s)]['cpu'] / best[(label, lo, s)]['cpu']:.2f}" for s in steps)
            print(f"- {label}: {ratios}")
    if peers:
        print(f"\n### Peers on the same {args.model} files, each in a fresh process (CPU s, wall s in parentheses; "
              f"peak RSS MB; time limit {args.peer_timeout:g} s wall)\n")
        print("| tool: step | nodes | s | MB | nodes after |")
        print("|---|---:|---:|---:|---:|")
        for tool in peers:
            for n in sizes:
                run = peer_runs[(tool, n)]
                for step in PEER_STEPS[tool]:
                    if "timeout" in run:
                        print(f"| {tool}: {step} | {n:,} | did not finish in {run['timeout']:g} s | – | – |")
                    else:
                        print(f"| {tool}: {step} | {n:,} | {fmt(run[step])} | {run['max_rss_mb']:,.0f} "
                              f"| {run.get('nodes_after', '–')} |")
    return 0


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
    ap.add_argument("--phases", action="store_true", help="also print optimize's seconds per pass")
    ap.add_argument("--model", choices=["blocks", "chain"], default="blocks",
                    help="with --steps: the generated graph (blocks: big_graph; chain: a Relu chain)")
    ap.add_argument("--steps", help="time these steps instead (load,inspect,optimize,diffself,save)")
    ap.add_argument("--against", help="with --steps: also run every step with this checkout (before/after)")
    ap.add_argument("--rounds", type=int, default=1, help="with --steps: rounds (best CPU kept)")
    ap.add_argument("--peers", help="with --steps: also time these peers on the same files "
                    f"({', '.join(PEER_STEPS)})")
    ap.add_argument("--peer-timeout", type=float, default=600, help="with --peers: wall seconds per peer run")
    ap.add_argument("--worker", nargs=2, metavar=("WHAT", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.repo:
        args.repo = os.path.abspath(args.repo)
    if args.worker:
        print(json.dumps(worker(*args.worker, level=args.level, target=args.target, repo=args.repo)))
        return 0
    if args.steps:
        return steps_table(args)

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
            "pass_seconds": opt.get("pass_seconds", {}),
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
    if args.phases:
        names = sorted(results[hi]["pass_seconds"], key=lambda k: -results[hi]["pass_seconds"][k])
        print(f"\n### Where {opt_step} goes (wall s per pass, all iterations)\n")
        print(f"| pass | {' | '.join(f'{n:,}' for n in sizes)} |")
        print("|---|" + "---:|" * len(sizes))
        for name in names:
            cells = [results[n]["pass_seconds"].get(name, 0.0) for n in sizes]
            if max(cells) >= 0.01:
                print(f"| {name} | {' | '.join(f'{c:.2f}' for c in cells)} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
