"""Fan-out scale: one value read by N nodes (``tests/bad_inputs/make_bad_inputs.fanout_model_bytes``:
x read by N identical Relus, summed by a chain of N Adds, so CSE merges N nodes into one reader of
x). ``optimize`` and ``compare --levels 1`` as a user runs them (fresh process), at several N, so
the growth says whether the cost is linear in fan-out (x2 nodes -> x2 seconds) or not.

    .venv/bin/python bench/fanout.py [--sizes 25000,50000,100000] [--commands optimize,compare]
    .venv/bin/python bench/fanout.py --sizes 100000 --against /tmp/gt-before --rounds 2

Per run: wall seconds, CPU seconds of the whole process tree (graphtool and its onnxruntime child:
the child is stopped and waited for before graphtool exits, so its time is counted) and the peak
RSS of the largest process in it. ``--against PATH`` runs every command with another checkout too
(a git worktree), interleaved, with that checkout's passes (``bench/scale.py``'s mapping).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.bad_inputs.make_bad_inputs import fanout_model_bytes  # noqa: E402

# graphtool's CLI from checkout argv[1] (its passes too), then its onnxruntime child stopped and
# waited for, so that the child's CPU lands in this process's children's rusage
BOOT = """
import importlib.util, os, sys
repo = sys.argv.pop(1)
if repo:
    sys.path.insert(0, repo)
    class RepoPasses:
        def find_spec(self, name, path=None, target=None):
            if name != "graphtool.passes":
                return None
            d = os.path.join(repo, "passes")
            return importlib.util.spec_from_file_location(name, os.path.join(d, "__init__.py"),
                                                          submodule_search_locations=[d])
    sys.meta_path.insert(0, RepoPasses())
sys.argv[0] = "graphtool"
from graphtool.cli import main
from graphtool.runtime import sandbox
try:
    main()
finally:
    sandbox.shutdown()
"""


def run(repo: str | None, argv: list[str]) -> dict:
    """One command in a fresh process; CPU and peak RSS from ``wait4`` (that process and the
    children it waited for: its onnxruntime child)."""
    env = os.environ.copy()
    if repo:
        env["PYTHONPATH"] = repo
    with tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", BOOT, repo or "", *argv], stdout=out, stderr=out,
                                cwd=repo or ROOT, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        tail = out.read().decode(errors="replace")[-400:]
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss": usage.ru_maxrss / 1024,
            "exit": proc.returncode, "stderr": tail}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="25000,50000,100000")
    ap.add_argument("--commands", default="optimize,compare")
    ap.add_argument("--against", help="also run every command with this checkout (before/after)")
    ap.add_argument("--rounds", type=int, default=1, help="runs per checkout and command (the order alternates)")
    ap.add_argument("--repo", help="run 'this' from that checkout instead of the installed graphtool")
    args = ap.parse_args()
    this = os.path.abspath(args.repo) if args.repo else None
    checkouts = {"this": this, **({"against": os.path.abspath(args.against)} if args.against else {})}
    print("| checkout | readers of x | nodes | command | wall s | CPU s (tree) | peak RSS MB | exit | wall s per 1k readers |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for n in map(int, args.sizes.split(",")):
            model = Path(tmp) / f"fanout{n}.onnx"
            model.write_bytes(fanout_model_bytes(n))
            for command in args.commands.split(","):
                argv = ["optimize", str(model), "-o", str(Path(tmp) / "out.onnx")] if command == "optimize" \
                    else ["compare", str(model), "--levels", "1"]
                for round_ in range(args.rounds):
                    order = list(checkouts.items())
                    if round_ % 2:
                        order.reverse()
                    for label, repo in order:
                        r = run(repo, argv)
                        if r["exit"] not in (0, 1):
                            print(f"{label} {command} exit {r['exit']}: {r['stderr']}", file=sys.stderr)
                        print(f"| {label} | {n:,} | {2 * n:,} | {command} | {r['wall']:.1f} | {r['cpu']:.1f} | "
                              f"{r['rss']:,.0f} | {r['exit']} | {r['wall'] / n * 1000:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
